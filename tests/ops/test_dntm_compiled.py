"""The D-NTM's "compiled" backend (its reference step under torch.compile, ops/compiled.py)
against the reference loop: features, final state, trace and every gradient by name; a chunked
run with the state carried; another 1/τ on the same compiled step (no recompile); the switch
that makes the model take it. One tiny configuration: each torch.compile costs tens of CPU
seconds."""

import pytest
from torch._dynamo.utils import counters

from mannlab.ops.dntm import DNTMInputs, DNTMOptions, dntm_sequence
from test_dntm_ops import T, assert_same, differentiable, grads_by_name, joined_result, loss_of, problem, run

pytestmark = pytest.mark.compile


def test_compiled_equals_reference_and_chunks():
    options = DNTMOptions(mode="gumbel", addressing_steps=2, nop=True, inverse_temperature=2.5)
    records = problem(options)
    compiled = run(records, options, "compiled")
    assert_same(compiled, run(records, options, "reference"))
    inputs, J = records[0], options.addressing_steps

    def part(start, stop):
        return DNTMInputs(inputs.projected[:, start:stop], inputs.draws[start * J : stop * J])

    first = dntm_sequence(part(0, 4), *records[1:], options, backend="compiled")
    rest = dntm_sequence(part(4, T), first.state, records[2], options, backend="compiled")
    joined = joined_result(first, rest)
    assert_same((joined, grads_by_name(loss_of(joined), differentiable(*records))), compiled, atol=1e-12)
    # a schedule's next 1/τ is a value of the same compiled step, not a new configuration
    graphs = counters["stats"]["unique_graphs"]
    hotter = options._replace(inverse_temperature=4.0)
    assert_same(run(records, hotter, "compiled"), run(records, hotter, "reference"))
    assert counters["stats"]["unique_graphs"] == graphs
