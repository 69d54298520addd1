"""TARDIS's "compiled" backend (its reference step under torch.compile, ops/compiled.py)
against the reference loop: features, final state, trace and every gradient by name; a chunked
run with the state carried; another scheduled 1/τ on the same compiled step (no recompile);
the switch that makes the model take it. One tiny configuration: each torch.compile costs tens
of CPU seconds."""

import pytest
from torch._dynamo.utils import counters

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
