"""ARMIN: the gate equations against a hand-computed step, auto-addressing, writes
(empty slots first, then the slot just read; linear map), the fast inference path,
the ablations of table 7, the temperature schedule, zoneout, gradcheck, the compiled path
and a learning check (what every model promises, cell == sequence, chunked == whole and bad
input included, is in test_model_contract.py)."""

import pytest
import torch
import torch.nn.functional as F

import mannlab
from conftest import float64_seq, small_model
from mannlab.models import ARMINState, ARMINTrace, base, build_model
from mannlab.ops import armin as armin_op
from mannlab.ops import use_kernels
from mannlab.training import schedules
from tiny_copy import tiny_copy_losses


def small_armin(**kw):
    return small_model("armin", 5, 3, **kw)


def seq(b=3, t=9, i=5):
    return float64_seq(b, t, i)


def slots(weights):
    return weights[:, :, 0].argmax(-1)


def randomise(model):
    """Random values for every parameter (layer-norm gains and biases too), so a
    hand-computed step checks every term."""
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model


# ------------------------------------------------------- the cell, by hand


@pytest.mark.parametrize("width", [6, 4])
def test_one_step_by_hand(width):
    """Eqs. 3-10 and the write of section 3.3 written out literally with the
    concatenated weight matrices W_s, W_ig, W_go, for one step in argmax mode."""
    model = randomise(small_armin(memory_width=width)).eval()
    cell = model.cell
    dh, dr, n = 6, width, 4
    x = seq(b=2, t=1)[:, 0]
    state = cell.initial_state(2)
    h, M = state.hidden, state.memory
    Wx, bx = cell.input_proj.weight, cell.input_proj.bias
    rows = [0, dh + dr, 5 * dh + 2 * dr, 5 * dh + 2 * dr + n]
    W_ig = torch.cat([Wx[rows[0] : rows[1]], cell.control_h.weight[: dh + dr], cell.control_r.weight], 1)
    W_go = torch.cat([Wx[rows[1] : rows[2]], cell.gates_h.weight, cell.gates_r.weight], 1)
    W_s = torch.cat([Wx[rows[2] : rows[3]], cell.control_h.weight[dh + dr :]], 1)
    b_ig, b_go, b_s = bx[rows[0] : rows[1]], bx[rows[1] : rows[2]], bx[rows[2] : rows[3]]

    def ln(v, layer):
        return F.layer_norm(v, v.shape[-1:], layer.weight, layer.bias, layer.eps)

    s = F.one_hot((torch.cat([x, h], 1) @ W_s.T + b_s).argmax(-1), n).double()  # eq. 9
    r = (s.unsqueeze(1) @ M).squeeze(1)  # eq. 10
    g = torch.sigmoid(ln(torch.cat([x, h, r], 1) @ W_ig.T + b_ig, cell.ln_control))  # eq. 3
    h_g, r_g = g[:, :dh] * h, g[:, dh:] * r  # eqs. 4-5
    pre = ln(torch.cat([x, h_g, r_g], 1) @ W_go.T + b_go, cell.ln_gates)  # eq. 6
    i, f, c, o_h = (pre[:, k * dh : (k + 1) * dh] for k in range(4))
    i, f, c, o_h, o_r = (
        torch.sigmoid(i),
        torch.sigmoid(f),
        torch.tanh(c),
        torch.sigmoid(o_h),
        torch.sigmoid(pre[:, 4 * dh :]),
    )
    h_new = ln(f * h + i * c, cell.ln_hidden)  # eq. 7
    o = torch.cat([o_h * torch.tanh(h_new), o_r * torch.tanh(r)], 1)  # eq. 8
    value = h_new if dr == dh else h_new @ cell.write_map.weight.T
    M_new = M.clone()
    M_new[:, 0] = value  # empty slot 0

    out, new_state, trace = cell(x, return_trace=True)
    assert torch.allclose(out, o) and torch.allclose(new_state.hidden, h_new)
    assert torch.allclose(new_state.memory, M_new)
    assert torch.allclose(trace.read_weights[:, 0], s) and torch.allclose(trace.control_gates, g)


def test_layer_norm_off_and_forget_bias_initialised_to_one():
    model = small_armin()
    assert torch.equal(model.cell.ln_gates.bias[6:12], torch.ones(6, dtype=torch.float64))
    plain = small_armin(layer_norm=False)
    assert plain.cell.ln_gates is None
    assert torch.equal(plain.cell.input_proj.bias[12 + 6 : 12 + 12], torch.ones(6, dtype=torch.float64))
    cell = model.cell
    w = torch.cat([cell.input_proj.weight[12:18], cell.gates_h.weight[:6], cell.gates_r.weight[:6]], 1)
    assert torch.allclose(w @ w.T, torch.eye(6, dtype=torch.float64), atol=1e-6)  # orthogonal
    w_s = torch.cat([cell.input_proj.weight[42:46], cell.control_h.weight[12:]], 1)
    assert torch.allclose(w_s @ w_s.T, torch.eye(4, dtype=torch.float64), atol=1e-6)


# ------------------------------------------------------------ read and write


@pytest.mark.parametrize("kw", [{}, dict(memory_width=3), dict(read="tardis")])
def test_writes_fill_empty_slots_then_the_slot_just_read(kw):
    model = small_armin(**kw)
    _, state, trace = model(seq(), return_trace=True)
    written, read = slots(trace.write_weights), slots(trace.read_weights)
    assert torch.equal(written[:, :4], torch.arange(4).expand(3, 4))
    assert torch.equal(written[:, 4:], read[:, 4:])
    value = trace.hidden if model.cell.write_map is None else model.cell.write_map(trace.hidden)
    for b in range(3):
        for j in range(4):
            last = max(t for t in range(9) if written[b, t] == j)
            assert torch.allclose(state.memory[b, j], value[b, last])


def test_training_reads_are_straight_through_one_hots_with_gradient():
    model = small_armin()
    y, _, trace = model(seq(), return_trace=True)
    assert set(trace.read_weights.detach().unique().tolist()) == {0.0, 1.0}
    y.sum().backward()
    assert model.cell.control_h.weight.grad[12:].abs().sum() > 0  # W_s learns through the ST read


def test_relaxed_gumbel_reads_are_the_sample_of_eq_1():
    """y = softmax((l + g) / τ) with the noise the step draws: same seed, same g."""
    model = small_armin(addressing="gumbel-relaxed")
    model.inverse_temperature = 3.0
    torch.manual_seed(4)
    _, _, trace = model(seq(t=1), return_trace=True)
    torch.manual_seed(4)
    g = -torch.log(torch.empty(3, 4, dtype=torch.float64).exponential_())
    expected = torch.softmax((trace.read_logits[:, 0, 0] + g) * 3.0, -1)
    assert torch.allclose(trace.read_weights[:, 0, 0], expected)
    assert not set(trace.read_weights.detach().unique().tolist()) <= {0.0, 1.0}
    assert model.temperature_schedule == (200, 3)


def test_temperature_schedule_of_appendix_c():
    model = small_armin(memory_slots=5)
    assert model.temperature_schedule == (200, 4)
    for step, expected in [(0, 1.0), (199, 1.0), (200, 2.0), (799, 4.0), (10**5, 4.0)]:
        schedules.start_minibatch(model, step)
        assert model.inverse_temperature == expected
    assert small_armin(temperature_every=0).temperature_schedule is None
    assert small_armin(addressing="soft").temperature_schedule is None


# ------------------------------------------------------------- fast inference


@pytest.mark.parametrize(
    "kw",
    [
        {},
        dict(memory_width=3),
        dict(read="tardis"),
        dict(write="queue"),
        dict(write="independent"),
        dict(control_gates=False),
        dict(zoneout=0.3),
    ],
)
def test_fast_inference_path_equals_training_path_in_argmax_mode(kw):
    model = small_armin(**kw)
    x = seq()
    model.eval()
    model.cell.fast_inference = False
    y_slow, s_slow = model(x)
    model.cell.fast_inference = True
    y_fast, s_fast = model(x)
    assert torch.allclose(y_fast, y_slow, atol=1e-12)
    for a, b in zip(s_fast, s_slow):
        assert torch.allclose(a.double(), b.double(), atol=1e-12)
    if not kw.get("zoneout"):
        # the training path with addressing="argmax" computes the same numbers
        trained = small_armin(addressing="argmax", **kw).train()
        trained.load_state_dict(model.state_dict())
        assert torch.allclose(trained(x)[0], y_fast, atol=1e-12)


# ------------------------------------------------------------------ ablations


def test_random_read_ignores_the_addressing():
    model = small_armin(read="random")
    torch.manual_seed(0)
    _, _, trace = model(seq(b=64, t=6), return_trace=True)
    read = slots(trace.read_weights)
    counts = torch.bincount(read.flatten(), minlength=4)
    assert (counts > 50).all()  # every slot, about equally
    model.eval()
    with torch.no_grad():
        torch.manual_seed(1)
        a = model(seq())[0]
        torch.manual_seed(2)
        b = model(seq())[0]
    assert not torch.allclose(a, b)  # random at evaluation too


def test_queue_write_is_first_in_first_out():
    model = small_armin(write="queue")
    _, _, trace = model(seq(t=11), return_trace=True)
    assert torch.equal(slots(trace.write_weights), (torch.arange(11) % 4).expand(3, 11))


def test_independent_write_uses_its_own_head():
    model = small_armin(write="independent")
    y, _, trace = model(seq(b=8, t=12), return_trace=True)
    written, read = slots(trace.write_weights), slots(trace.read_weights)
    assert torch.equal(written[:, :4], torch.arange(4).expand(8, 4))
    assert (written[:, 4:] != read[:, 4:]).any()
    y.sum().backward()
    assert model.cell.write_address_h.weight.grad.abs().sum() > 0


def test_smooth_read_write_uses_softmax_weights():
    model = small_armin(addressing="soft")
    _, state, trace = model(seq(), return_trace=True)
    assert torch.allclose(trace.read_weights[:, :, 0], torch.softmax(trace.read_logits[:, :, 0], -1))
    assert torch.equal(trace.write_weights[:, 4:], trace.read_weights[:, 4:])
    model.eval()  # soft at evaluation too
    _, _, t2 = model(seq(), return_trace=True)
    assert torch.allclose(t2.read_weights, trace.read_weights)


def test_no_control_gates():
    model = small_armin(control_gates=False)
    y, _, trace = model(seq(), return_trace=True)
    assert torch.equal(trace.control_gates, torch.ones_like(trace.control_gates))
    y.sum().backward()
    assert model.cell.control_h.weight.grad[:12].abs().sum() == 0  # W_ig unused
    assert model.cell.control_r.weight.grad is None


def test_tardis_addressing_never_rereads_the_last_slot():
    model = small_armin(read="tardis", memory_slots=3)
    _, _, trace = model(seq(b=6, t=12), return_trace=True)
    read = slots(trace.read_weights)
    assert (read[:, 1:] != read[:, :-1]).all()
    assert model.cell.address.shape == (3, 2)  # d_r / 5 = 1 feature has 2 rows, fewer than 3 slots


def test_zoneout_keeps_units_in_training_and_averages_at_evaluation():
    model = small_armin(zoneout=0.5)
    x = seq(b=1, t=1)[:, 0]
    state = model.cell.initial_state(1)
    with torch.no_grad():
        model.cell.h0.copy_(torch.arange(6.0))
    state = model.cell.initial_state(1)
    torch.manual_seed(0)
    _, s_train = model.cell(x, state)
    kept = torch.isclose(s_train.hidden, state.hidden)
    assert kept.any() and not kept.all()
    model.eval()
    _, s_eval, tr = model.cell(x, state, return_trace=True)
    plain = small_armin()
    plain.load_state_dict(model.state_dict())
    plain.eval()
    _, s_plain = plain.cell(x, state)
    assert torch.allclose(s_eval.hidden, 0.5 * state.hidden + 0.5 * s_plain.hidden)


# ------------------------------------------------------------- equivalences


@pytest.mark.parametrize("kernels", [True, False])
def test_gradcheck_float64(kernels):
    """Soft reads/writes are differentiable everywhere; argmax (eval) everywhere but at ties;
    the relaxed gumbel sample with the noise fixed by the seed (the straight-through gradient
    is not the derivative of the one-hot forward, so it is checked against the tensor path
    instead). Both the compiled whole-sequence path and the per-step tensor path."""
    x = seq(b=2, t=6).requires_grad_()
    soft = small_armin(addressing="soft", memory_width=4)

    def run_soft(inp):
        with use_kernels(kernels):
            return soft(inp)[0]

    assert torch.autograd.gradcheck(run_soft, (x,))
    for mode in ("gumbel-relaxed",):
        model = small_armin(addressing=mode, memory_width=4)
        model.inverse_temperature = 2.0

        def run(inp, h0):
            torch.manual_seed(3)
            state = model.initial_state(2)
            with use_kernels(kernels):
                y, state = model(inp, state._replace(hidden=h0))
            return y, state.memory

        h0 = torch.rand(2, 6, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(run, (x, h0))
    zoned = small_armin(addressing="soft", memory_width=4, zoneout=0.4)  # masks fixed by the seed

    def run_zoned(inp):
        torch.manual_seed(4)
        with use_kernels(kernels):
            return zoned(inp)[0]

    assert torch.autograd.gradcheck(run_zoned, (x,))
    hard = small_armin(read="tardis").eval()
    assert torch.autograd.gradcheck(lambda inp: hard(inp)[0], (x,))


@pytest.mark.parametrize("mode", ["gumbel", "gumbel-relaxed", "soft", "argmax"])
@pytest.mark.parametrize("width, zoneout", [(6, 0.0), (4, 0.0), (4, 0.4)])
def test_compiled_sequence_equals_tensor_path(mode, width, zoneout):
    """The compiled whole-sequence kernels give the per-step path's outputs, final state and
    parameter gradients (the same Gumbel draws and zoneout masks: same seed), past the
    filling phase."""
    model = randomise(small_armin(addressing=mode, memory_width=width, zoneout=zoneout))
    model.inverse_temperature = 3.0
    x = seq(t=11)
    assert base.sequence_backend(model.cell, x) == "numba"
    results = []
    for kernels in (False, True):
        model.zero_grad()
        torch.manual_seed(2)
        with use_kernels(kernels):
            y, state = model(x)
        (y.sin().sum() + state.hidden.sum() + state.memory.pow(2).sum()).backward()
        results.append(
            (y, state, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        )
    (y0, s0, g0), (y1, s1, g1) = results
    assert torch.allclose(y0, y1, atol=1e-12)
    for a, b in zip(s0, s1):
        assert torch.allclose(a.double(), b.double(), atol=1e-12)
    assert g0.keys() == g1.keys()
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=1e-10), name


@pytest.mark.parametrize("mode", ["gumbel", "soft"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("zoneout", [0.0, 0.3])
def test_compiled_inference_without_intermediates_equals_tensor_path(mode, train, zoneout):
    """Under no_grad the kernels keep one step's scratch instead of (B, T, ...) arrays: same
    outputs and final state as the tensor path (eval: argmax or soft, zoneout's expectation;
    train: same draws)."""
    model = randomise(small_armin(addressing=mode, memory_width=4, zoneout=zoneout)).train(train)
    model.inverse_temperature = 3.0
    x = seq(t=11)
    results = []
    for kernels in (False, True):
        torch.manual_seed(2)
        with torch.no_grad(), use_kernels(kernels):
            results.append(model(x))
    (y0, s0), (y1, s1) = results
    assert torch.allclose(y0, y1, atol=1e-12)
    for a, b in zip(s0, s1):
        assert torch.allclose(a.double(), b.double(), atol=1e-12)


def test_compiled_path_only_where_it_pays(monkeypatch):
    """Large batch x hidden runs the tensor path (the measured policy of ops/armin/records.py)."""

    def pays(hidden_size, batch, backward):
        cell = mannlab.ARMIN(5, 3, hidden_size=hidden_size, memory_slots=4).cell
        return armin_op.pays(cell.op_options(False, backward), cell.op_weights(), batch)

    assert pays(100, 1, True) and pays(100, 40, True)
    assert not pays(100, 41, True)
    assert pays(100, 1, False) and pays(100, 32, False)
    assert not pays(100, 33, False)
    assert pays(256, 16, True) and not pays(256, 17, True)
    assert pays(256, 1, False) and not pays(256, 2, False)
    model = small_armin(hidden_size=2048)  # 3 rows x 2048 > 4096: tensor path

    def fail(*args):
        raise AssertionError("the compiled path ran")

    monkeypatch.setattr(model.cell, "run_op", fail)
    model(seq(t=3))
    with torch.no_grad():
        model(seq(t=3))


def test_compiled_path_only_for_the_papers_configuration():
    x = seq()
    assert base.sequence_backend(small_armin().cell, x)
    assert base.sequence_backend(small_armin(zoneout=0.1).cell, x)
    assert not base.sequence_backend(small_armin().cell, x, with_trace=True)
    for kw in (
        dict(read="tardis"),
        dict(read="random"),
        dict(write="queue"),
        dict(write="independent"),
        dict(control_gates=False),
        dict(layer_norm=False),
    ):
        assert small_armin(**kw).cell.op_options(False, True) is None, kw
        assert not base.sequence_backend(small_armin(**kw).cell, x), kw


def test_shapes_state_and_trace():
    model = small_armin(memory_width=3)
    y, state, trace = model(seq(), return_trace=True)
    assert y.shape == (3, 9, 3) and isinstance(state, ARMINState) and isinstance(trace, ARMINTrace)
    assert state.memory.shape == (3, 4, 3) and trace.read_vectors.shape == (3, 9, 3)


# --------------------------------------------------------------------- learning


def test_learns_tiny_copy():
    before, after = tiny_copy_losses(
        lambda task: build_model("armin", task.input_size, task.output_size, hidden_size=24, memory_slots=4),
        steps=150,
    )
    assert after < 0.75 * before, f"validation BCE {before:.3f} -> {after:.3f}"
