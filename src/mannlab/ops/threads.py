"""How a whole-sequence kernel uses more than one core: the batch is cut into contiguous row
blocks, one per thread, and the kernel runs once per block, each call on its own thread over
the whole sequence; the blocks' results are joined after.

The rule: the kernels use ``torch.get_num_threads()`` threads, as torch's own operators do, so
``torch.set_num_threads(n)`` (what ``train.threads`` sets for a run) sets both;
``mannlab.ops.set_threads(n)`` sets the kernels' count alone (``None``: follow torch again),
for when torch's operators are better left on one thread (torch's intra-op threads can make
a whole training step several times slower on a busy CPU: benchmarks/README.md,
bench_threads.py). With one thread, or one row, the serial kernel is called once on the
whole batch (results bit-identical to the serial kernels). With n > 1 threads and B > 1 rows
there are min(n, B) blocks. Why whole sequences per thread rather than numba's ``prange`` over
the rows inside each time step: a kernel's time loop joins all rows at every step (one matrix
product over the batch), so a prange there would meet a barrier several times per step, where
one block per thread meets once per call (docs/DECISIONS.md). The kernels are compiled with
``nogil=True`` so the blocks run at once, and their matrix products then run single-threaded
(bridge.limit_blas_threads).

Results: every row of a block is computed exactly as in a whole-batch call but for the
matrix products, whose rounding may depend on the number of rows, so the values equal the
one-thread ones to float rounding. Sums over the batch a kernel returns (the gradient of a
shared weight) are added block by block in block order: with the same thread count the
results are the same at every call (no racy reductions). Random draws never happen inside
a kernel: they are inputs, drawn by torch before the call, and are cut like any other
batch-major input, so samples do not depend on the thread count.

How a kernel is called through here (ops/<model>/numba_sequence.py)::

    args = (Rows(x), Rows(noise, 1), weight, flag)
    out, d_weight, saved = threads.call(kernel, args, (0, SUM, KEEP), batch)

An argument wrapped in ``Rows`` holds the batch's rows along ``axis`` (0 for (B, ...), 1 for
time-major (T, B, ...)), or is cut by a function ``(value, start, stop) -> value`` for any
other layout; every other argument (weights, scalars, placeholders) goes whole to every
block, and a plain tuple argument is looked into. ``join`` says how to join each part of the
result: an axis (concatenate the blocks along it), ``SUM`` (add them in block order),
``FIRST`` (a placeholder every block returns alike), ``KEEP`` (keep the blocks' values apart,
as a ``Blocks``: for what only the backward reads, which then goes back to ``call`` as an
argument, each block getting its own, so it is never copied), or a tuple for a tuple result.
A call given a ``Blocks`` argument runs on that argument's row blocks.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from mannlab.ops.bridge import limit_blas_threads

#: join: add the blocks' values in block order (a sum over the batch)
SUM = "sum"
#: join: the value of the first block (a placeholder that does not depend on the rows)
FIRST = "first"
#: join: keep the blocks' values apart (a Blocks)
KEEP = "keep"

_threads: list[int | None] = [None]  # set_threads; None: torch.get_num_threads()
_pool: list[ThreadPoolExecutor | None] = [None]
_pool_size = [0]
_pool_lock = threading.Lock()


def set_threads(count: int | None) -> None:
    """Run the compiled whole-sequence kernels on ``count`` threads whatever torch's setting;
    ``None`` (the default): as many as torch.get_num_threads()."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"set_threads expects a thread count >= 1 or None, got {count!r}")
    _threads[0] = count


def get_threads() -> int:
    """The number of threads the kernels run on (set_threads, else torch.get_num_threads())."""
    return torch.get_num_threads() if _threads[0] is None else _threads[0]


def blocks(batch: int, threads: int | None = None) -> list[tuple[int, int]]:
    """The row blocks [start, stop) of a batch of ``batch`` rows on ``threads`` threads (by
    default get_threads()): min(threads, batch) blocks of sizes differing by at most one, the
    larger first."""
    count = max(1, min(get_threads() if threads is None else threads, batch))
    size, extra = divmod(batch, count)
    bounds, start = [], 0
    for i in range(count):
        stop = start + size + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class Rows:
    """A kernel argument whose rows are the batch's, along ``axis`` (or cut by ``axis(value,
    start, stop)``)."""

    __slots__ = ("value", "axis")

    def __init__(self, value: Any, axis: int | Callable[[Any, int, int], Any] = 0):
        self.value, self.axis = value, axis


class Blocks:
    """The values of a result joined with KEEP, one per row block, and those blocks."""

    __slots__ = ("values", "parts")

    def __init__(self, values: list[Any], parts: list[tuple[int, int]]):
        if len(values) != len(parts):
            raise ValueError(f"Blocks: {len(values)} values for {len(parts)} row blocks")
        self.values, self.parts = values, parts


def call(kernel: Callable[..., Any], args: Sequence[Any], join: Any, batch: int) -> Any:
    """``kernel(*args)`` over the batch's row blocks on get_threads() threads, the results
    joined (see the module docstring for ``Rows`` and ``join``). One block: the kernel itself,
    called once on the arguments as given (unwrapped), its matrix products on torch's threads
    as before."""
    kept = _blocks_in(args)
    parts = blocks(batch) if kept is None else kept.parts  # a backward runs on its forward's blocks
    if len(parts) == 1:
        limit_blas_threads(torch.get_num_threads())
        result = kernel(*(_cut(value, None, 0) for value in args))
        return _keep_whole(result, join, parts) if _keeps(join) else result
    limit_blas_threads(1)  # the blocks are the threads; a threaded BLAS inside would oversubscribe
    joined = _Joined(batch)
    pool = _executor(len(parts) - 1)
    pending = [pool.submit(_block, kernel, args, join, parts, i, joined) for i in range(1, len(parts))]
    results = [_block(kernel, args, join, parts, 0, joined)]  # the first on the calling thread
    results.extend(future.result() for future in pending)
    return _join(results, join, joined, parts)


def _blocks_in(value: Any) -> Blocks | None:
    if isinstance(value, Blocks):
        return value
    if type(value) in (tuple, list):
        for item in value:
            if (found := _blocks_in(item)) is not None:
                return found
    return None


def _keeps(spec: Any) -> bool:
    return spec == KEEP or (isinstance(spec, tuple) and any(_keeps(item) for item in spec))


def _keep_whole(result: Any, spec: Any, parts: list[tuple[int, int]]) -> Any:
    """A one-block result with its KEEP parts as Blocks of one value."""
    if isinstance(spec, tuple):
        return tuple(_keep_whole(result[i], item, parts) for i, item in enumerate(spec))
    return Blocks([result], parts) if spec == KEEP else result


class _Joined:
    """The whole-batch arrays the blocks copy their rows into, each allocated by the first
    block that returns it (so the copies run on the blocks' threads, not after them)."""

    def __init__(self, batch: int):
        self.batch, self.lock = batch, threading.Lock()
        self.arrays: dict[tuple[int, ...], np.ndarray] = {}

    def place(self, value: np.ndarray, axis: int, part: tuple[int, int], key: tuple[int, ...]) -> None:
        start, stop = part
        if value.ndim <= axis or value.shape[axis] != stop - start:
            raise ValueError(
                f"threads.call: result {key} of shape {value.shape} should have the block's "
                f"{stop - start} rows along axis {axis}"
            )
        with self.lock:
            whole = self.arrays.get(key)
            if whole is None:
                shape = value.shape[:axis] + (self.batch,) + value.shape[axis + 1 :]
                whole = self.arrays[key] = np.empty(shape, value.dtype)
        whole[(slice(None),) * axis + (slice(start, stop),)] = value


def _block(kernel, args, join, parts, index: int, joined: _Joined) -> Any:
    """Block ``index``: its arguments cut, the kernel, its rows copied into the joined arrays."""
    result = kernel(*(_cut(value, parts[index], index) for value in args))
    _place(result, join, parts[index], joined, ())
    return result


def _place(result: Any, spec: Any, part: tuple[int, int], joined: _Joined, key: tuple[int, ...]) -> None:
    if isinstance(spec, tuple):
        for i, item_spec in enumerate(spec):
            _place(result[i], item_spec, part, joined, key + (i,))
    elif spec not in (SUM, FIRST, KEEP):
        joined.place(result, spec, part, key)


def _forget_pool() -> None:
    """In a forked child: the parent's pool threads do not exist there, and an executor that
    believes they do would never run a block."""
    global _pool_lock
    _pool[0], _pool_size[0] = None, 0
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _executor(workers: int) -> ThreadPoolExecutor:
    """The module's thread pool, grown to at least ``workers`` threads."""
    with _pool_lock:
        pool = _pool[0]
        if pool is None or _pool_size[0] < workers:
            old = pool
            pool = _pool[0] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mannlab-kernel")
            _pool_size[0] = workers
            if old is not None:
                old.shutdown(wait=False)
        return pool


def _cut(value: Any, part: tuple[int, int] | None, index: int) -> Any:
    """Block ``index``, rows ``part``, of an argument (None: the whole argument, unwrapped)."""
    if isinstance(value, Blocks):
        return value.values[index]
    if isinstance(value, Rows):
        if part is None:
            return value.value
        start, stop = part
        if callable(value.axis):
            return value.axis(value.value, start, stop)
        rows = (slice(None),) * value.axis + (slice(start, stop),)
        # C-contiguous as the whole array (a view along axis 0), so the kernel compiles once
        return np.ascontiguousarray(value.value[rows])
    if type(value) is tuple:
        return tuple(_cut(item, part, index) for item in value)
    return value


def _join(results: list[Any], spec: Any, joined: _Joined, parts, key: tuple[int, ...] = ()) -> Any:
    """The blocks' results as one: the joined arrays, sums in block order, first values,
    Blocks."""
    if isinstance(spec, tuple):
        return tuple(
            _join([result[i] for result in results], s, joined, parts, key + (i,)) for i, s in enumerate(spec)
        )
    if spec == KEEP:
        return Blocks(results, parts)
    if spec == FIRST:
        return results[0]
    if spec == SUM:
        total = results[0].copy()
        for value in results[1:]:
            total += value
        return total
    return joined.arrays[key]
