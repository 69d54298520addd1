"""D-NTM location-based addressing (location_shifts r > 0): NTM eqs. 7-9 after eq. 13, as
an option of the D-NTM authors' code. Hand-worked values, r = 0 unchanged, gradients, cell ==
sequence and chunked == whole, the discrete modes sampling the final distribution, a pointer
moved by a hand-set shift, the state's new field and the option's range."""

import pytest
import torch
import torch.nn.functional as F

from conftest import float64_seq, leaves, small_model
from mannlab import ConfigError
from mannlab.building import build_run
from mannlab.config import RunConfig, apply_overrides
from mannlab.models import DNTMState, build_model
from mannlab.models import dntm as dntm_module
from mannlab.models.base import sequence_backend
from mannlab.models.dntm import DNTMLocation, location_address
from mannlab.ops import use_kernels

SLOTS = 5  # conftest's SMALL D-NTM: 5 cells, controller 6, d_a 2, d_c 3


def shifted(**kw):
    return small_model("dntm", 4, 3, **{"location_shifts": 1, **kw})


def seq(b=3, t=6):
    return float64_seq(b, t, 4)


def location_rows(cell):
    """The head layer's rows of [g | s | γ_s] (read heads first in each group)."""
    start = sum(cell.split_sizes[:7])
    K, S = cell.read_heads + cell.write_heads, 2 * cell.location_shifts + 1
    return slice(start, start + K), slice(start + K, start + K + K * S), slice(start + K + K * S, None)


# ------------------------------------------------------------------ by hand


def test_interpolation_shift_and_sharpening_by_hand():
    """4 cells: w^c = [.7, .1, .1, .1], w_{t-1} on cell 2, g = 0.5, s(-1, 0, +1) = (.2, .3, .5),
    γ_s = 2."""
    content = torch.tensor([[[0.7, 0.1, 0.1, 0.1]]], dtype=torch.float64)
    previous = torch.tensor([[[0.0, 0.0, 1.0, 0.0]]], dtype=torch.float64)
    gate = torch.tensor([[0.5]], dtype=torch.float64)
    shift = torch.tensor([[[0.2, 0.3, 0.5]]], dtype=torch.float64)
    gamma = torch.tensor([[2.0]], dtype=torch.float64)
    # w^g = [.35, .05, .55, .05]; w~_i = .2 w^g_{i+1} + .3 w^g_i + .5 w^g_{i-1} (mod 4):
    # w~_0 = .2*.05 + .3*.35 + .5*.05 = .14    w~_1 = .2*.55 + .3*.05 + .5*.35 = .30
    # w~_2 = .2*.05 + .3*.55 + .5*.05 = .20    w~_3 = .2*.35 + .3*.05 + .5*.55 = .36
    squares = torch.tensor([0.14**2, 0.30**2, 0.20**2, 0.36**2], dtype=torch.float64)
    expected = squares / 0.2792  # sum of the squares
    assert torch.isclose(squares.sum(), torch.tensor(0.2792, dtype=torch.float64))
    w = location_address(content, previous, gate, shift, gamma)
    assert torch.allclose(w, expected.view(1, 1, 4), atol=1e-7, rtol=0)  # ε = 1e-8 in the log
    # g = 1 and no shift, γ_s = 1: the content weighting itself
    same = location_address(
        content, previous, gate.new_ones(1, 1), torch.tensor([[[0.0, 1, 0]]]).double(), 1 + 0 * gamma
    )
    assert torch.allclose(same, content, atol=1e-7)


# ------------------------------------------------------------------ r = 0


@pytest.mark.parametrize("mode", ["soft", "reinforce"])
def test_zero_shifts_is_the_paper_model(mode):
    """location_shifts=0 builds the same parameters and gives the same outputs, state and
    trace as a model built without the argument, for the same seed."""
    plain, zero = (
        small_model("dntm", 4, 3, addressing=mode),
        small_model("dntm", 4, 3, addressing=mode, location_shifts=0),
    )
    assert plain.cell.split_sizes == zero.cell.split_sizes
    for (n, p), (m, q) in zip(plain.state_dict().items(), zero.state_dict().items(), strict=True):
        assert n == m and torch.equal(p, q)
    for kernels in (False, True):  # the tensor path and the compiled path where it applies
        runs = []
        for model in (plain, zero):
            torch.manual_seed(3)
            with use_kernels(kernels):
                runs.append(model(seq(), return_trace=True))
        (y0, s0, t0), (y1, s1, t1) = runs
        assert torch.equal(y0, y1) and s0.location == () == s1.location
        for a, b in zip(leaves(s0) + list(t0), leaves(s1) + list(t1), strict=True):
            assert torch.equal(a, b)


# ------------------------------------------------------------------ gradients


def test_gradcheck_soft_with_shifts_float64():
    """Input and the carried previous weightings (LRU off: its average is cut from the graph
    on purpose, section 3.3)."""
    model = shifted(read_heads=2, addressing_steps=2, nop=True, lru=False)
    x = seq(b=2, t=3).requires_grad_()
    assert torch.autograd.gradcheck(lambda inp: model(inp)[0], (x,))
    start = model.initial_state(2)
    gen = torch.Generator().manual_seed(2)
    read = torch.softmax(torch.randn(2, 2, SLOTS + 1, dtype=torch.float64, generator=gen), -1)
    write = torch.softmax(torch.randn(2, 1, SLOTS + 1, dtype=torch.float64, generator=gen), -1)

    def run(r, w):
        return model(seq(b=2, t=3), start._replace(location=DNTMLocation(r, w)))[0]

    assert torch.autograd.gradcheck(run, (read.requires_grad_(), write.requires_grad_()))


# ------------------------------------------------------------------ cell, chunks


@pytest.mark.parametrize("mode", ["soft", "reinforce"])
def test_cell_equals_sequence_and_chunks_equal_one_run(mode):
    """The reinforce model in evaluation mode (argmax), as the step loop is then deterministic."""
    model = shifted(addressing=mode, read_heads=2, write_heads=2, addressing_steps=2, nop=True)
    model.eval()
    x = seq(t=7)
    y, state = model(x)
    assert isinstance(state.location, DNTMLocation)
    assert state.location.read.shape == (3, 2, SLOTS + 1) and state.location.write.shape == (3, 2, SLOTS + 1)
    cell_state, outputs = None, []
    for t in range(7):
        features, cell_state = model.cell(x[:, t], cell_state)
        outputs.append(model.head(features))
    assert torch.allclose(torch.stack(outputs, 1), y, atol=1e-12)
    y1, mid = model(x[:, :3])
    y2, end = model(x[:, 3:], mid)
    assert torch.allclose(torch.cat([y1, y2], 1), y, atol=1e-12)
    for a, b in zip(leaves(end) + leaves(cell_state), leaves(state) * 2, strict=True):
        assert torch.allclose(a, b, atol=1e-12)


# ------------------------------------------------------------------ discrete


def test_discrete_model_samples_the_final_distribution(monkeypatch):
    """Each step's samples are drawn from w of NTM eq. 9, computed here again from the head
    layer's outputs, the content weighting of eqs. 10-13 and the previous *soft* w; the
    trace's probabilities are that w, and REINFORCE trains the shift outputs."""
    model = shifted(addressing="reinforce", lru=True, entropy_weight=0.1)
    cell = model.cell
    raw, content, drawn = [], [], []
    cell.head_params.register_forward_hook(lambda mod, inp, out: raw.append(out))
    address, discretise = cell._address, cell._discretise
    monkeypatch.setattr(cell, "_address", lambda *a: content.append(address(*a)[0]) or address(*a))
    monkeypatch.setattr(
        cell, "_discretise", lambda p, sample: drawn.append((p, sample)) or discretise(p, sample)
    )
    torch.manual_seed(0)
    y, _, trace = model(seq(t=5), return_trace=True)
    assert all(sample for _, sample in drawn) and trace.sampled.eq(1).all()
    gate_rows, shift_rows, gamma_rows = location_rows(cell)
    previous = [F.one_hot(torch.zeros(3, 1, dtype=torch.long), SLOTS).double()] * 2
    for t in range(5):
        out = raw[t]
        g = torch.sigmoid(out[:, gate_rows])
        s = torch.softmax(out[:, shift_rows].view(3, 2, 3), -1)
        gamma = F.softplus(out[:, gamma_rows]) + 1
        for k, probs in enumerate((trace.read_probs[:, t], trace.write_probs[:, t])):
            w = location_address(
                content[2 * t + k], previous[k], g[:, k : k + 1], s[:, k : k + 1], gamma[:, k : k + 1]
            )
            assert torch.allclose(drawn[2 * t + k][0], w, atol=1e-12)  # the distribution sampled
            assert torch.allclose(probs, w, atol=1e-12)  # the trace's probs
            assert not torch.allclose(w, content[2 * t + k], atol=1e-3)  # eqs. 7-9 changed it
            previous[k] = w
    hits = (trace.read_weights * trace.read_probs).sum(-1)
    assert (hits > 0).all() and trace.read_weights.sum(-1).eq(1).all()
    weight = cell.head_params.weight
    (task_grad,) = torch.autograd.grad(y.pow(2).sum(), weight, retain_graph=True)
    (aux_grad,) = torch.autograd.grad(model.aux_loss(trace, torch.rand(3, 5, dtype=torch.float64)), weight)
    assert task_grad[shift_rows].abs().sum() == 0  # one-hot weightings: no backprop path
    assert aux_grad[shift_rows].abs().sum() > 0 and aux_grad[gate_rows].abs().sum() > 0


@pytest.mark.parametrize("mode", ["soft", "argmax"])
def test_a_hand_set_shift_moves_a_one_hot_pointer_one_cell_per_step(mode):
    """g = 0 (keep the previous w), s = +1 and γ_s large: from w_0 on cell 0, every head's
    weighting is on cell t + 1 (mod N') after step t, whatever the content says."""
    model = shifted(addressing=mode, read_heads=2)
    gate_rows, shift_rows, gamma_rows = location_rows(model.cell)
    layer = model.cell.head_params
    with torch.no_grad():
        for rows, bias in ((gate_rows, -40.0), (gamma_rows, 40.0)):
            layer.weight[rows] = 0.0
            layer.bias[rows] = bias
        layer.weight[shift_rows] = 0.0
        layer.bias[shift_rows] = torch.tensor([-40.0, -40.0, 40.0]).repeat(3)
    T = 8
    _, _, trace = model(seq(t=T), return_trace=True)
    cells = (torch.arange(T) + 1) % SLOTS
    for probs, weights in ((trace.read_probs, trace.read_weights), (trace.write_probs, trace.write_weights)):
        assert torch.equal(probs.argmax(-1), cells.view(1, T, 1).expand(probs.shape[:3]))
        assert probs.amax(-1).min() > 1 - 1e-9
        assert torch.equal(weights.argmax(-1), probs.argmax(-1))


# ------------------------------------------------------------------ dispatch


def test_shifts_run_the_tensor_path(monkeypatch):
    calls = []
    monkeypatch.setattr(dntm_module.DNTMCell, "run_op", lambda *a: calls.append(a))
    model = shifted()
    x = seq()
    assert model.cell.op_options(False, True) is None and model.cell.op_options(True, True) is None
    with use_kernels(True):
        assert not sequence_backend(model.cell, x)
        model(x)
        model(x, return_trace=True)
    assert calls == []
    assert small_model("dntm", 4, 3).cell.op_options(True, True) is not None


# ------------------------------------------------------------------ state and options


def test_state_validation_of_the_location_field():
    model = shifted(read_heads=2)
    x = seq()
    _, state = model(x)
    model(x, state)  # its own state is accepted
    bad_read = state._replace(location=state.location._replace(read=state.location.read[:, :1]))
    with pytest.raises(ValueError, match=r"state\.location\.read must have shape \(3, 2, 5\)"):
        model(x, bad_read)
    bad_write = state._replace(location=DNTMLocation(state.location.read, state.location.write[..., :4]))
    with pytest.raises(ValueError, match=r"state\.location\.write must have shape \(3, 1, 5\)"):
        model(x, bad_write)
    nan = state._replace(
        location=DNTMLocation(state.location.read, state.location.write.clone().fill_(float("nan")))
    )
    with pytest.raises(ValueError, match="NaN or infinity"):
        model(x, nan)
    with pytest.raises(TypeError, match=r"state\.location must be of type DNTMLocation"):
        model(x, DNTMState(*state[:5]))  # a state built without the field: shifts need it
    plain = small_model("dntm", 4, 3, read_heads=2)
    with pytest.raises(
        TypeError,
        match=r"state\.location must be \(\) \(this model configuration keeps no state there\)",
    ):
        plain(x, state)  # a shifting model's state given to one without shifts
    with pytest.raises(ValueError, match=r"state\.location\.read must have shape"):
        model.cell(x[:, 0], bad_read)


@pytest.mark.parametrize(
    "value, kw",
    [(-1, {}), (True, {}), (1.0, {}), ("1", {}), (3, {}), (3, {"nop": True})],
)
def test_location_shifts_range(value, kw):
    """An int >= 0 with 2r + 1 <= N' (5 cells: r <= 2; with the NOP cell N' = 6, still r <= 2)."""
    with pytest.raises(ConfigError, match="location_shifts must"):
        build_model("dntm", 4, 3, controller_size=6, memory_slots=SLOTS, location_shifts=value, **kw)
    assert build_model("dntm", 4, 3, memory_slots=SLOTS, location_shifts=2, **kw).cell.location_shifts == 2


def test_config_key_reaches_the_model():
    base = {
        "model": {"name": "dntm", **dict(controller_size=6, memory_slots=SLOTS)},
        "task": {"name": "copy"},
    }
    _, model = build_run(RunConfig.from_dict(apply_overrides(base, ["model.location_shifts=1"])))
    assert model.cell.location_shifts == 1 and len(model.cell.split_sizes) == 10
    with pytest.raises(ConfigError, match="location_shifts must be an integer >= 0"):
        build_run(RunConfig.from_dict(apply_overrides(base, ["model.location_shifts=-1"])))
