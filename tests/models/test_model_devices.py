"""Models build their states and every tensor they make on the input's device and dtype.

This machine has no GPU, so the device check runs every model on the "meta" device: tensors
with shapes and no values, on which every operation still checks devices. An operation that
mixes a meta tensor with a (non-scalar) CPU one fails as it would with a CUDA one, so a state,
mask, noise draw or index made without the input's device fails here. The compiled kernels
never run there (dispatch: CPU float32/float64 only).
"""

import pytest
import torch

from conftest import leaves, small_model
from mannlab.models import MODELS
from mannlab.ops import dispatch
from test_autocast import CONFIGS, _id


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_every_model_runs_on_the_input_device(config, training):
    name, kw = config
    model = small_model(name, 3, 2, **kw).float().train(training).to("meta")
    x = torch.empty(2, 5, 3, device="meta")
    y, state, trace = model(x[:, :2], return_trace=True)
    y2, state = model(x[:, 2:], state)  # a carried state passes the check
    torch.cat([y, y2], dim=1).sum().backward()
    made = [y, y2, *leaves(state), *leaves(trace)]
    assert {t.device.type for t in made} == {"meta"}
    assert all(p.grad is None or p.grad.device.type == "meta" for p in model.parameters())


@pytest.mark.parametrize("name", list(MODELS))
def test_initial_state_takes_the_device_and_dtype_asked_for(name):
    model = small_model(name, 3, 2).float()
    state = model.initial_state(2, device=torch.device("cpu"), dtype=torch.float64)
    floats = [t for t in leaves(state) if t.is_floating_point()]
    assert floats and all(t.dtype == torch.float64 and t.device.type == "cpu" for t in floats)
    default = [t for t in leaves(model.initial_state(2)) if t.is_floating_point()]
    assert all(t.dtype == torch.float32 for t in default)  # None: the parameters' dtype
    # learned initial values still get their gradient through the cast
    sum(t.sum() for t in floats).backward()


def test_kernels_only_for_cpu_float32_and_float64():
    for tensor in (
        torch.empty(2, device="meta"),
        torch.empty(2, dtype=torch.bfloat16),
        torch.empty(2, dtype=torch.float16),
    ):
        assert not dispatch.kernels_apply("ntm", tensor)
