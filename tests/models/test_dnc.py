"""DNC module: shapes and trace, weightings and usage over many steps, the first write,
gradients and learning (what every model promises, bad input included, is in
test_model_contract.py)."""

import pytest
import torch

from conftest import float64_seq, small_model
from mannlab.models import DNCState, build_model
from mannlab.nn.controllers import CONTROLLERS
from tiny_copy import tiny_copy_losses


def small_dnc(**kw):
    return small_model("dnc", 5, 4, **kw)


def seq(b=3, t=6, i=5):
    return float64_seq(b, t, i, torch.randn)


@pytest.mark.parametrize("controller", sorted(CONTROLLERS))
@pytest.mark.parametrize("read_heads", [1, 3])
def test_shapes_and_trace(controller, read_heads):
    model = small_dnc(controller=controller, read_heads=read_heads)
    y, state, trace = model(seq(), return_trace=True)
    B, T, R, N, W = 3, 6, read_heads, 7, 3
    assert y.shape == (B, T, 4)
    assert isinstance(state, DNCState)
    assert state.memory.shape == (B, N, W) and state.links.shape == (B, N, N)
    shapes = dict(
        read_weights=(R, N),
        write_weights=(1, N),
        read_vectors=(R, W),
        usage=(N,),
        allocation=(N,),
        precedence=(N,),
        links=(N, N),
        read_modes=(R, 3),
        free_gates=(R,),
        allocation_gate=(),
        write_gate=(),
        memory=(N, W),
    )
    assert set(shapes) == set(trace._fields)
    for name, shape in shapes.items():
        assert getattr(trace, name).shape == (B, T, *shape), name
    ones = torch.ones(B, T, R, dtype=torch.float64)
    assert torch.allclose(trace.read_modes.sum(-1), ones)


def test_read_and_write_weights_sum_to_at_most_one_over_many_steps():
    model = small_dnc(read_heads=2)
    with torch.no_grad():
        model.cell.interface.weight.mul_(5)  # sharper, more varied gates and modes
        _, _, trace = model(3 * seq(b=4, t=60), return_trace=True)
    for w in (trace.read_weights, trace.write_weights, trace.allocation[:, :, None]):
        assert (w >= 0).all() and (w.sum(-1) <= 1 + 1e-12).all()
    assert (trace.usage >= 0).all() and (trace.usage <= 1 + 1e-12).all()
    assert torch.equal(
        torch.diagonal(trace.links, dim1=-2, dim2=-1), torch.zeros(4, 60, 7, dtype=torch.float64)
    )


def test_zero_initial_state_and_first_write_goes_to_the_first_free_slot():
    model = small_dnc()
    state = model.initial_state(2)
    for name in DNCState._fields[1:]:
        assert not getattr(state, name).any(), name
    _, _, trace = model(seq(b=2, t=1), return_trace=True)
    assert torch.equal(trace.allocation[:, 0], torch.eye(7, dtype=torch.float64)[[0, 0]])


def test_every_parameter_gets_a_gradient():
    model = small_dnc(read_heads=2)
    y, _ = model(seq())
    y.sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_learns_tiny_copy():
    before, after = tiny_copy_losses(
        lambda task: build_model(
            "dnc", task.input_size, task.output_size, controller_size=24, memory_slots=8, memory_width=6
        )
    )
    assert after < 0.75 * before, f"validation BCE {before:.3f} -> {after:.3f}"
