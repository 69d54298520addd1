"""Every registered model under CPU autocast (bfloat16, and float16 where torch has the CPU
ops): forward and backward in training and evaluation mode, with and without the trace and
the aux loss, the state kept in the input's dtype (so a chunked run carries it), finite
gradients, and outputs close to the float32 run.

Under autocast the layers (controllers, head-parameter and output layers) run in the low
dtype and the memory equations in the state's (ops/dispatch.py ``state_precision``); the
compiled kernels are never used (they read one float dtype).
"""

import pytest
import torch

from conftest import leaves, small_model
from mannlab.models import MODELS
from mannlab.ops import dispatch

DTYPES = [torch.bfloat16, torch.float16]

# Configurations beyond the small defaults whose step takes other code (controllers with a
# low-precision state update, sampled and argmax reads, index writes, the unfused LSTM).
VARIANTS = [
    ("ntm", {"controller": "gru", "read_heads": 2, "write_heads": 2}),
    ("ntm", {"controller": "pnr-elman"}),
    ("dnc", {"controller": "fnn", "read_heads": 2}),
    ("dntm", {"addressing": "reinforce", "lru": True, "nop": True, "addressing_steps": 2}),
    ("dntm", {"addressing": "argmax", "controller": "lstm"}),
    ("tardis", {"addressing": "reinforce", "temperature": "learned"}),
    ("armin", {"read": "tardis", "write": "independent", "memory_width": 5}),
    ("armin", {"addressing": "soft", "layer_norm": True, "zoneout": 0.1}),
    ("lstm", {"layer_norm": True, "zoneout": 0.1}),
]
CONFIGS = [(name, {}) for name in MODELS] + VARIANTS


def _id(config):
    name, kw = config
    return name + "".join(f"-{k}={v}" for k, v in kw.items())


def _aux(model, trace, batch, steps):
    """The model's aux loss on a made-up per-step NLL (TARDIS's reward needs a score)."""
    nll = torch.rand(batch, steps, generator=torch.Generator().manual_seed(3))
    score = (
        {"score": lambda logits: logits.float().pow(2).mean(-1)}
        if getattr(model, "aux_loss_scores", False)
        else {}
    )
    return model.aux_loss(trace, nll, **score)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_autocast_forward_backward_and_carried_state(config, training, dtype):
    name, kw = config
    model = small_model(name, 3, 2, **kw).float().train(training)
    x = torch.rand(2, 6, 3, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=dtype):
        y1, state, trace = model(x[:, :3], return_trace=True)
        # the state keeps the input's dtype, so it passes the state check of the next chunk
        assert all(t.dtype == torch.float32 for t in leaves(state) if t.is_floating_point())
        y2, state = model(x[:, 3:], state)
        loss = torch.cat([y1, y2], dim=1).float().pow(2).mean()
        if training and model.uses_aux_loss:
            loss = loss + _aux(model, trace, 2, 3)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert torch.isfinite(y1.float()).all() and torch.isfinite(y2.float()).all()
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), pname
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("name", list(MODELS))
def test_backward_inside_autocast(name):
    """A backward called inside the autocast block (not recommended by torch, but common)."""
    model = small_model(name, 3, 2).float()
    x = torch.rand(2, 4, 3, generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(x)[0].float().pow(2).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# Tolerances against the float32 run on the same input, in evaluation mode. Outputs:
# |y_low - y32| / (1 + |y32|). bfloat16 keeps 8 significant bits (one rounding: up to
# 2^-8 = 0.004 relative); a logit passes through several roundings (input projection,
# controller and head layers of each of the 8 steps, carried on by the state, the output
# head), so 0.02 is about five roundings: 5x the worst seen over six seeds and every model
# (0.004, ARMIN). float16 keeps 11 bits (2^-11 = 0.0005): 0.005, 5x its worst (0.001).
# Gradients: the largest difference of a parameter's gradient relative to that gradient's
# largest entry; a backward doubles the roundings: 0.1 and 0.02, 3x and 2x the worst seen
# (0.034 and 0.009, D-NTM and ARMIN).
OUTPUT_TOL = {torch.bfloat16: 0.02, torch.float16: 0.005}
GRAD_TOL = {torch.bfloat16: 0.1, torch.float16: 0.02}
# ARMIN's evaluation reads the argmax of logits that are close at initialisation, so a
# rounding can move a read (a different slot, an output off by 0.4 at one seed in six, in
# float16 too): its soft reads are compared. TARDIS's argmax reads are checked to agree.
CLOSE_CONFIG = {"armin": {"addressing": "soft"}}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(MODELS))
def test_autocast_close_to_float32(name, dtype):
    model = small_model(name, 3, 2, **CLOSE_CONFIG.get(name, {})).float().eval()
    x = torch.rand(4, 8, 3, generator=torch.Generator().manual_seed(2))
    y32, _, trace32 = model(x, return_trace=True)
    y32.pow(2).mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    with torch.autocast("cpu", dtype=dtype):
        y16, _, trace16 = model(x, return_trace=True)
    assert y16.dtype == dtype  # the output head ran in autocast's dtype
    if name == "tardis":
        assert torch.equal(trace16.read_weights.float(), trace32.read_weights.float())
    y16.float().pow(2).mean().backward()
    error = ((y16.float() - y32).abs() / (1 + y32.abs())).max().item()
    assert error < OUTPUT_TOL[dtype], error
    for pname, g32 in grads.items():
        g16 = dict(model.named_parameters())[pname].grad
        scale = g32.abs().max().clamp_min(1e-3)
        assert ((g16 - g32).abs().max() / scale).item() < GRAD_TOL[dtype], pname


def test_autocast_takes_the_tensor_path():
    """The kernels read one float dtype: under autocast dispatch never picks them, and
    outside it nothing changes."""
    x = torch.rand(2, 3)
    before = dispatch.kernels_apply("ntm", x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not dispatch.kernels_apply("ntm", x)
        assert dispatch.autocast_active(x)
        with dispatch.state_precision(x):
            assert not dispatch.autocast_active(x) and not dispatch.kernels_enabled()
            assert torch.mm(x, x.t()).dtype == torch.float32
        assert torch.mm(x, x.t()).dtype == torch.bfloat16
    assert dispatch.kernels_apply("ntm", x) == before
    assert not dispatch.autocast_active(torch.empty(1, device="meta"))
