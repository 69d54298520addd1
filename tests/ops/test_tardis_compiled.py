"""TARDIS's "compiled" backend (its reference step under torch.compile, ops/compiled.py)
against the reference loop: features, final state, trace and every gradient by name; a chunked
run with the state carried; another scheduled 1/τ on the same compiled step (no recompile);
the switch that makes the model take it. One tiny configuration: each torch.compile costs tens
of CPU seconds."""

import pytest
import torch
from torch._dynamo.utils import counters

from conftest import small_model
from mannlab.models import base
from mannlab.ops import use_kernels
from mannlab.ops.tardis import TARDISInputs, TARDISOptions, tardis_sequence
from test_tardis_ops import assert_same, differentiable, grads_by_name, joined_result, loss_of, problem, run

pytestmark = pytest.mark.compile


def test_compiled_equals_reference_and_chunks():
    records = problem(train=True, layer_norm=True, dropout=True)
    options = TARDISOptions(mode="gumbel", learned_temperature=False, inverse_temperature=2.5)
    compiled = run(records, options, "compiled")
    assert_same(compiled, run(records, options, "reference"))
    inputs = records[0]

    def part(time):
        return TARDISInputs(inputs.gates[:, time], inputs.read[:, time], *(v[time] for v in inputs[2:]))

    first = tardis_sequence(part(slice(None, 4)), *records[1:], options, backend="compiled")
    rest = tardis_sequence(part(slice(4, None)), first.state, records[2], options, backend="compiled")
    joined = joined_result(first, rest)
    assert_same((joined, grads_by_name(loss_of(joined), differentiable(*records))), compiled, atol=1e-12)
    # a schedule's next 1/τ is a value of the same compiled step, not a new configuration
    graphs = counters["stats"]["unique_graphs"]
    hotter = options._replace(inverse_temperature=4.0)
    assert_same(run(records, hotter, "compiled"), run(records, hotter, "reference"))
    assert counters["stats"]["unique_graphs"] == graphs


@pytest.mark.parametrize("with_trace", [False, True])
def test_switch_chooses_the_compiled_backend(with_trace):
    """The model's pass takes the compiled step where forced (the trace too), else not."""
    model = small_model("tardis", 4, 3)
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    with use_kernels("compiled"):
        assert base.sequence_backend(model.cell, x, None, with_trace) == "compiled"
    with use_kernels(False):
        assert base.sequence_backend(model.cell, x, None, with_trace) == ""
