"""torch.compile(model) on the NTM: a few training steps in one graph, without a graph break.

The backend is "aot_eager": it traces forward and backward as inductor does (graph breaks
come from tracing, not from code generation) without inductor's C++ compile, which takes
minutes on a small CPU. The kernels are left switched on: while torch.compile traces,
dispatch takes the tensor path (numba cannot be traced).
"""

import pytest
import torch
from torch._dynamo.utils import counters

import mannlab

pytestmark = pytest.mark.compile  # torch.compile traces again in every process


def test_ntm_compiles_without_graph_breaks():
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = mannlab.NTM(3, 2, controller_size=6, memory_slots=5, memory_width=3)
    eager = mannlab.NTM(3, 2, controller_size=6, memory_slots=5, memory_width=3)
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="aot_eager")
    optimisers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    for step in range(3):
        x = torch.rand(2, 4, 3, generator=torch.Generator().manual_seed(step))
        losses = []
        for forward, optimiser in zip((compiled, eager), optimisers):
            loss = forward(x)[0].pow(2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1])
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1  # compiled once, reused each step
    torch._dynamo.reset()
