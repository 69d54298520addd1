"""NTM and LSTM modules: shapes, cell == sequence, chunked == whole, gradients, bad input."""
import pytest
import torch

import mannlab
from mannlab import ConfigError, detach_state
from mannlab.models import build_model

SMALL = dict(controller_size=6, memory_slots=7, memory_width=3, shift_range=1)


def small_ntm(**kw):
    torch.manual_seed(0)
    return mannlab.NTM(5, 4, **{**SMALL, **kw}).double()


def seq(b=3, t=6, i=5):
    return torch.randn(b, t, i, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("controller", ["lstm", "fnn"])
@pytest.mark.parametrize("heads", [(1, 1), (2, 3)])
def test_shapes_and_trace(controller, heads):
    model = small_ntm(controller=controller, read_heads=heads[0], write_heads=heads[1])
    y, state, trace = model(seq(), return_trace=True)
    assert y.shape == (3, 6, 4)
    assert trace.read_weights.shape == (3, 6, heads[0], 7)
    assert trace.write_weights.shape == (3, 6, heads[1], 7)
    assert trace.memory.shape == (3, 6, 7, 3)
    assert state.memory.shape == (3, 7, 3)
    # NTM weightings are distributions over the slots.
    assert torch.allclose(trace.read_weights.sum(-1), torch.ones(3, 6, heads[0], dtype=torch.float64))
    assert torch.allclose(trace.write_weights.sum(-1), torch.ones(3, 6, heads[1], dtype=torch.float64))


def test_output_size_none_gives_features():
    model = mannlab.NTM(5, None, **SMALL, read_heads=2)
    y, _ = model(torch.randn(2, 3, 5))
    assert y.shape == (2, 3, 6 + 2 * 3) and model.output_features == 12


@pytest.mark.parametrize("controller", ["lstm", "fnn"])
def test_cell_loop_equals_sequence_module(controller):
    model = small_ntm(controller=controller, read_heads=2, write_heads=2)
    x = seq()
    y, final = model(x)
    state, feats = None, []
    for step in range(x.shape[1]):
        f, state = model.cell(x[:, step], state)
        feats.append(f)
    assert torch.allclose(model.head(torch.stack(feats, 1)), y, atol=1e-12)
    assert torch.allclose(state.memory, final.memory, atol=1e-12)


def test_chunked_run_with_carried_state_equals_one_run():
    model = small_ntm()
    x = seq(t=9)
    y, final = model(x)
    y1, s = model(x[:, :4])
    y2, s = model(x[:, 4:], detach_state(s))
    assert torch.allclose(torch.cat([y1, y2], 1), y, atol=1e-12)
    for a, b in zip(s[1:], final[1:]):
        assert torch.allclose(a, b, atol=1e-12)


def test_memory_resets_per_call():
    model = small_ntm()
    x = seq()
    assert torch.equal(model(x)[0], model(x)[0])


def test_batch_elements_are_independent():
    model = small_ntm()
    x = seq(b=4)
    y, _ = model(x)
    y1, _ = model(x[2:3])
    assert torch.allclose(y[2:3], y1, atol=1e-12)


def test_batch_first_false_matches():
    model = small_ntm()
    x = seq()
    y, _ = model(x)
    model.batch_first = False
    y_tb, _ = model(x.transpose(0, 1))
    assert torch.allclose(y_tb.transpose(0, 1), y)


def test_gradcheck_through_the_whole_model():
    model = small_ntm(read_heads=2, write_heads=2)
    x = seq(b=2, t=3).requires_grad_()
    assert torch.autograd.gradcheck(lambda inp: model(inp)[0], (x,))


def test_initial_state_is_learned():
    model = small_ntm()
    y, _ = model(seq())
    y.sum().backward()
    cell = model.cell
    for p in (cell.memory_init, cell.read_init, cell.read_weight_logits, cell.controller.h0):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_lstm_baseline_same_convention():
    torch.manual_seed(0)
    model = mannlab.LSTM(5, 4, hidden_size=8).double()
    x = seq(t=8)
    y, final = model(x)
    assert y.shape == (3, 8, 4)
    y1, s = model(x[:, :5])
    y2, s = model(x[:, 5:], s)
    assert torch.allclose(torch.cat([y1, y2], 1), y, atol=1e-12)
    _, _, trace = model(x, return_trace=True)
    assert trace.hidden.shape == (3, 8, 8)


@pytest.mark.parametrize("bad, error, message", [
    (torch.randn(2, 3, 6), ValueError, "input_size=5"),
    (torch.randn(3, 5), ValueError, "3-D input"),
    (torch.ones(2, 3, 5, dtype=torch.long), TypeError, "floating-point"),
    (torch.randn(2, 3, 5, dtype=torch.float64), TypeError, "float32"),
    (torch.full((2, 3, 5), float("nan")), ValueError, "NaN"),
    ([[1.0]], TypeError, "torch.Tensor"),
])
def test_bad_input_gives_clear_error(bad, error, message):
    model = mannlab.NTM(5, 4, **SMALL)
    with pytest.raises(error, match=message):
        model(bad)


@pytest.mark.parametrize("kwargs, message", [
    (dict(memory_slots=0), "memory_slots"),
    (dict(memory_width=-1), "memory_width"),
    (dict(read_heads=0), "read_heads"),
    (dict(shift_range=4), "shift_range"),
    (dict(controller="gru2"), "valid: \\[.*'pnr-lstm'"),
])
def test_invalid_sizes_raise_config_error(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        mannlab.NTM(5, 4, **{**SMALL, **kwargs})


def test_registry_rejects_unknown_names_and_options():
    with pytest.raises(ConfigError, match="valid models: .*lstm, ntm"):
        build_model("ntmm", 5, 4)
    with pytest.raises(ConfigError, match="memory_slots"):
        build_model("ntm", 5, 4, memory_slot=3)
    assert isinstance(build_model("ntm", 5, 4, **SMALL), mannlab.NTM)
