"""Low precision: the D-NTM's location-based addressing under autocast (bfloat16 and float16),
and every model in float16 parameters (``model.half()``) giving finite outputs and gradients
close to float32, the DNC with each controller included (its all-zero initial memory once
made the cosine guard round to 0 and every value NaN)."""

import pytest
import torch

from conftest import leaves, small_model
from mannlab.models import MODELS
from mannlab.nn import addressing

LOW = [torch.bfloat16, torch.float16]
SHIFTS = [
    {"location_shifts": 1},
    {"location_shifts": 1, "addressing": "reinforce", "nop": True},
    {"location_shifts": 1, "addressing": "argmax", "lru": False, "controller": "lstm"},
    {"location_shifts": 2, "addressing_steps": 2, "write_keys": "content"},
]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("kw", SHIFTS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_dntm_location_shifts_under_autocast(kw, dtype):
    model = small_model("dntm", 3, 2, memory_slots=6, **kw).float()
    x = torch.rand(2, 5, 3, generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=dtype):
        y1, state = model(x[:, :2])
        assert all(t.dtype == torch.float32 for t in leaves(state) if t.is_floating_point())
        y2, _ = model(x[:, 2:], state)  # the carried state passes the state check
    assert y2.dtype == dtype and torch.isfinite(y2.float()).all()
    y2.float().sum().backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()  # sampled addresses differ from run to run: compare the deterministic reads
    with torch.no_grad():
        reference, _ = model(x)
        with torch.autocast("cpu", dtype=dtype):
            low, _ = model(x)
    assert torch.allclose(low.float(), reference, atol=0.05), (low.float() - reference).abs().max()


HALF = [(name, {}) for name in MODELS] + [
    ("dnc", {"controller": "gru"}),
    ("dnc", {"controller": "fnn", "read_heads": 2}),
    ("dntm", {"location_shifts": 1}),
]


@pytest.mark.parametrize("config", HALF, ids=lambda c: c[0] + "".join(f"-{k}={v}" for k, v in c[1].items()))
def test_float16_parameters_finite_and_close_to_float32(config):
    name, kw = config
    model = small_model(name, 3, 2, **kw).float().eval()
    x = torch.rand(2, 8, 3, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        reference, _ = model(x)
    model.half().train()
    torch.manual_seed(0)
    y, state = model(x.half())
    assert torch.isfinite(y.float()).all(), name
    assert all(torch.isfinite(t.float()).all() for t in leaves(state) if t.is_floating_point())
    y.float().pow(2).mean().backward()
    assert all(p.grad is None or torch.isfinite(p.grad.float()).all() for p in model.parameters())
    with torch.no_grad():
        y_eval, _ = model.eval()(x.half())
    assert torch.allclose(y_eval.float(), reference, atol=0.05), (y_eval.float() - reference).abs().max()


def test_cosine_guard_is_representable_in_every_dtype():
    keys = torch.ones(1, 1, 4)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        zero_memory = torch.zeros(1, 3, 4, dtype=dtype)
        assert torch.equal(
            addressing.cosine_similarity(keys.to(dtype), zero_memory), torch.zeros(1, 1, 3, dtype=dtype)
        )
    assert addressing.representable(1e-8, torch.float32) == 1e-8  # float32 and float64 unchanged
