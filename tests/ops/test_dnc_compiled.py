"""The DNC op's "compiled" backend (its reference step under torch.compile, ops/compiled.py)
against the reference loop: features, final state and every gradient by name, and a chunked
run with the state carried (the same compiled step: no recompile per length). One tiny
configuration: each torch.compile costs tens of CPU seconds."""

import pytest
import torch

from mannlab.ops.dnc import DNCOptions, dnc_sequence
from mannlab.ops.dnc.records import LSTM, TANH
from test_dnc_ops import assert_same, grads_by_name, loss_of, named_leaves, problem, run

pytestmark = pytest.mark.compile


def test_compiled_equals_reference_and_chunks():
    records = problem(LSTM)
    options = DNCOptions(LSTM, TANH, False, backward=True)
    compiled = run(records, options, "compiled")
    assert_same(compiled, run(records, options, "reference"))
    x_proj, state, weights = records
    first, carry, _ = dnc_sequence(x_proj[:, :3], state, weights, options, backend="compiled")
    rest, final, _ = dnc_sequence(x_proj[:, 3:], carry, weights, options, backend="compiled")
    features = torch.cat([first, rest], 1)
    grads = grads_by_name(loss_of(features, final), named_leaves(*records))
    assert_same((features, final, grads), compiled, atol=1e-12)
