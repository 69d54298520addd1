"""Controllers: each step equals the paper's equation written out here with the
controller's own weights; partially non-recurrent (pnr) controllers have their
standard counterpart's parameters and an h_out that ignores h_{t-1}; registry;
every controller inside the NTM (gradients, wiring, learning a tiny copy task).

Equations: Taguchi & Tsuruoka, "Partially Non-Recurrent Controllers for
Memory-Augmented Neural Networks": FNN, eq. 1 (Elman), eqs. 2-7 (LSTM),
eqs. 9-11 (pnr-elman), eqs. 12-13 (pnr-lstm); GRU as torch.nn.GRUCell.
"""

import pytest
import torch

import mannlab
from mannlab import ConfigError
from mannlab.nn.controllers import CONTROLLERS, make_controller
from tiny_copy import tiny_copy_losses

NAMES = ["fnn", "elman", "gru", "lstm", "pnr-elman", "pnr-lstm"]
PAIRS = [("pnr-elman", "elman"), ("pnr-lstm", "lstm")]
I, R, H, B, T = 5, 6, 4, 3, 4  # input, read size (R*W), hidden, batch, steps


def controller(name, seed=0):
    """A float64 controller with random (non-zero) learned initial states."""
    torch.manual_seed(seed)
    ctrl = make_controller(name, I, R, H).double()
    with torch.no_grad():
        for p in (getattr(ctrl, "h0", None), getattr(ctrl, "c0", None)):
            if p is not None:
                p.normal_()
    return ctrl


def randn(*shape, seed=1):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def blocks(ctrl):
    """W_x, W_r, W_h and b split into the controller's gate blocks (rows of H)."""
    split = lambda w: w.split(H) if w is not None else [None] * ctrl.gates  # noqa: E731
    return tuple(
        zip(
            split(ctrl.input_weight),
            split(ctrl.read_weight),
            split(getattr(ctrl, "recurrent_weight", None)),
            split(ctrl.bias),
        )
    )


def lin(w, v):
    return v @ w.t()


# ---- the paper's equations, written out (x, r: this step's input and r_{t-1}) ----


def ref_fnn(ctrl, x, r, state):
    ((wx, wr, _, b),) = blocks(ctrl)
    h = torch.tanh(lin(wx, x) + lin(wr, r) + b)
    return h, h, state


def ref_elman(ctrl, x, r, state):  # eq. 1
    ((wx, wr, wh, b),) = blocks(ctrl)
    h = torch.tanh(lin(wx, x) + lin(wr, r) + lin(wh, state[0]) + b)
    return h, h, (h,)


def ref_pnr_elman(ctrl, x, r, state):
    ((wx, wr, wh, b),) = blocks(ctrl)
    h_bar = lin(wx, x) + lin(wr, r) + b  # eq. 9
    h_prime = torch.tanh(h_bar)  # eq. 10
    h = torch.tanh(lin(wh, state[0]) + h_bar)  # eq. 11
    return h, h_prime, (h,)


def _lstm(ctrl, x, r, state, partial):
    h_prev, c_prev = state
    gz, gi, gf, go = blocks(ctrl)
    pre = lambda g: lin(g[0], x) + lin(g[1], r) + lin(g[2], h_prev) + g[3]  # noqa: E731
    h_bar = lin(gz[0], x) + lin(gz[1], r) + gz[3]  # eq. 12
    if partial:
        z = torch.tanh(lin(gz[2], h_prev) + h_bar)  # eq. 13
    else:
        z = torch.tanh(pre(gz))  # eq. 2
    i, f, o = torch.sigmoid(pre(gi)), torch.sigmoid(pre(gf)), torch.sigmoid(pre(go))  # eqs. 3-5
    c = f * c_prev + i * z  # eq. 6
    h = o * torch.tanh(c)  # eq. 7
    return h, (torch.tanh(h_bar) if partial else h), (h, c)  # eq. 10 for h'


def ref_gru(ctrl, x, r, state):
    (h_prev,) = state
    (rx, rr, rh, rb), (ux, ur, uh, ub), (nx, nr, nh, nb) = blocks(ctrl)
    rhb, uhb, nhb = ctrl.recurrent_bias.split(H)
    reset = torch.sigmoid(lin(rx, x) + lin(rr, r) + rb + lin(rh, h_prev) + rhb)
    update = torch.sigmoid(lin(ux, x) + lin(ur, r) + ub + lin(uh, h_prev) + uhb)
    n = torch.tanh(lin(nx, x) + lin(nr, r) + nb + reset * (lin(nh, h_prev) + nhb))
    h = (1 - update) * n + update * h_prev
    return h, h, (h,)


REFERENCES = {
    "fnn": ref_fnn,
    "elman": ref_elman,
    "pnr-elman": ref_pnr_elman,
    "gru": ref_gru,
    "lstm": lambda *a: _lstm(*a, partial=False),
    "pnr-lstm": lambda *a: _lstm(*a, partial=True),
}


def test_registry_names_and_classes():
    assert sorted(CONTROLLERS) == sorted(NAMES) == sorted(REFERENCES)
    for name in NAMES:
        assert type(make_controller(name, I, R, H)) is CONTROLLERS[name]
        assert CONTROLLERS[name].__doc__


@pytest.mark.parametrize("name", NAMES)
def test_step_equals_the_equations(name):
    ctrl = controller(name)
    x, reads = randn(B, T, I), randn(T, B, R, seed=2)
    x_proj = ctrl.precompute(x)
    assert x_proj.shape == (B, T, ctrl.gates * H)
    state = ref_state = ctrl.initial_state(B, None, torch.float64)
    for t in range(T):
        h_ctrl, h_out, state = ctrl.step(x_proj[:, t], reads[t], state)
        ref_ctrl, ref_out, ref_state = REFERENCES[name](ctrl, x[:, t], reads[t], ref_state)
        assert h_ctrl.shape == h_out.shape == (B, H)
        assert torch.allclose(h_ctrl, ref_ctrl, atol=1e-12)
        assert torch.allclose(h_out, ref_out, atol=1e-12)
        assert len(state) == len(ref_state)
        for s, ref in zip(state, ref_state):
            assert s.shape == (B, H) and torch.allclose(s, ref, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "fnn"])
def test_initial_state_is_learned_and_zero_at_init(name):
    torch.manual_seed(0)
    ctrl = make_controller(name, I, R, H)
    state = ctrl.initial_state(B, None, None)
    assert len(state) == (2 if "lstm" in name else 1)
    assert all(s.shape == (B, H) and not s.any() for s in state)
    h_ctrl, _, _ = ctrl.step(ctrl.precompute(torch.randn(B, 1, I))[:, 0], torch.randn(B, R), state)
    h_ctrl.sum().backward()
    assert ctrl.h0.grad is not None and ctrl.h0.grad.abs().sum() > 0


@pytest.mark.parametrize("pnr, standard", PAIRS)
def test_pnr_has_exactly_the_standard_parameters(pnr, standard):
    a, b = controller(pnr), controller(standard)
    assert [(n, p.shape) for n, p in a.named_parameters()] == [(n, p.shape) for n, p in b.named_parameters()]
    assert sum(p.numel() for p in a.parameters()) == sum(p.numel() for p in b.parameters())
    # With the same weights only h_out differs: h_ctrl and the state are the standard ones.
    b.load_state_dict(a.state_dict())
    x_proj, r = a.precompute(randn(B, 1, I))[:, 0], randn(B, R, seed=2)
    state = a.initial_state(B, None, None)
    (ha, oa, sa), (hb, ob, sb) = a.step(x_proj, r, state), b.step(x_proj, r, state)
    assert torch.equal(ha, hb) and all(torch.equal(u, v) for u, v in zip(sa, sb))
    assert not torch.allclose(oa, ob)


@pytest.mark.parametrize("name", NAMES)
def test_h_out_ignores_the_recurrent_state_only_for_pnr(name):
    ctrl = controller(name)
    x_proj, r = ctrl.precompute(randn(B, 1, I))[:, 0], randn(B, R, seed=2)
    state = ctrl.initial_state(B, None, None)
    h_ctrl, h_out, _ = ctrl.step(x_proj, r, state)
    if name == "fnn":
        assert state == () and torch.equal(h_out, h_ctrl)
        return
    for k in range(len(state)):  # perturb h_{t-1}, then c_{t-1}
        other = list(state)
        other[k] = other[k] + randn(B, H, seed=9)
        h_ctrl2, h_out2, _ = ctrl.step(x_proj, r, tuple(other))
        assert not torch.allclose(h_ctrl, h_ctrl2)
        if name.startswith("pnr-"):
            assert torch.equal(h_out, h_out2)
        else:
            assert torch.equal(h_out, h_ctrl) and torch.equal(h_out2, h_ctrl2)


def test_fnn_output_does_not_depend_on_its_state():
    ctrl = controller("fnn")
    x, reads = randn(B, T, I), randn(T, B, R, seed=2)
    x_proj, state = ctrl.precompute(x), ctrl.initial_state(B, None, None)
    assert state == ()
    for t in range(T):
        h, _, state = ctrl.step(x_proj[:, t], reads[t], state)
        assert state == ()
        fresh, _, _ = ctrl.step(x_proj[:, t], reads[t], ())
        assert torch.equal(h, fresh)


def test_gru_matches_torch_gru_cell():
    ctrl = controller("gru")
    cell = torch.nn.GRUCell(I + R, H).double()
    with torch.no_grad():
        ctrl.input_weight.copy_(cell.weight_ih[:, :I])
        ctrl.read_weight.copy_(cell.weight_ih[:, I:])
        ctrl.recurrent_weight.copy_(cell.weight_hh)
        ctrl.bias.copy_(cell.bias_ih)
        ctrl.recurrent_bias.copy_(cell.bias_hh)
    x, reads = randn(B, T, I), randn(T, B, R, seed=2)
    x_proj, state = ctrl.precompute(x), ctrl.initial_state(B, None, None)
    h_torch = state[0]
    for t in range(T):
        h, _, state = ctrl.step(x_proj[:, t], reads[t], state)
        h_torch = cell(torch.cat([x[:, t], reads[t]], dim=-1), h_torch)
        assert torch.allclose(h, h_torch, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck(name):
    ctrl = controller(name)
    x, r = randn(2, 2, I).requires_grad_(), randn(2, 2, R, seed=2).requires_grad_()

    def run(x, r):
        x_proj, state, outs = ctrl.precompute(x), ctrl.initial_state(2, None, None), []
        for t in range(2):
            h, h_out, state = ctrl.step(x_proj[:, t], r[:, t], state)
            outs += [h, h_out]
        return torch.cat(outs, dim=-1)

    assert torch.autograd.gradcheck(run, (x, r))


@pytest.mark.parametrize(
    "spelling, cls",
    [("PNR_LSTM", "pnr-lstm"), ("pnr_elman", "pnr-elman"), ("Elman", "elman"), (" GRU ", "gru")],
)
def test_names_are_case_insensitive_and_accept_underscores(spelling, cls):
    assert type(make_controller(spelling, I, R, H)) is CONTROLLERS[cls]


@pytest.mark.parametrize("bad", ["gru2", "proposed-lstm", "", None])
def test_unknown_names_raise_config_error_listing_the_valid_ones(bad):
    with pytest.raises(ConfigError) as err:
        make_controller(bad, I, R, H)
    assert all(repr(name) in str(err.value) for name in NAMES)
    with pytest.raises(ConfigError, match="pnr-lstm"):
        mannlab.NTM(5, 4, controller=bad, controller_size=4, memory_slots=5, memory_width=3)


# ---- inside the NTM ----

SMALL = dict(controller_size=H, memory_slots=7, memory_width=3, read_heads=2)


@pytest.mark.parametrize("name", NAMES)
def test_inside_the_ntm_forward_and_backward(name):
    torch.manual_seed(0)
    model = mannlab.NTM(I, 3, controller=name, **SMALL)
    y, _ = model(torch.randn(B, T, I))
    assert y.shape == (B, T, 3)
    y.square().sum().backward()
    for pname, p in model.cell.controller.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", ["pnr-elman", "pnr-lstm", "elman"])
def test_ntm_output_features_use_h_out(name):
    """H^o_t = [h_out; r_t]: for pnr controllers h_out = tanh(h'bar_t) (eq. 10)."""
    torch.manual_seed(0)
    model = mannlab.NTM(I, None, controller=name, **SMALL).double()
    x = randn(B, T, I)
    features, _, trace = model(x, return_trace=True)
    ctrl = model.cell.controller
    reads = trace.read_vectors.flatten(2)  # r_t, (B, T, R*W)
    assert torch.allclose(features[..., H:], reads)
    r_prev = torch.cat([model.cell.read_init.flatten().expand(B, 1, -1), reads[:, :-1]], dim=1)
    h_bar = (ctrl.precompute(x) + r_prev @ ctrl.read_weight.t())[..., :H]
    same = torch.allclose(features[..., :H], torch.tanh(h_bar), atol=1e-12)
    assert same == name.startswith("pnr-")  # Elman's h_t also depends on h_{t-1}


@pytest.mark.parametrize("name", NAMES)
def test_learns_tiny_copy_inside_the_ntm(name):
    before, after = tiny_copy_losses(
        lambda task: mannlab.NTM(
            task.input_size,
            task.output_size,
            controller=name,
            controller_size=24,
            memory_slots=8,
            memory_width=6,
        )
    )
    assert after < 0.75 * before, f"{name}: validation BCE {before:.3f} -> {after:.3f}"
