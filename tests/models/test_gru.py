"""The GRU baseline (SST's encoder): torch.nn.GRU's equations with the library's conventions.
The registry contract (shapes, state checks, chunked runs, errors) is in
test_model_contract.py and test_state_validation.py; here what only the GRU does."""

import pytest
import torch

from conftest import float64_seq, small_model
from mannlab import GRU, ConfigError, build_model
from mannlab.models import GRUState


def test_equals_torch_gru_with_its_weights():
    model = small_model("gru", 5, 4, num_layers=2)
    reference = torch.nn.GRU(5, 8, 2, batch_first=True).double()
    reference.load_state_dict(model.gru.state_dict())
    with torch.no_grad():
        model.h0.normal_()
    x = float64_seq(3, 7, 5)
    y, state = model(x)
    out, h = reference(x, model.h0.expand(-1, 3, -1).contiguous())
    assert torch.allclose(y, model.head(out), atol=1e-12)
    assert isinstance(state, GRUState) and torch.allclose(state.hidden, h, atol=1e-12)


def test_one_step_equations_by_hand():
    """h_1 from h_0 = 0 on one step: (1 - z) n with r, z, n from the fused weights."""
    model = small_model("gru", 5, None)
    x = float64_seq(2, 1, 5)[:, 0]
    w, b, bh = model.gru.weight_ih_l0, model.gru.bias_ih_l0, model.gru.bias_hh_l0
    a = x @ w.T + b
    r = torch.sigmoid(a[:, :8] + bh[:8])
    z = torch.sigmoid(a[:, 8:16] + bh[8:16])
    n = torch.tanh(a[:, 16:] + r * bh[16:])
    y, _ = model(x[:, None])
    assert torch.allclose(y[:, 0], (1 - z) * n, atol=1e-12)


def test_initial_state_is_learned_and_gets_a_gradient():
    model = small_model("gru", 5, 4)
    y, _ = model(float64_seq(2, 3, 5))
    y.sum().backward()
    assert model.h0.grad is not None and model.h0.grad.abs().sum() > 0


def test_dropout_on_the_output_features_only_in_training():
    model = small_model("gru", 5, None, dropout=0.5)
    x = float64_seq(4, 6, 5)
    torch.manual_seed(0)
    y_train, s_train = model(x)
    assert (y_train == 0).any()
    model.eval()
    y_eval, s_eval = model(x)
    assert not (y_eval == 0).any()
    assert torch.allclose(s_train.hidden, s_eval.hidden)  # the recurrence never sees the dropout


def test_exported_and_built_by_name():
    assert type(build_model("GRU", 3, 2)) is GRU
    with pytest.raises(ConfigError, match="dropout must be a probability"):
        GRU(3, 2, dropout=-0.1)
