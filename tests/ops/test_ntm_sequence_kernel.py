"""The NTM's compiled whole-sequence path (ops/ntm/numba_sequence.py, numba) equals the per-step tensor
path: values, final state, trace and every gradient, for each covered controller, several
head and shift sizes, with and without a carried state; gradcheck of its autograd Function;
no reference cycles; and the dispatch to the step loop where it does not apply."""

import gc
import weakref

import pytest
import torch

import mannlab
from conftest import float64_seq, leaves, small_model
from mannlab.models import base
from mannlab.ops import dispatch, use_kernels
from mannlab.ops.controller_codes import TANH
from mannlab.ops.ntm import ELMAN, LSTM, NTMOptions
from mannlab.ops.ntm.numba_sequence import NTMSequence

COVERED = ["lstm", "fnn", "elman", "pnr-lstm", "pnr-elman"]
SIZES = [
    dict(),
    dict(read_heads=2, write_heads=1, shift_range=2),
    dict(read_heads=1, write_heads=2, shift_range=0),
]


def leaf_copy(state):
    """The state with every tensor a fresh leaf that requires grad."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone().requires_grad_()
    items = [leaf_copy(item) for item in state]
    return type(state)(*items) if hasattr(state, "_fields") else tuple(items)


def run(model, x, state, kernels, trace=True):
    """Outputs, final state, trace and the gradients of a loss that reads all of them."""
    params = list(model.parameters())
    x = x.detach().clone().requires_grad_()
    inputs = [x] + params
    if state is not None:
        state = leaf_copy(state)
        inputs += leaves(state)
    with use_kernels(kernels):
        y, final, tr = model(x, state, return_trace=True) if trace else (*model(x, state), None)
    weights = [
        torch.randn(t.shape, generator=torch.Generator().manual_seed(i), dtype=t.dtype)
        for i, t in enumerate([y, *leaves(final)])
    ]
    loss = sum((w * t).sum() for w, t in zip(weights, [y, *leaves(final)]))
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return y, final, tr, grads


def assert_close(a, b, tol):
    for u, v in zip(a, b):
        if u is None or v is None:
            assert u is None or not u.abs().any(), "one path has a gradient the other lacks"
            assert v is None or not v.abs().any(), "one path has a gradient the other lacks"
        else:
            torch.testing.assert_close(u, v, atol=tol, rtol=tol)


def compare(model, x, state=None, tol=1e-10):
    """The compiled and the tensor path on the same weights and inputs."""
    assert base.sequence_backend(model.cell, x, state, True), "the compiled path should run here"
    y, final, tr, grads = run(model, x, state, True)
    y_ref, final_ref, tr_ref, grads_ref = run(model, x, state, False)
    assert_close([y, *leaves(final), *tr], [y_ref, *leaves(final_ref), *tr_ref], tol)
    assert_close(grads, grads_ref, tol)


@pytest.mark.parametrize("controller", COVERED)
@pytest.mark.parametrize("sizes", SIZES, ids=["1r1w", "2r1w-s2", "1r2w-s0"])
def test_compiled_equals_step_loop(controller, sizes):
    model = small_model("ntm", 5, 4, controller=controller, **sizes)
    compare(model, float64_seq(3, 5, 5, torch.randn))


@pytest.mark.parametrize("controller", ["lstm", "pnr-elman", "fnn"])
def test_compiled_equals_step_loop_from_a_carried_state(controller):
    model = small_model("ntm", 5, 4, controller=controller, read_heads=2)
    with use_kernels(False), torch.no_grad():
        _, state = model(float64_seq(2, 3, 5, torch.randn))
    compare(model, float64_seq(2, 4, 5, torch.randn), state)


def test_float32_within_float32_tolerance():
    torch.manual_seed(0)
    model = mannlab.NTM(5, 4, controller_size=12, memory_slots=9, memory_width=4, read_heads=2)
    x = torch.randn(2, 7, 5)
    y, final, tr, grads = run(model, x, None, True)
    y_ref, final_ref, tr_ref, grads_ref = run(model, x, None, False)
    assert_close([y, *leaves(final)], [y_ref, *leaves(final_ref)], 1e-5)
    assert_close(grads, grads_ref, 1e-4)


@pytest.mark.parametrize("steps", [4, 5])  # the two-row states of a pass without backward
def test_inference_and_chunked_runs_equal_one_run(steps):
    model = small_model("ntm", 5, 4, read_heads=2)
    x = float64_seq(2, 2 * steps, 5, torch.randn)
    with torch.no_grad():
        y, final = model(x)
        y1, state = model(x[:, :steps])
        y2, final2 = model(x[:, steps:], state)
        with use_kernels(False):
            y_ref, final_ref = model(x)
    assert_close([y, *leaves(final)], [y_ref, *leaves(final_ref)], 1e-10)
    assert_close([torch.cat([y1, y2], 1), *leaves(final2)], [y, *leaves(final)], 1e-10)


@pytest.mark.parametrize("controller", ["lstm", "pnr-elman"])
def test_sequence_function_gradcheck(controller):
    model = small_model("ntm", 3, 2, controller=controller, controller_size=3, memory_slots=5, memory_width=2)
    cell = model.cell
    kind, pnr = {"lstm": (LSTM, False), "pnr-elman": (ELMAN, True)}[controller]
    g = torch.Generator().manual_seed(0)
    B, T, R, H, N, W, D = 2, 3, 1, 1, 5, 2, 3
    xp = torch.randn(B, T, cell.controller.read_weight.shape[0], generator=g, dtype=torch.float64)
    state = [
        torch.randn(B, D, generator=g, dtype=torch.float64),
        torch.randn(B, D, generator=g, dtype=torch.float64),
        torch.randn(B, R * W, generator=g, dtype=torch.float64),
        torch.randn(B, N, W, generator=g, dtype=torch.float64),
        torch.softmax(torch.randn(B, R, N, generator=g, dtype=torch.float64), -1),
        torch.softmax(torch.randn(B, H, N, generator=g, dtype=torch.float64), -1),
    ]
    weights = [cell.controller.read_weight, cell.controller.recurrent_weight, *cell.head_params.parameters()]
    inputs = [t.detach().clone().requires_grad_() for t in [xp, *state, *weights]]
    options = NTMOptions(kind, TANH, pnr, W, 3, backward=True, trace=False)

    def function(*tensors):
        with use_kernels(True):
            return NTMSequence.apply(*tensors, options)

    assert torch.autograd.gradcheck(function, inputs)


@pytest.mark.parametrize("with_trace", [False, True])
def test_outputs_are_freed_without_garbage_collection(with_trace):
    # A tensor kept on the autograd context outside save_for_backward forms a reference
    # cycle with its graph node, and a training run's memory grows without bound.
    model = small_model("ntm", 5, 4)
    x = float64_seq(2, 4, 5, torch.randn)
    gc.disable()
    try:
        outputs = model(x, return_trace=with_trace)
        tensors = [outputs[0], *leaves(outputs[1])] + (list(outputs[2]) if with_trace else [])
        refs = [weakref.ref(t) for t in tensors]
        outputs[0].sum().backward()
        del outputs, tensors
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "controller, kernels, compiled_path",
    [("lstm", True, True), ("gru", True, False), ("lstm", False, False), ("fnn", True, True)],
)
def test_dispatch(monkeypatch, controller, kernels, compiled_path):
    model = small_model("ntm", 5, 4, controller=controller)
    calls = []
    fused = type(model.cell).run_op
    monkeypatch.setattr(type(model.cell), "run_op", lambda *a: calls.append(1) or fused(*a))
    x = float64_seq(2, 3, 5, torch.randn)
    with use_kernels(kernels):
        model(x)[0].sum().backward()
    assert bool(calls) == compiled_path


def test_dispatch_falls_back_for_other_activations_and_autocast(monkeypatch):
    model = small_model("ntm", 5, 4, controller="fnn")
    model.cell.controller.activation = torch.relu
    cell = model.cell
    assert not cell.op.covers(cell.op_options(False, False), cell.op_weights(), "numba")
    x = float64_seq(2, 3, 5, torch.randn)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cell = small_model("ntm", 5, 4).cell
        assert not dispatch.choose(cell.op, x, cell.op_options(False, False), cell.op_weights())
    monkeypatch.setattr(base, "run_steps", lambda *a: pytest.fail("the step loop ran"))
    with use_kernels(True):
        small_model("ntm", 5, 4)(x)
