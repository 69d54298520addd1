"""DNC module: shapes, cell == sequence, chunked == whole, gradients, bad input, learning."""
import pytest
import torch

import mannlab
from mannlab import ConfigError, detach_state
from mannlab.controllers import CONTROLLERS
from mannlab.models import DNCState, build_model
from tiny_copy import tiny_copy_losses

SMALL = dict(controller_size=6, memory_slots=7, memory_width=3)


def small_dnc(**kw):
    torch.manual_seed(0)
    return mannlab.DNC(5, 4, **{**SMALL, **kw}).double()


def seq(b=3, t=6, i=5):
    return torch.randn(b, t, i, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("controller", sorted(CONTROLLERS))
@pytest.mark.parametrize("read_heads", [1, 3])
def test_shapes_and_trace(controller, read_heads):
    model = small_dnc(controller=controller, read_heads=read_heads)
    y, state, trace = model(seq(), return_trace=True)
    B, T, R, N, W = 3, 6, read_heads, 7, 3
    assert y.shape == (B, T, 4)
    assert isinstance(state, DNCState)
    assert state.memory.shape == (B, N, W) and state.links.shape == (B, N, N)
    shapes = dict(read_weights=(R, N), write_weights=(1, N), read_vectors=(R, W), usage=(N,),
                  allocation=(N,), precedence=(N,), links=(N, N), read_modes=(R, 3),
                  free_gates=(R,), allocation_gate=(), write_gate=(), memory=(N, W))
    assert set(shapes) == set(trace._fields)
    for name, shape in shapes.items():
        assert getattr(trace, name).shape == (B, T, *shape), name
    ones = torch.ones(B, T, R, dtype=torch.float64)
    assert torch.allclose(trace.read_modes.sum(-1), ones)


def test_read_and_write_weights_sum_to_at_most_one_over_many_steps():
    model = small_dnc(read_heads=2)
    with torch.no_grad():
        model.cell.interface.weight.mul_(5)     # sharper, more varied gates and modes
        _, _, trace = model(3 * seq(b=4, t=60), return_trace=True)
    for w in (trace.read_weights, trace.write_weights, trace.allocation[:, :, None]):
        assert (w >= 0).all() and (w.sum(-1) <= 1 + 1e-12).all()
    assert (trace.usage >= 0).all() and (trace.usage <= 1 + 1e-12).all()
    assert torch.equal(torch.diagonal(trace.links, dim1=-2, dim2=-1),
                       torch.zeros(4, 60, 7, dtype=torch.float64))


def test_zero_initial_state_and_first_write_goes_to_the_first_free_slot():
    model = small_dnc()
    state = model.initial_state(2)
    for name in DNCState._fields[1:]:
        assert not getattr(state, name).any(), name
    _, _, trace = model(seq(b=2, t=1), return_trace=True)
    assert torch.equal(trace.allocation[:, 0], torch.eye(7, dtype=torch.float64)[[0, 0]])


def test_output_size_none_gives_features():
    model = mannlab.DNC(5, None, **SMALL, read_heads=2)
    y, _ = model(torch.randn(2, 3, 5))
    assert y.shape == (2, 3, 6 + 2 * 3) and model.output_features == 12


@pytest.mark.parametrize("controller", ["lstm", "fnn"])
def test_cell_loop_equals_sequence_module(controller):
    model = small_dnc(controller=controller, read_heads=2)
    x = seq()
    y, final = model(x)
    state, feats = None, []
    for step in range(x.shape[1]):
        f, state = model.cell(x[:, step], state)
        feats.append(f)
    assert torch.allclose(model.head(torch.stack(feats, 1)), y, atol=1e-12)
    for a, b in zip(state[1:], final[1:]):
        assert torch.allclose(a, b, atol=1e-12)


def test_chunked_run_with_carried_state_equals_one_run():
    model = small_dnc(read_heads=2)
    x = seq(t=9)
    y, final = model(x)
    y1, s = model(x[:, :4])
    y2, s = model(x[:, 4:], detach_state(s))
    assert torch.allclose(torch.cat([y1, y2], 1), y, atol=1e-12)
    for a, b in zip(s[1:], final[1:]):
        assert torch.allclose(a, b, atol=1e-12)


def test_memory_resets_per_call():
    model = small_dnc()
    x = seq()
    assert torch.equal(model(x)[0], model(x)[0])


def test_batch_elements_are_independent():
    model = small_dnc(read_heads=2)
    x = seq(b=4)
    y, _ = model(x)
    y1, _ = model(x[2:3])
    assert torch.allclose(y[2:3], y1, atol=1e-12)


def test_batch_first_false_matches():
    model = small_dnc()
    x = seq()
    y, _ = model(x)
    model.batch_first = False
    y_tb, _ = model(x.transpose(0, 1))
    assert torch.allclose(y_tb.transpose(0, 1), y)


def test_gradcheck_through_the_whole_model():
    model = small_dnc(read_heads=2)
    x = seq(b=2, t=3).requires_grad_()
    assert torch.autograd.gradcheck(lambda inp: model(inp)[0], (x,))


def test_every_parameter_gets_a_gradient():
    model = small_dnc(read_heads=2)
    y, _ = model(seq())
    y.sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("bad, error, message", [
    (torch.randn(2, 3, 6), ValueError, "input_size=5"),
    (torch.randn(3, 5), ValueError, "3-D input"),
    (torch.ones(2, 3, 5, dtype=torch.long), TypeError, "floating-point"),
    (torch.randn(2, 3, 5, dtype=torch.float64), TypeError, "float32"),
    (torch.full((2, 3, 5), float("nan")), ValueError, "NaN"),
    ([[1.0]], TypeError, "torch.Tensor"),
])
def test_bad_input_gives_clear_error(bad, error, message):
    model = mannlab.DNC(5, 4, **SMALL)
    with pytest.raises(error, match=message):
        model(bad)


@pytest.mark.parametrize("kwargs, message", [
    (dict(memory_slots=0), "memory_slots"),
    (dict(memory_width=-1), "memory_width"),
    (dict(read_heads=0), "read_heads"),
    (dict(controller_size=2.5), "controller_size"),
    (dict(controller="gru2"), "unknown controller 'gru2'; valid: "),
])
def test_invalid_sizes_raise_config_error(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        mannlab.DNC(5, 4, **{**SMALL, **kwargs})


def test_registry_builds_dnc_and_rejects_unknown_options():
    assert isinstance(build_model("dnc", 5, 4, **SMALL), mannlab.DNC)
    with pytest.raises(ConfigError, match="memory_slots"):
        build_model("dnc", 5, 4, memory_slot=3)
    with pytest.raises(ConfigError, match="dnc"):
        build_model("dncc", 5, 4)


def test_learns_tiny_copy():
    before, after = tiny_copy_losses(lambda task: build_model(
        "dnc", task.input_size, task.output_size, controller_size=24, memory_slots=8,
        memory_width=6))
    assert after < 0.75 * before, f"validation BCE {before:.3f} -> {after:.3f}"
