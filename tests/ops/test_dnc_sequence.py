"""The DNC's compiled whole-sequence path (mannlab.ops.dnc.numba_sequence) equals its per-step
tensor path, in values and gradients, and is taken exactly where it applies."""

import gc
import weakref

import numpy as np
import pytest
import torch

import mannlab
from mannlab.models import base
from mannlab.models.dnc import DNCCell
from mannlab.nn import addressing
from mannlab.nn.controllers import CONTROLLERS
from mannlab.ops import dispatch, use_kernels
from mannlab.ops.controller_codes import LSTM, TANH, controller_code
from mannlab.ops.dnc import DNCOptions, numba_sequence
from mannlab.ops.dnc.numba_sequence import DNCSequence

SIZES = dict(controller_size=5, memory_slots=6, memory_width=3)


def model(controller="lstm", read_heads=1, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return mannlab.DNC(4, 3, controller=controller, read_heads=read_heads, **SIZES).to(dtype)


def run(dnc, x, chunks=(None,), kernels=True):
    """Outputs, final state and every gradient of a loss on both, over x cut at ``chunks``
    with the state carried from chunk to chunk."""
    x = x.clone().requires_grad_(True)
    with use_kernels(kernels):
        state, outputs, start = None, [], 0
        for stop in (*chunks[:-1], x.shape[1]) if chunks[0] is not None else (x.shape[1],):
            y, state = dnc(x[:, start:stop], state)
            outputs.append(y)
            start = stop
        y = torch.cat(outputs, 1)
        flat = [y, *state.controller, *state[1:]]
        loss = sum((t * torch.linspace(-1, 1, t.numel()).view_as(t)).sum() for t in flat)
        grads = torch.autograd.grad(loss, [x, *dnc.parameters()])
    return [t.detach() for t in flat], grads


def assert_close(a, b, tol):
    for u, v in zip(a, b, strict=True):
        torch.testing.assert_close(u, v, rtol=tol, atol=tol)


@pytest.mark.parametrize("controller", ["lstm", "fnn", "elman", "pnr-lstm", "pnr-elman"])
@pytest.mark.parametrize("read_heads", [1, 2])
def test_compiled_path_equals_tensor_path(controller, read_heads):
    dnc = model(controller, read_heads)
    x = torch.randn(3, 7, 4)
    for chunks in ((None,), (2, 5, 7)):  # one run; three chunks with the state carried
        fused, fused_grads = run(dnc, x, chunks)
        steps, step_grads = run(dnc, x, chunks, kernels=False)
        assert_close(fused, steps, 1e-5)
        assert_close(fused_grads, step_grads, 1e-4)


def test_chunks_with_carried_state_equal_one_run():
    dnc = model("lstm", 2)
    x = torch.randn(2, 9, 4)
    whole, whole_grads = run(dnc, x)
    chunked, chunked_grads = run(dnc, x, (1, 4, 9))
    assert_close(whole, chunked, 1e-5)
    assert_close(whole_grads, chunked_grads, 1e-4)


@pytest.mark.parametrize("activation", [torch.sigmoid, torch.relu])
def test_feedforward_activations(activation):
    dnc = model("fnn")
    dnc.cell.controller.activation = activation
    x = torch.randn(2, 5, 4)
    assert_close(run(dnc, x)[1], run(dnc, x, kernels=False)[1], 1e-4)


def test_inference_without_graph_equals_tensor_path():
    dnc = model("lstm", 2)
    x = torch.randn(2, 6, 4)
    with torch.no_grad():
        y, state = dnc(x)
        with use_kernels(False):
            y_ref, state_ref = dnc(x)
    assert_close([y, *state.controller, *state[1:]], [y_ref, *state_ref.controller, *state_ref[1:]], 1e-5)


@pytest.mark.parametrize(
    "B, T, H, N, W, R",
    [
        (2, 3, 2, 4, 2, 1),
        # an odd N (the link forward's rows go in pairs, then the last alone), two heads,
        # T = 5: with the rule's interval (ceil(sqrt(B T)) = 3) two segments, whose
        # memories and links the backward recomputes from their checkpoints
        (1, 5, 2, 5, 2, 2),
    ],
)
@pytest.mark.parametrize("every", [None, 1, 2, 99])  # the rule's; one step, two, T per segment
def test_gradcheck_of_the_function(B, T, H, N, W, R, every, monkeypatch):
    if every is not None:
        monkeypatch.setattr(numba_sequence, "checkpoint_interval", lambda batch, steps: min(every, steps))
    torch.manual_seed(1)
    d = dict(dtype=torch.float64)
    cell = DNCCell(3, "lstm", H, N, W, R).double()

    def simplex(*shape):
        return 0.8 * torch.softmax(torch.randn(*shape, **d), -1)

    links = simplex(B, N, N) / 2 * (1 - torch.eye(N, **d))
    inputs = [
        torch.randn(B, T, 4 * H, **d),
        torch.randn(B, H, **d),
        torch.randn(B, H, **d),
        torch.randn(B, R * W, **d),
        torch.randn(B, N, W, **d),
        simplex(B, R, N),
        simplex(B, N),
        torch.rand(B, N, **d),
        simplex(B, N),
        links,
        cell.controller.read_weight.detach(),
        cell.controller.recurrent_weight.detach(),
        cell.interface.weight.detach(),
        cell.interface.bias.detach(),
    ]
    inputs = [t.clone().requires_grad_(True) for t in inputs]

    def function(*tensors):
        return DNCSequence.apply(*tensors, DNCOptions(LSTM, TANH, False, backward=True))

    assert torch.autograd.gradcheck(function, inputs, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CONTROLLERS))
def test_every_controller_is_covered_or_takes_the_step_loop(name, monkeypatch):
    dnc = model(name)
    x = torch.randn(2, 4, 4)
    covered = name != "gru"
    assert (controller_code(dnc.cell.controller) is not None) == covered
    assert bool(base.sequence_backend(dnc.cell, x)) == covered
    if not covered:  # the step loop, never the kernels
        monkeypatch.setattr(DNCCell, "run_op", lambda *args: pytest.fail("compiled path taken"))
    assert_close(run(dnc, x)[1], run(dnc, x, kernels=False)[1], 1e-4)


def test_trace_switch_dtype_and_subclasses_take_the_step_loop(monkeypatch):
    monkeypatch.setattr(DNCCell, "run_op", lambda *args: pytest.fail("compiled path taken"))
    dnc = model()
    x = torch.randn(2, 4, 4)
    y, _, trace = dnc(x, return_trace=True)  # the trace: step loop
    assert trace.links.shape == (2, 4, 6, 6)
    with use_kernels(False):
        dnc(x)
    dnc.to(torch.bfloat16)(x.to(torch.bfloat16))

    class Custom(type(model().cell.controller)):
        pass

    other = model()
    other.cell.controller.__class__ = Custom
    assert controller_code(other.cell.controller) is None
    other(x)


def test_compiled_outputs_are_freed_without_garbage_collection():
    # A tensor kept on the autograd context outside save_for_backward forms a reference
    # cycle with its graph node, and a training run's memory grows without bound.
    dnc = model("lstm", 2)
    x = torch.randn(2, 5, 4)
    gc.disable()
    try:
        y, state = dnc(x)
        refs = [weakref.ref(t) for t in (y, *state.controller, *state[1:])]
        (y.sum() + state.memory.sum()).backward()
        del y, state
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()


def test_records_are_reused_only_once_their_graph_is_gone():
    from mannlab.ops.dnc import numba_sequence

    pool = numba_sequence.RecordPool(sets=2)
    shapes = (((2, 3), True), ((4,), None))
    first = pool.take(shapes, "float32")
    saved = torch.from_numpy(first[0])  # as a graph's saved tensor holds it
    assert pool.take(shapes, "float32") is not first
    del saved
    assert pool.take(shapes, "float32") is first
    # two graphs alive at once, each backward sees its own records
    dnc = model("lstm", 2)
    x = torch.randn(2, 5, 4)
    y1, _ = dnc(x)
    y2, _ = dnc(x.flip(1))
    g2 = torch.autograd.grad(y2.sum(), list(dnc.parameters()))
    g1 = torch.autograd.grad(y1.sum(), list(dnc.parameters()))
    with use_kernels(False):
        r1 = torch.autograd.grad(dnc(x)[0].sum(), list(dnc.parameters()))
        r2 = torch.autograd.grad(dnc(x.flip(1))[0].sum(), list(dnc.parameters()))
    assert_close(g1 + g2, r1 + r2, 1e-4)


def test_allocation_sort_from_any_starting_order_is_the_stable_sort():
    # The kernels sort the usage by insertion, starting from the previous step's order;
    # from any starting permutation the result must be the stable ascending order (ties
    # to the lower slot) and the allocation that of the reference.
    pytest.importorskip("numba")
    kernels = dispatch.load("dnc")
    rng = np.random.default_rng(0)
    for _ in range(20):
        usage = rng.random(12).round(1)  # rounded: many ties
        order, alloc = rng.permutation(12), np.empty(12)
        kernels._allocation(usage, order, alloc)
        assert (order == np.argsort(usage, kind="stable")).all()
        expected = addressing.allocation(torch.from_numpy(usage)[None])[0]
        torch.testing.assert_close(torch.from_numpy(alloc), expected, rtol=1e-12, atol=1e-12)
