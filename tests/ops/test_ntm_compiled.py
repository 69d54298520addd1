"""The NTM op's "compiled" backend (its reference step under torch.compile, ops/compiled.py)
against the reference loop: features, final state, trace and every gradient by name; a chunked
run with the state carried; and the switch that forces it from the model. One tiny
configuration: each torch.compile costs tens of CPU seconds."""

import pytest
import torch
from torch._dynamo.utils import counters

from conftest import leaves, small_model
from mannlab.models import base
from mannlab.ops import use_kernels
from mannlab.ops.ntm import LSTM, ntm_sequence
from test_ntm_kernels import assert_same, problem, run, to_leaves

pytestmark = pytest.mark.compile


def test_compiled_equals_reference_and_chunks():
    case = problem(LSTM, T=3)
    result, grads = run("compiled", case, "cpu", torch.float64)
    ref, ref_grads = run("reference", case, "cpu", torch.float64)
    assert_same(result, grads, ref, ref_grads, 1e-10)
    # a chunked run with the carried state equals one run (the same compiled step: no recompile)
    x_proj, state, weights, options = case
    x_proj, state, weights = to_leaves(x_proj, state, weights, "cpu", torch.float64)
    graphs = counters["stats"]["unique_graphs"]
    first = ntm_sequence(x_proj[:, :2], state, weights, options, "compiled")
    second = ntm_sequence(x_proj[:, 2:], first.state, weights, options, "compiled")
    assert counters["stats"]["unique_graphs"] == graphs  # other lengths, no new graph
    torch.testing.assert_close(torch.cat([first.features, second.features], 1), result.features.detach())
    for a, b in zip(leaves(second.state), leaves(result.state)):
        torch.testing.assert_close(a, b.detach())


def test_switch_forces_the_compiled_backend():
    model = small_model("ntm", 4, 3, controller="lstm").double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    with use_kernels("compiled"):
        assert base.sequence_backend(model.cell, x, None, False) == "compiled"
        y, state = model(x)
    with use_kernels(False):
        assert base.sequence_backend(model.cell, x, None, False) == ""
        y_ref, state_ref = model(x)
    torch.testing.assert_close(y, y_ref)
    for a, b in zip(leaves(state), leaves(state_ref)):
        torch.testing.assert_close(a, b)
