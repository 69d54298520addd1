"""NTM and LSTM modules: shapes and trace, the learned initial state (what every model
promises, bad input included, is in test_model_contract.py)."""

import pytest
import torch

from conftest import float64_seq, small_model


def small_ntm(**kw):
    return small_model("ntm", 5, 4, **kw)


def seq(b=3, t=6, i=5):
    return float64_seq(b, t, i, torch.randn)


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


def test_initial_state_is_learned():
    model = small_ntm()
    y, _ = model(seq())
    y.sum().backward()
    cell = model.cell
    for p in (cell.memory_init, cell.read_init, cell.read_weight_logits, cell.controller.h0):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_lstm_baseline_same_convention():
    model = small_model("lstm", 5, 4)
    y, _, trace = model(seq(t=8), return_trace=True)
    assert y.shape == (3, 8, 4)
    assert trace.hidden.shape == (3, 8, 8)
