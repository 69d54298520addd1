"""The whole-sequence kernels on more than one thread (ops/threads.py): with one thread the
kernel is called exactly as before; with two the batch is cut into row blocks whose results
equal the one-thread ones to rounding, the same at every call, with the same random draws."""

from contextlib import contextmanager

import numpy as np
import pytest
import torch

from conftest import float64_seq, leaves, small_model
from mannlab.models import base
from mannlab.ops import set_threads, threads, use_kernels
from mannlab.ops.threads import Rows


@contextmanager
def torch_threads(count):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_blocks_are_contiguous_and_balanced():
    assert threads.blocks(8, 1) == [(0, 8)]
    assert threads.blocks(5, 2) == [(0, 3), (3, 5)]
    assert threads.blocks(1, 4) == [(0, 1)]
    assert threads.blocks(3, 8) == [(0, 1), (1, 2), (2, 3)]


def test_set_threads_overrides_torch_and_none_follows_it_again():
    with torch_threads(1):
        assert threads.get_threads() == 1
        set_threads(2)
        try:
            assert threads.get_threads() == 2 and threads.blocks(5) == [(0, 3), (3, 5)]
        finally:
            set_threads(None)
        assert threads.get_threads() == 1 and threads.blocks(5) == [(0, 5)]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="thread count >= 1 or None"):
            set_threads(bad)


def test_one_thread_calls_the_kernel_once_on_the_arguments_as_given():
    """One thread: the serial kernel on the very arrays given, its result returned as is (so
    the results are bit-identical to the kernels before threading)."""
    calls = []
    result = (np.zeros(3), np.ones(2))

    def kernel(*args):
        calls.append(args)
        return result

    x, noise = np.arange(12.0).reshape(4, 3), np.ones((2, 4))
    with torch_threads(1):
        out = threads.call(kernel, (Rows(x), (Rows(noise, 1), 7)), (0, threads.SUM), 4)
    assert out is result
    assert len(calls) == 1
    assert calls[0][0] is x and calls[0][1][0] is noise and calls[0][1][1] == 7


@pytest.mark.parametrize("count", [2, 3])
def test_call_cuts_rows_and_joins_blocks(count):
    """Batch-major, time-major, custom-cut and shared arguments (also inside a tuple); results
    concatenated, summed over blocks in order, or taken from the first block."""

    def kernel(x, noise, pair, weight, scale):
        rows = x * weight + noise.T + pair[1][:, None]
        return rows, (rows.sum(0), np.full(2, scale))

    rng = np.random.default_rng(0)
    x, noise, w, extra = rng.random((5, 4)), rng.random((4, 5)), rng.random(4), rng.random(5)
    args = (Rows(x), Rows(noise, 1), (w, Rows(extra, lambda v, start, stop: v[start:stop])), w, 2.0)
    join = (0, (threads.SUM, threads.FIRST))
    with torch_threads(1):
        whole = threads.call(kernel, args, join, 5)
    with torch_threads(count):
        cut = threads.call(kernel, args, join, 5)
    assert np.array_equal(cut[0], whole[0])
    assert np.allclose(cut[1][0], whole[1][0], rtol=0, atol=1e-14)
    assert np.array_equal(cut[1][1], whole[1][1])


def test_kept_blocks_go_back_to_their_own_blocks():
    """KEEP leaves a result in its row blocks (never copied); given back to call as an
    argument, each block gets its own, on the blocks of the call that made it (as a backward
    runs on its forward's blocks, whatever the thread count is by then)."""

    def forward(x):
        return x * 2.0, x + 1.0

    def backward(saved, grad):
        return saved * grad

    x = np.arange(10.0).reshape(5, 2)
    with torch_threads(2):
        y, kept = threads.call(forward, (Rows(x),), (0, threads.KEEP), 5)
    assert isinstance(kept, threads.Blocks) and kept.parts == [(0, 3), (3, 5)]
    assert np.array_equal(y, x * 2.0) and np.array_equal(np.concatenate(kept.values), x + 1.0)
    with torch_threads(1):
        grad = threads.call(backward, (kept, Rows(np.full((5, 2), 3.0))), 0, 5)
        assert np.array_equal(grad, (x + 1.0) * 3.0)
        _, whole = threads.call(forward, (Rows(x),), (0, threads.KEEP), 5)
    assert whole.parts == [(0, 5)] and np.array_equal(whole.values[0], x + 1.0)


def float_leaves(value):
    return [t for t in leaves(value) if t.is_floating_point()]


def run(model, x, count, trace):
    """Outputs (with trace) and every parameter and input gradient of one forward and backward
    on ``count`` threads, from seed 3; the number of row blocks of each kernel call."""
    joins = []  # per kernel call, the blocks run on threads (0: the kernel called once, whole)
    original_call, original_block = threads.call, threads._block

    def counting_call(*args):
        joins.append(0)
        return original_call(*args)

    def counting_block(*args):
        joins[-1] += 1
        return original_block(*args)

    threads.call, threads._block = counting_call, counting_block
    try:
        model.zero_grad()
        inp = x.clone().requires_grad_()
        torch.manual_seed(3)
        with torch_threads(count), use_kernels(True):
            out = model(inp, return_trace=trace) if trace else model(inp)
            loss = sum(((i + 1) * t).sin().sum() for i, t in enumerate(float_leaves(out)))
            loss.backward()
    finally:
        threads.call, threads._block = original_call, original_block
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    grads["input"] = inp.grad.clone()
    return leaves(out), grads, joins


MODELS = [
    ("armin", dict(addressing="gumbel", zoneout=0.3), False),
    ("armin", dict(addressing="gumbel-relaxed"), False),
    ("tardis", dict(addressing="gumbel", layer_norm=True, recurrent_dropout=0.3), True),
    ("tardis", dict(addressing="reinforce"), True),
    ("dntm", dict(addressing="reinforce"), True),
    ("dntm", dict(addressing="soft", controller="fnn", read_heads=2), True),
    ("ntm", dict(controller="lstm"), True),
    ("ntm", dict(controller="pnr-lstm", read_heads=2), False),
    ("dnc", dict(controller="lstm"), False),
    ("dnc", dict(controller="fnn", read_heads=2), False),
    ("dnc", dict(controller="pnr-elman"), False),
]


@pytest.mark.parametrize(
    "name, kw, trace", MODELS, ids=[f"{m[0]}-{'-'.join(map(str, m[1].values()))}" for m in MODELS]
)
def test_two_threads_equal_one_to_rounding_and_repeat_exactly(name, kw, trace):
    """Batch 3 on two threads (blocks of 2 and 1 rows) in training: outputs, state, trace and
    every gradient equal the one-thread run to float64 rounding; sampled reads and write
    cells are the same (the draws are inputs); a second two-thread run is bit-identical."""
    model = small_model(name, 4, 3, **kw)
    x = float64_seq(3, 9, 4)
    assert base.sequence_backend(model.cell, x, None, trace) == "numba"
    one, g_one, joins_one = run(model, x, 1, trace)
    two, g_two, joins_two = run(model, x, 2, trace)
    again, g_again, _ = run(model, x, 2, trace)
    assert joins_one == [0, 0] and joins_two == [2, 2]  # forward and backward, each cut in two
    for a, b, c in zip(one, two, again):
        assert torch.equal(b, c)
        if a.is_floating_point():
            assert torch.allclose(a, b, rtol=0, atol=1e-12)
        else:
            assert torch.equal(a, b)  # chosen cells
    assert g_one.keys() == g_two.keys()
    for key in g_one:
        assert torch.equal(g_two[key], g_again[key]), key
        assert torch.allclose(g_one[key], g_two[key], rtol=0, atol=1e-10), key


def test_dnc_one_row_on_two_threads_is_the_serial_kernel():
    """B = 1 on two threads: one block, the kernels called once as with one thread, so the
    values and gradients are bit-identical."""
    model = small_model("dnc", 4, 3)
    x = float64_seq(1, 9, 4)
    one, g_one, _ = run(model, x, 1, False)
    two, g_two, joins = run(model, x, 2, False)
    assert joins == [0, 0]
    assert all(torch.equal(a, b) for a, b in zip(one, two))
    assert g_one.keys() == g_two.keys() and all(torch.equal(g_one[k], g_two[k]) for k in g_one)


def test_dnc_backward_on_other_blocks_than_its_forward():
    """The DNC's records are whole-batch arrays that each block fills in its rows (views),
    so a backward on another thread count than its forward's cuts them afresh: forward on
    two threads and backward on one equal the one-thread run to rounding."""
    model = small_model("dnc", 4, 3, controller="lstm")
    x = float64_seq(5, 9, 4)
    _, g_one, _ = run(model, x, 1, False)
    model.zero_grad()
    inp = x.clone().requires_grad_()
    with use_kernels(True):
        with torch_threads(2):
            out = model(inp)
        loss = sum(((i + 1) * t).sin().sum() for i, t in enumerate(float_leaves(out)))
        with torch_threads(1):
            loss.backward()
    assert torch.allclose(inp.grad, g_one["input"], rtol=0, atol=1e-10)
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, g_one[name], rtol=0, atol=1e-10), name


def _call_in_blocks():
    x = np.arange(8.0).reshape(4, 2)
    with torch_threads(2):
        return threads.call(lambda v: v * 2.0, (Rows(x),), 0, 4)


def _child(queue):
    queue.put(_call_in_blocks().tolist())


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_blocks_run_in_a_forked_child():
    """A child forked after the pool started gets a pool of its own (the parent's threads do
    not exist there: the old pool would never run a block)."""
    import multiprocessing

    _call_in_blocks()  # the pool exists in the parent
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
    assert queue.get(timeout=5) == (np.arange(8.0).reshape(4, 2) * 2).tolist()
