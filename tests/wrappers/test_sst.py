"""The SST wrapper (ARMIN section 4.3, appendix C.3): an input projection with dropout in front
of any registered model whose head gives K anchor logits per step; a long video runs in chunks
with the state carried, exactly as in one call."""

import pytest
import torch

from conftest import SMALL, leaves
from mannlab import ConfigError, detach_state
from mannlab.models import MODELS
from mannlab.wrappers import SST, model_for_task

NAMES = sorted(MODELS)  # every registered model can be SST's encoder
D, K, P = 7, 5, 6


def sst(name, **kw):
    torch.manual_seed(0)
    return SST(D, K, name, projection_size=P, **{**SMALL[name], **kw}).double()


def features(b=2, t=11):
    return torch.rand(b, t, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", NAMES)
def test_shapes_and_state(name):
    model = sst(name)
    y, state = model(features())
    assert y.shape == (2, 11, K)
    assert model.core.input_size == P and model.core.output_size == K
    expected = model.core.initial_state(2, dtype=torch.float64)
    assert type(state) is type(expected)  # the model's own state
    assert [t.shape for t in leaves(state)] == [t.shape for t in leaves(expected)]
    y, state, trace = model(features(), return_trace=True)
    assert trace is not None


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_chunked_run_with_carried_state_equals_one_run(name, training):
    # with dropout in evaluation (off), without it in training (ARMIN's draws continue across chunks)
    model = sst(name, **({} if training else {"input_dropout": 0.3, "output_dropout": 0.3}))
    model.train(training)
    x = features(t=13)
    torch.manual_seed(5)
    y, final = model(x)
    torch.manual_seed(5)
    ys, state = [], None
    for chunk in x.tensor_split([4, 9], dim=1):
        y_chunk, state = model(chunk, None if state is None else detach_state(state))
        ys.append(y_chunk)
    assert torch.allclose(torch.cat(ys, 1), y, atol=1e-12)
    for a, b in zip(leaves(state), leaves(final), strict=True):
        assert torch.allclose(a.double(), b.double(), atol=1e-12)


def test_dropout_on_input_and_output_only_in_training():
    model = sst("gru", input_dropout=0.5, output_dropout=0.5)
    x = features()
    model.eval()
    y_eval, _ = model(x)
    plain = SST(D, K, "gru", projection_size=P, **SMALL["gru"]).double()
    plain.load_state_dict(model.state_dict())
    assert torch.equal(plain.eval()(x)[0], y_eval)
    model.train()
    torch.manual_seed(0)
    y1, _ = model(x)
    torch.manual_seed(1)
    y2, _ = model(x)
    assert not torch.allclose(y1, y2)


def test_state_dict_prefixes_and_the_forwarded_interface():
    model = sst("armin", temperature_every=2)
    keys = set(model.state_dict())
    assert {"projection.weight", "projection.bias"} <= keys
    assert all(k.startswith(("projection.", "core.")) for k in keys)
    maximum = model.core.temperature_schedule[1]
    model.begin_step(2)  # the trainer's per-minibatch hook reaches the model: 1/tau = 1 + 2 // 2
    assert model.core.inverse_temperature == min(2.0, maximum)
    assert model.initial_state(2)  # the model's
    assert model.wrapped is model.core and model.kernel_backends() == model.core.kernel_backends()
    assert model.uses_aux_loss is False and model.aux_loss_scores is False
    assert not hasattr(model, "temperature_schedule")  # nothing else passes through


def test_options_are_checked():
    with pytest.raises(ConfigError, match="projection_size must be a positive integer"):
        SST(D, K, "gru", projection_size=0)
    with pytest.raises(ConfigError, match=r"input_dropout must be a probability in \[0, 1\)"):
        SST(D, K, "gru", input_dropout=1.0)
    with pytest.raises(ConfigError, match="SST's own: projection_size, input_dropout, output_dropout"):
        SST(D, K, "gru", hiden_size=3)


def test_input_is_checked_against_the_feature_size():
    with pytest.raises(ValueError, match="SST expects input_size=7"):
        sst("gru")(torch.rand(1, 3, 4, dtype=torch.float64))


def test_model_for_task_wraps_snippet_tasks():
    class Snippets:
        input_kind, input_size, output_size = "snippets", D, K

    model = model_for_task(Snippets(), "lstm", hidden_size=4, projection_size=3)
    assert isinstance(model, SST) and model.projection.out_features == 3
    assert model(torch.rand(2, 5, D))[0].shape == (2, 5, K)
