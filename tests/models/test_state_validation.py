"""Every model checks a state passed back to it against the input before any kernel reads
it: wrong batch, sizes, layout, type, dtype or non-finite values are clear errors naming the
field, never memory corruption, silent broadcasting or a kernel typing error. A generated
corpus of damaged states (hypothesis) checks that nothing else gets through."""

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import leaves, small_model
from mannlab import map_state
from mannlab.models import MODELS

NAMES = sorted(MODELS)
EXAMPLES = int(os.environ.get("MANNLAB_FUZZ_EXAMPLES", "30"))
CLEAR = (TypeError, ValueError)


def model_and_state(name, batch=2):
    torch.manual_seed(0)
    model = small_model(name, 5, 4).eval()
    x = torch.rand(batch, 6, 5, dtype=torch.float64)
    _, state = model(x)
    return model, state


@pytest.mark.parametrize("name", NAMES)
def test_state_of_another_batch_is_refused(name):
    model, state = model_and_state(name, batch=1)
    with pytest.raises(ValueError, match=r"state field .* must have shape .* got"):
        model(torch.rand(2, 6, 5, dtype=torch.float64), state)


@pytest.mark.parametrize("name", NAMES)
def test_non_finite_state_is_refused(name):
    model, state = model_and_state(name)
    for bad in (float("nan"), float("inf")):
        first = [True]

        def spoil(t):
            if first[0] and t.is_floating_point():
                first[0] = False
                return t.clone().fill_(bad)
            return t

        with pytest.raises(ValueError, match="NaN or infinity"):
            model(torch.rand(2, 6, 5, dtype=torch.float64), map_state(spoil, state))


@pytest.mark.parametrize("name", NAMES)
def test_state_type_and_dtype_are_checked(name):
    model, state = model_and_state(name)
    x = torch.rand(2, 6, 5, dtype=torch.float64)
    with pytest.raises(TypeError, match="must be of type"):
        model(x, tuple(state))
    with pytest.raises(TypeError, match="must be torch.float64"):
        model(x, map_state(lambda t: t.float() if t.is_floating_point() else t, state))
    model(x, state)  # the state it returned is accepted


@pytest.mark.parametrize("name", NAMES)
def test_cell_checks_its_input_and_state(name):
    model, _ = model_and_state(name)
    if not hasattr(model, "cell"):
        pytest.skip("no one-step cell")
    cell = model.cell
    with pytest.raises(ValueError, match="NaN or infinity"):
        cell(torch.full((2, 5), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="empty input"):
        cell(torch.rand(0, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="input_size=5"):
        cell(torch.rand(2, 7, dtype=torch.float64))
    _, state = cell(torch.rand(1, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="must have shape"):
        cell(torch.rand(2, 5, dtype=torch.float64), state)


def damage(state, field, how):
    """``state`` with its ``field``-th tensor damaged in one of several ways."""
    count = [0]
    target = field % len(leaves(state))

    def hit(t):
        i, count[0] = count[0], count[0] + 1
        if i != target:
            return t
        if how == "batch":
            return torch.cat([t, t], 0)
        if how == "drop_batch":
            return t[:1] if t.shape[0] > 1 else t[:0]
        if how == "extra_dim":
            return t.unsqueeze(-1)
        if how == "flatten":
            return t.reshape(t.shape[0], -1)[:, :-1] if t.numel() > t.shape[0] else t.reshape(-1)[:0]
        if how == "transpose":
            return t.transpose(-1, -2) if t.dim() > 1 and t.shape[-1] != t.shape[-2] else t.unsqueeze(0)
        if how == "nan":
            return t.clone().fill_(float("nan")) if t.is_floating_point() else t.unsqueeze(0)
        if how == "dtype":
            return t.float() if t.dtype == torch.float64 else t.double()
        if how == "int":
            return t.long() if t.is_floating_point() else t.double()  # the other kind
        if how == "not_tensor":
            return t.tolist()
        raise AssertionError(how)

    return map_state(hit, state)


@pytest.mark.parametrize("name", NAMES)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    field=st.integers(0, 64),
    how=st.sampled_from(
        ["batch", "drop_batch", "extra_dim", "flatten", "transpose", "nan", "dtype", "int", "not_tensor"]
    ),
)
def test_damaged_states_are_clear_errors(name, field, how):
    model, state = MODEL_STATES[name]
    with pytest.raises(CLEAR, match="state"):
        model(torch.rand(2, 6, 5, dtype=torch.float64), damage(state, field, how))


MODEL_STATES = {name: model_and_state(name) for name in NAMES}
