"""The NTM's whole-sequence op, ``mannlab.ops.ntm.ntm_sequence``, on its kernel backends against
its plain tensor loop (ops/ntm/reference.py): features, final state, trace and every gradient by
name (input projection, initial state, each weight); a chunked run with the state carried equal
to one run; and at model level the Triton path equal to the step loop.

The Triton kernels run on the GPU where there is one, else in Triton's interpreter on CPU
tensors (tests/conftest.py), at tiny sizes: the interpreter takes seconds per call."""

import pytest
import torch

import mannlab
from conftest import TRITON_ROWS, TRITON_ROWS_BATCH, force_triton_rows, leaves, small_model
from mannlab.ops import dispatch, use_kernels
from mannlab.ops import ntm as ntm_op
from mannlab.ops.controller_codes import TANH
from mannlab.ops.ntm import (
    ELMAN,
    FNN,
    LSTM,
    NTMOptions,
    NTMState,
    NTMWeights,
    ntm_sequence,
)
from mannlab.ops.ntm.reference import ntm_sequence_reference

CONTROLLER_SIZES = {LSTM: 4, ELMAN: 1, FNN: 1}  # blocks of the pre-activation


def problem(kind, pnr=False, B=2, T=3, D=5, R=1, H=1, N=7, W=3, S=3, seed=0, dtype=torch.float64):
    """Random x_proj, state and weights of an op call (float64, CPU), and its options."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=dtype) * scale

    G, P = CONTROLLER_SIZES[kind] * D, (H + R) * (W + 3 + S) + H * 2 * W
    controller = {LSTM: (rand(B, D), rand(B, D)), ELMAN: (rand(B, D),), FNN: ()}[kind]
    state = NTMState(
        controller=controller,
        memory=rand(B, N, W),
        read_vectors=rand(B, R, W),
        read_weights=torch.softmax(rand(B, R, N), -1),
        write_weights=torch.softmax(rand(B, H, N), -1),
    )
    weights = NTMWeights(
        read_weight=rand(G, R * W, scale=0.5),
        recurrent_weight=rand(G, D, scale=0.5) if kind != FNN else None,
        head_weight=rand(P, D),
        head_bias=rand(P),
    )
    options = NTMOptions(
        kind=kind, activation=TANH, pnr=pnr, width=W, num_shifts=S, backward=True, trace=True
    )
    return rand(B, T, G), state, weights, options


def to_leaves(x_proj, state, weights, device, dtype):
    """Fresh leaves that require grad, on ``device`` in ``dtype``."""

    def leaf(t):
        return None if t is None else t.detach().to(device, dtype).clone().requires_grad_()

    state = state._replace(controller=tuple(map(leaf, state.controller)))
    state = state._replace(**{k: leaf(v) for k, v in state._asdict().items() if k != "controller"})
    return leaf(x_proj), state, NTMWeights(*map(leaf, weights))


def named_leaves(record, prefix):
    """The tensors of a record by dotted name (the controller's state by position)."""
    named = {}
    for key, value in record._asdict().items():
        if isinstance(value, tuple):
            named.update({f"{prefix}.{key}.{i}": v for i, v in enumerate(value)})
        elif value is not None:
            named[f"{prefix}.{key}"] = value
    return named


def named_inputs(x_proj, state, weights):
    return {"x_proj": x_proj, **named_leaves(state, "state"), **named_leaves(weights, "weights")}


def run(backend, problem_, device, dtype):
    """Result and the gradients, by name, of a loss that reads the features and final state."""
    x_proj, state, weights, options = problem_
    x_proj, state, weights = to_leaves(x_proj, state, weights, device, dtype)
    result = ntm_sequence(x_proj, state, weights, options, backend)
    outputs = [result.features, *leaves(result.state)]
    g = torch.Generator().manual_seed(7)
    loss = sum((torch.randn(t.shape, generator=g, dtype=torch.float64).to(t) * t).sum() for t in outputs)
    named = named_inputs(x_proj, state, weights)
    grads = torch.autograd.grad(loss, list(named.values()), allow_unused=True)
    return result, dict(zip(named, grads))


def backend_setup(backend):
    """(device, dtype, tolerance) of a backend's run here."""
    if backend == "triton":
        from conftest import triton_setup

        return triton_setup()
    return "cpu", torch.float64, 1e-10


def assert_same(result, grads, ref, ref_grads, tol):
    def close(a, b, what):
        torch.testing.assert_close(
            a.double().cpu(), b.double(), atol=tol, rtol=tol, msg=lambda m: f"{what}: {m}"
        )

    close(result.features, ref.features, "features")
    ref_state = named_leaves(ref.state, "state")
    for name, value in named_leaves(result.state, "state").items():
        close(value, ref_state[name], name)
    for name in result.trace._fields:
        close(getattr(result.trace, name), getattr(ref.trace, name), f"trace.{name}")
    for name, grad in ref_grads.items():
        if grad is None:
            assert grads[name] is None or not grads[name].abs().any(), (
                f"{name}: a gradient the reference lacks"
            )
        else:
            close(grads[name], grad, f"gradient of {name}")


CONFIGS = {
    "lstm-1r1w": dict(kind=LSTM),
    "fnn-2r1w-s5": dict(kind=FNN, R=2, S=5, B=3, T=2),
    "pnr-elman-1r2w-s1": dict(kind=ELMAN, pnr=True, H=2, S=1, N=5),
    "pnr-lstm": dict(kind=LSTM, pnr=True, N=6, W=2),
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("backend", ["numba", "triton"])
def test_backend_equals_reference(backend, config):
    device, dtype, tol = backend_setup(backend)
    case = problem(**CONFIGS[config])
    result, grads = run(backend, case, device, dtype)
    ref, ref_grads = run("reference", case, "cpu", torch.float64)
    assert_same(result, grads, ref, ref_grads, tol)


@pytest.mark.parametrize("rows", TRITON_ROWS)
def test_triton_at_any_rows_per_program(rows, monkeypatch):
    """Forced rows per program, on a batch that leaves a tail tile (or one row a program)."""
    pytest.importorskip("triton")
    from mannlab.ops.ntm import triton_sequence

    taken = force_triton_rows(monkeypatch, triton_sequence, rows)
    device, dtype, tol = backend_setup("triton")
    case = problem(LSTM, B=TRITON_ROWS_BATCH, T=2, N=5, W=2)
    result, grads = run("triton", case, device, dtype)
    ref, ref_grads = run("reference", case, "cpu", torch.float64)
    assert_same(result, grads, ref, ref_grads, tol)
    assert taken == [rows, rows]  # the forward's launch and the backward's


@pytest.mark.parametrize("backend", ["numba", "triton"])
def test_chunked_run_equals_one_run(backend):
    device, dtype, tol = backend_setup(backend)
    x_proj, state, weights, options = problem(LSTM, T=3)
    x_proj, state, weights = to_leaves(x_proj, state, weights, device, dtype)
    whole = ntm_sequence(x_proj, state, weights, options, backend)
    first = ntm_sequence(x_proj[:, :2], state, weights, options, backend)
    second = ntm_sequence(x_proj[:, 2:], first.state, weights, options, backend)
    features = torch.cat([first.features, second.features], 1)
    torch.testing.assert_close(features, whole.features, atol=tol, rtol=tol)
    for a, b in zip(leaves(second.state), leaves(whole.state)):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    # the gradients through the carried state too
    named = named_inputs(x_proj, state, weights)
    upstream = torch.randn(features.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    upstream = upstream.to(features)
    chunked = torch.autograd.grad((features * upstream).sum(), list(named.values()))
    single = torch.autograd.grad((whole.features * upstream).sum(), list(named.values()))
    for name, a, b in zip(named, chunked, single):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, msg=lambda m: f"{name}: {m}")
    # and without a backward (the forward keeps two state rows in turn)
    with torch.no_grad():
        quick = options._replace(backward=False, trace=False)
        first = ntm_sequence(x_proj[:, :1], state, weights, quick, backend)
        second = ntm_sequence(x_proj[:, 1:], first.state, weights, quick, backend)
    torch.testing.assert_close(
        torch.cat([first.features, second.features], 1), whole.features, atol=tol, rtol=tol
    )
    for a, b in zip(leaves(second.state), leaves(whole.state)):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


@pytest.mark.parametrize("controller", ["lstm", "fnn"])
def test_model_on_triton_equals_step_loop(controller):
    device, dtype, tol = backend_setup("triton")
    torch.manual_seed(0)
    model = small_model("ntm", 4, 3, controller=controller, controller_size=5, memory_slots=6)
    model = model.to(device, dtype)
    x = torch.randn(3, 3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(
        device, dtype
    )

    def outputs_and_grads(kernels):
        model.zero_grad()
        with use_kernels(kernels):
            options, weights = model.cell.op_options(True, True), model.cell.op_weights()
            assert dispatch.choose(ntm_op, x, options, weights) == ("triton" if kernels else "")
            y, state, trace = model(x, return_trace=True)
        loss = (y * y).sum() + sum((t * t).sum() for t in leaves(state))
        loss.backward()
        return [y, *leaves(state), *trace], {n: p.grad.clone() for n, p in model.named_parameters()}

    values, grads = outputs_and_grads("triton")
    ref_values, ref_grads = outputs_and_grads(False)
    for a, b in zip(values, ref_values):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=tol, rtol=tol, msg=lambda m: f"{name}: {m}")


def test_triton_dtypes_and_unknown_backend():
    pytest.importorskip("triton")
    from mannlab.ops.ntm import triton_kernels

    assert torch.float32 in triton_kernels.DTYPES
    with pytest.raises(ValueError, match="backend"):
        ntm_sequence(*problem(LSTM), backend="cuda")


def test_reference_equals_the_model_step_loop():
    # the op's reference and the cell's own step loop (mannlab.nn.addressing) are the same NTM
    model = small_model("ntm", 4, None, controller="lstm")
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    cell = model.cell
    with use_kernels(False):
        y, final = model(x)
    start = model.initial_state(2, dtype=torch.float64)
    state = start
    weights = NTMWeights(
        cell.controller.read_weight,
        cell.controller.recurrent_weight,
        cell.head_params.weight,
        cell.head_params.bias,
    )
    options = NTMOptions(LSTM, TANH, False, cell.width, cell.num_shifts, backward=False, trace=False)
    features, state, _ = ntm_sequence_reference(cell.precompute(x), state, weights, options)
    torch.testing.assert_close(features, y)
    torch.testing.assert_close(state.memory, final.memory)


def test_op_lists_triton():
    assert mannlab.NTM(3, 2).cell.op.BACKENDS[:2] == ("numba", "triton")
