"""ARMIN's whole-sequence op (mannlab.ops.armin.armin_sequence): the numba and the Triton
kernels against the plain tensor loop of reference.py (outputs, final state and every gradient
by name, each addressing mode, zoneout, the write map, rows starting mid-fill), a chunked run
with carried state against one run, the reference's trace against the module's step loop, and
the ARMIN module on the Triton path against its tensor path. The Triton kernels run in Triton's
interpreter where there is no GPU (tiny sizes)."""

import pytest
import torch

from conftest import triton_device
from mannlab.models import base, build_model
from mannlab.ops import armin as armin_op
from mannlab.ops import use_kernels
from mannlab.ops.armin import ARMINInputs, ARMINOptions, ARMINState, ARMINWeights, armin_sequence
from mannlab.ops.armin.records import MODES, NOISY_MODES

B, T, DH, N = 3, 6, 5, 3  # N < T: every row's writes pass the filling phase
STEPS0 = (0, 1, 7)  # rows that start empty, mid-fill and full
#: float32 Triton against the float64 reference
TRITON_TOL = dict(atol=2e-4, rtol=2e-4)


def problem(mode, width=3, zoneout=False, dtype=torch.float64, device="cpu", seed=0, t=T):
    """Random records of one op call (every tensor a leaf that requires grad, but the draws)."""
    gen = torch.Generator().manual_seed(seed)
    C, G = DH + width, 4 * DH + width

    def rand(*shape, scale=0.5):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)

    noise = None
    if mode in NOISY_MODES:
        noise = -torch.log(torch.empty(t, B, N, dtype=torch.float64).exponential_(generator=gen)).to(dtype)
    zone = (torch.rand(t, B, DH, generator=gen, dtype=torch.float64) < 0.4).to(dtype) if zoneout else None
    inputs = ARMINInputs(rand(B, t, C + G + N + 2, scale=1.0), noise, zone)  # 2 unused columns
    counts = torch.rand(B, N, generator=gen, dtype=torch.float64).to(dtype)  # passed through
    state = ARMINState(rand(B, DH), rand(B, N, width), counts, counts.round(), torch.tensor(STEPS0))
    weights = ARMINWeights(
        control_h=rand(C + N, DH),
        control_r=rand(C, width),
        gates_h=rand(G, DH),
        gates_r=rand(G, width),
        write_map=rand(width, DH) if width != DH else None,
        ln_control_weight=1 + rand(C),
        ln_control_bias=rand(C),
        ln_gates_weight=1 + rand(G),
        ln_gates_bias=rand(G),
        ln_hidden_weight=1 + rand(DH),
        ln_hidden_bias=rand(DH),
    )

    def leaf(v):
        return None if v is None else v.to(device).requires_grad_(v.is_floating_point())

    inputs = ARMINInputs(leaf(inputs.projected), *(None if v is None else v.to(device) for v in inputs[1:]))
    state = state._replace(
        hidden=leaf(state.hidden),
        memory=leaf(state.memory),
        read_counts=state.read_counts.to(device),
        last_read=state.last_read.to(device),
        steps=state.steps.to(device),
    )
    weights = ARMINWeights(*(leaf(w) for w in weights))
    return inputs, state, weights


def differentiable(inputs, state, weights):
    """The op's differentiable arguments by name."""
    named = {"projected": inputs.projected, "h0": state.hidden, "m0": state.memory}
    named.update({name: w for name, w in weights._asdict().items() if w is not None})
    return named


def run(inputs, state, weights, options, backend, seed=5):
    """Outputs, final state and the gradient of every differentiable argument (by name) of a
    loss that reaches every output."""
    out, carry, _ = armin_sequence(inputs, state, weights, options, backend)
    gen = torch.Generator().manual_seed(seed)
    loss = sum(
        (v * torch.randn(v.shape, generator=gen, dtype=torch.float64).to(v)).sum()
        for v in (out, carry.hidden, carry.memory)
    )
    named = differentiable(inputs, state, weights)
    grads = torch.autograd.grad(loss, list(named.values()), allow_unused=True)
    return out, carry, dict(zip(named, grads))


def as_double(records):
    """The same records in float64 on the CPU (the reference's precision for a float32 run)."""
    return type(records)(
        *(
            None
            if v is None
            else (v.detach().double() if v.is_floating_point() else v).cpu().requires_grad_(v.requires_grad)
            for v in records
        )
    )


def assert_same(got, want, atol, rtol=0.0):
    (out, carry, grads), (out_ref, carry_ref, grads_ref) = got, want
    torch.testing.assert_close(out.double().cpu(), out_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(carry.hidden.double().cpu(), carry_ref.hidden, atol=atol, rtol=rtol)
    torch.testing.assert_close(carry.memory.double().cpu(), carry_ref.memory, atol=atol, rtol=rtol)
    assert torch.equal(carry.steps.cpu(), carry_ref.steps)
    for passed in ("read_counts", "last_read"):  # the op passes them through
        torch.testing.assert_close(getattr(carry, passed).double().cpu(), getattr(carry_ref, passed))
    assert grads.keys() == grads_ref.keys()
    for name, grad in grads.items():
        ref = grads_ref[name]
        if ref is None:  # argmax reads: no gradient reaches W_s's rows from the read
            ref = torch.zeros_like(grad.double().cpu())
        torch.testing.assert_close(
            grad.double().cpu(), ref, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}"
        )


# ---------------------------------------------------------------- numba vs reference


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("width, zoneout", [(3, False), (DH, False), (3, True)])
def test_numba_matches_reference(mode, width, zoneout):
    records = problem(mode, width, zoneout)
    options = ARMINOptions(mode=mode, inverse_temperature=2.0)
    got = run(*records, options, "numba")
    want = run(*records, options, "reference")
    assert_same(got, want, atol=1e-10)


def test_bad_records_get_clear_errors():
    inputs, state, weights = problem("soft")
    with pytest.raises(ValueError, match="mode must be one of"):
        armin_sequence(inputs, state, weights, ARMINOptions(mode="hard"))
    with pytest.raises(ValueError, match="backend must be one of"):
        armin_sequence(inputs, state, weights, ARMINOptions(mode="soft"), "cuda")
    with pytest.raises(ValueError, match="does not cover"):
        armin_sequence(inputs, state, weights, ARMINOptions(mode="soft", trace=True), "numba")
    with pytest.raises(ValueError, match="Gumbel draws"):
        armin_sequence(inputs, state, weights, ARMINOptions(mode="gumbel"))
    with pytest.raises(ValueError, match="zoneout must be"):
        armin_sequence(
            inputs._replace(zoneout=torch.zeros(1, B, DH)), state, weights, ARMINOptions(mode="soft")
        )


# --------------------------------------------------------------- Triton vs reference


@pytest.mark.parametrize(
    "mode, width, zoneout",
    [("soft", 3, True), ("gumbel-relaxed", DH, False), ("gumbel", 3, True), ("argmax", DH, True)],
)
def test_triton_matches_reference(mode, width, zoneout):
    """Every mode, the write map and its absence, zoneout and none, all gradients by name."""
    records = problem(mode, width, zoneout, dtype=torch.float32, device=triton_device())
    options = ARMINOptions(mode=mode, inverse_temperature=2.0)
    got = run(*records, options, "triton")
    want = run(*(as_double(r) for r in records), options, "reference")
    assert_same(got, want, **TRITON_TOL)


@pytest.mark.parametrize("mode", ["gumbel", "soft"])
def test_triton_inference_without_records(mode):
    """backward=False: the memory updated in place (one-hot reads: only the slot written), no
    per-step records; the same outputs."""
    records = problem(mode, 3, True, dtype=torch.float32, device=triton_device())
    options = ARMINOptions(mode=mode, inverse_temperature=2.0, backward=False)
    with torch.no_grad():
        out, carry, _ = armin_sequence(*records, options, "triton")
        out_ref, carry_ref, _ = armin_sequence(*(as_double(r) for r in records), options, "reference")
    torch.testing.assert_close(out.double().cpu(), out_ref, **TRITON_TOL)
    torch.testing.assert_close(carry.hidden.double().cpu(), carry_ref.hidden, **TRITON_TOL)
    torch.testing.assert_close(carry.memory.double().cpu(), carry_ref.memory, **TRITON_TOL)


def test_triton_chunked_run_with_carried_state_equals_one_run():
    """Two segments, the second from the first's state (TBPTT with the memory carried): the
    outputs, final state and gradients of one run over both."""
    inputs, state, weights = problem("gumbel", 3, True, dtype=torch.float32, device=triton_device())
    options = ARMINOptions(mode="gumbel", inverse_temperature=2.0)
    whole = run(inputs, state, weights, options, "triton")
    cut = 2

    def chunked(options):
        first = ARMINInputs(inputs.projected[:, :cut], inputs.noise[:cut], inputs.zoneout[:cut])
        rest = ARMINInputs(inputs.projected[:, cut:], inputs.noise[cut:], inputs.zoneout[cut:])
        out_a, carry, _ = armin_sequence(first, state, weights, options, "triton")
        out_b, carry, _ = armin_sequence(rest, carry, weights, options, "triton")
        return torch.cat([out_a, out_b], 1), carry

    gen = torch.Generator().manual_seed(5)
    out, carry = chunked(options)
    loss = sum(
        (v * torch.randn(v.shape, generator=gen, dtype=torch.float64).to(v)).sum()
        for v in (out, carry.hidden, carry.memory)
    )
    named = differentiable(inputs, state, weights)
    grads = dict(zip(named, torch.autograd.grad(loss, list(named.values()))))
    assert_same((out, carry, grads), tuple(_double(v) for v in whole), **TRITON_TOL)


def _double(value):
    if isinstance(value, dict):
        return {k: v.double().cpu() for k, v in value.items()}
    if isinstance(value, tuple):
        return type(value)(*(_double(v) for v in value))
    return value.double().cpu() if value.is_floating_point() else value.cpu()


# ------------------------------------------------------------------- the ARMIN module


@pytest.mark.parametrize("addressing, zoneout", [("gumbel", 0.0), ("soft", 0.3)])
def test_armin_on_triton_equals_its_tensor_path(addressing, zoneout):
    """``use_kernels("triton")`` runs the module's whole sequence in the Triton kernels: the
    outputs, final state and every parameter gradient of ``use_kernels(False)`` (same draws)."""
    device = triton_device()
    torch.manual_seed(0)
    model = build_model(
        "armin", 4, 3, hidden_size=DH, memory_slots=N, memory_width=3, addressing=addressing, zoneout=zoneout
    ).to(device)
    model.inverse_temperature = 2.0
    x = torch.rand(B, T, 4, generator=torch.Generator().manual_seed(1)).to(device)
    with use_kernels("triton"):
        assert base.sequence_backend(model.cell, x) == "triton"
    results = []
    for setting in (False, "triton"):
        model.zero_grad()
        torch.manual_seed(2)
        with use_kernels(setting):
            y, state = model(x)
        (y.sin().sum() + state.hidden.sum() + state.memory.pow(2).sum()).backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((y, state, grads))
    (y0, s0, g0), (y1, s1, g1) = results
    torch.testing.assert_close(y1, y0, **TRITON_TOL)
    for a, b in zip(s1, s0):
        torch.testing.assert_close(a, b, **TRITON_TOL)
    assert g0.keys() == g1.keys()
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], **TRITON_TOL, msg=lambda m: f"{name}: {m}")
    model.eval()  # inference: argmax (or soft) reads, no records, zoneout's expectation
    with torch.no_grad():
        with use_kernels(False):
            y0, s0 = model(x)
        with use_kernels("triton"):
            y1, s1 = model(x)
    torch.testing.assert_close(y1, y0, **TRITON_TOL)
    torch.testing.assert_close(s1.memory, s0.memory, **TRITON_TOL)


def test_triton_covers_the_papers_configuration_up_to_its_sizes():
    def covers(with_trace=False, backend="triton", **kw):
        cell = build_model("armin", 4, 3, **{"hidden_size": DH, "memory_slots": N, **kw}).cell
        options = cell.op_options(with_trace, True)
        return options is not None and armin_op.covers(options, cell.op_weights(), backend)

    assert covers() and covers(zoneout=0.2)
    assert not covers(with_trace=True)  # the trace: the step loop
    assert not covers(write="queue")  # the op has no word for it
    assert covers(hidden_size=128, memory_slots=128)
    assert not covers(hidden_size=129)
    assert covers(backend="numba", hidden_size=129)  # numba takes any size


@pytest.mark.parametrize("addressing, zoneout", [("gumbel", 0.3), ("soft", 0.0)])
def test_reference_trace_equals_the_module_step_loop(addressing, zoneout):
    """The reference backend's outputs, final state and trace: the module's own step loop's
    (the same draws)."""
    torch.manual_seed(0)
    model = build_model(
        "armin", 4, 3, hidden_size=DH, memory_slots=N, memory_width=3, addressing=addressing, zoneout=zoneout
    ).double()
    cell, x = model.cell, torch.rand(B, T, 4, dtype=torch.float64)
    options = cell.op_options(with_trace=True, backward=False)
    with torch.no_grad(), use_kernels(False):
        torch.manual_seed(2)
        features, final, trace = model._run(x, cell.initial_state(B), True)
        torch.manual_seed(2)
        result = cell.run_op(x, cell.initial_state(B), options, cell.op_weights(), "reference")
    torch.testing.assert_close(result.features, features)
    for name, value in final._asdict().items():
        torch.testing.assert_close(getattr(result.state, name), value, msg=name)
    for name, value in trace._asdict().items():
        torch.testing.assert_close(getattr(result.trace, name), value, msg=name)
