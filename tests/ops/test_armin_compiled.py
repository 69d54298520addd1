"""ARMIN's "compiled" backend (its reference step under torch.compile, ops/compiled.py) against
the reference loop: outputs, final state, trace and every gradient by name; a chunked run with
the state carried; another 1/τ on the same compiled step (no recompile); the switch that makes
the model take it. One tiny configuration: each torch.compile costs tens of CPU seconds."""

import pytest
import torch
from torch._dynamo.utils import counters

from mannlab.ops.armin import ARMINInputs, ARMINOptions, armin_sequence
from test_armin_kernels import assert_same, problem, run

pytestmark = pytest.mark.compile


def test_compiled_equals_reference_and_chunks():
    records = problem("gumbel", width=3, zoneout=True)
    options = ARMINOptions(mode="gumbel", inverse_temperature=2.0, trace=True)
    compiled = run(*records, options, "compiled")
    assert_same(compiled, run(*records, options, "reference"), atol=1e-10)
    traces = [armin_sequence(*records, options, b).trace for b in ("compiled", "reference")]
    for name, got, want in zip(traces[0]._fields, *traces):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0, msg=name)
    inputs, state, weights = records

    def part(time):
        return ARMINInputs(inputs.projected[:, time], inputs.noise[time], inputs.zoneout[time])

    first = armin_sequence(part(slice(None, 4)), state, weights, options, "compiled")
    rest = armin_sequence(part(slice(4, None)), first.state, weights, options, "compiled")
    torch.testing.assert_close(torch.cat([first.features, rest.features], 1), compiled[0], atol=1e-12, rtol=0)
    for name in ("hidden", "memory", "steps"):
        torch.testing.assert_close(getattr(rest.state, name), getattr(compiled[1], name), atol=1e-12, rtol=0)
    # a schedule's next 1/τ is a value of the same compiled step, not a new configuration
    graphs = counters["stats"]["unique_graphs"]
    hotter = options._replace(inverse_temperature=5.0)
    assert_same(run(*records, hotter, "compiled"), run(*records, hotter, "reference"), atol=1e-10)
    assert counters["stats"]["unique_graphs"] == graphs
