"""The DNC's numba whole-sequence path: controller, interface layer and memory step of every
time step (models/dnc.py steps (i)-(iv)) as one autograd node over the kernels
``sequence_forward`` and ``sequence_backward`` of ops/dnc/kernels.py. ``numba_sequence`` is
its entry point for ``mannlab.ops.dnc.dnc_sequence`` (records.py's records in and out);
tests/ops/test_dnc_ops.py checks it against ops/dnc/reference.py, tests/ops/test_dnc_sequence.py
the model on it against the cell's per-step tensor path.

Why: on a CPU the per-step path costs a few microseconds of dispatch per tensor operation
and autograd node, about 20 per step for the controller and interface even with the fused
memory step; here a step costs its arithmetic. The weight gradients are one matrix product
each over all B T steps after the backward loop. With several threads the batch runs in
row blocks, one kernel call per thread (ops/threads.py): each block fills its rows of the
pooled records, which are views along the batch, so nothing is copied or joined.
"""

from __future__ import annotations

import math
import sys
import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.dnc.records import DNCOptions, DNCResult, DNCState, DNCWeights, apply_sequence
from mannlab.ops.threads import Rows


def _most_references(arrays: tuple) -> int:
    """The largest reference count among the arrays, as seen from here."""
    most = 0
    for array in arrays:
        most = max(most, sys.getrefcount(array))
    return most


#: what _most_references reports for arrays that only their tuple holds (calibrated, not
#: assumed: the count getrefcount sees differs between Python versions)
_UNUSED = _most_references((np.empty(0),))


class RecordPool:
    """The record arrays of sequence_forward, reused between calls: fresh pages for the
    (B, T, ...) records (tens of MB at batch 32) cost the kernel more than its arithmetic
    (each page is faulted in and zeroed by the OS; benchmarks/README.md, bench_dnc.py). A set is
    handed out again once nothing but the pool holds its arrays (the tensors saved for the
    backward are gone); the pool keeps at most ``sets`` unused sets, the least recently
    used dropped first."""

    def __init__(self, sets: int = 4):
        self.sets = sets
        self._free: OrderedDict = OrderedDict()  # key -> list of record tuples
        self._lock = threading.Lock()

    @staticmethod
    def _unused(records: tuple) -> bool:
        return _most_references(records) <= _UNUSED

    def take(self, shapes: tuple, dtype: np.dtype) -> tuple:
        key = (shapes, np.dtype(dtype).str)
        with self._lock:
            held = self._free.get(key, [])
            for records in held:
                if self._unused(records):
                    self._free.move_to_end(key)
                    return records
            kinds = {True: dtype, False: np.float64, None: np.int64}
            records = tuple(np.empty(shape, kinds[kind]) for shape, kind in shapes)
            held.append(records)
            self._free[key] = held
            self._free.move_to_end(key)
            while sum(len(v) for v in self._free.values()) > self.sets:
                oldest = next(iter(self._free))
                self._free[oldest].pop(0)
                if not self._free[oldest]:
                    del self._free[oldest]
            return records


_POOL = RecordPool()


def checkpoint_interval(batch: int, steps: int) -> int:
    """Steps per segment of the links and memory checkpoints, ceil(sqrt(B T)) (at most T):
    sequence_forward keeps B ceil(T / every) (N, N) link records and sequence_backward one
    scratch of ``every`` per thread, and B T / every + every is least at sqrt(B T). It is
    the speed's choice too: the records written to and read back from DRAM cost more than
    recomputing the links in cache, so fewer checkpoints and more recomputation are faster
    (benchmarks/README.md, bench_dnc.py, "the checkpoint interval"). Tests monkeypatch this
    to reach other segmentations."""
    return min(steps, math.isqrt(max(batch * steps, 1) - 1) + 1)


def _outer(grad: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """sum over batch and steps of grad (B, T, G) ⊗ value (B, T, K) -> (G, K)."""
    return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])


class DNCRecords(NamedTuple):
    """What sequence_forward keeps for the backward, in its order (kernels.record_shapes gives
    the shapes): the states h, c (B, S, H), the checkpointed memories and links, w^r, w^w, u, p,
    and per step the controller's activated gates, the raw and activated interface vectors and
    the memory step's intermediates (kernels.py)."""

    hidden: np.ndarray
    cell: np.ndarray
    memory: np.ndarray
    read_weights: np.ndarray
    write_weights: np.ndarray
    usage: np.ndarray
    precedence: np.ndarray
    links: np.ndarray
    gates: np.ndarray
    raw: np.ndarray
    activated: np.ndarray
    vectors: np.ndarray
    paths: np.ndarray
    norms: np.ndarray
    key_norms: np.ndarray
    order: np.ndarray


class DNCSequence(torch.autograd.Function):
    """Inputs: xp (B, T, G) = W_x x_t + b of the controller, the initial state h_0, c_0 (B, H)
    (zeros where the controller has none), r_0 (B, R W), M_0 (B, N, W), w^r_0 (B, R, N),
    w^w_0 (B, N), u_0, p_0 (B, N), L_0 (B, N, N), the controller's W_r and W_h (None for
    fnn), the interface layer's weight and bias, and the :class:`DNCOptions`: the kernels'
    state rows (records.DNCStates), then the fields of :class:`DNCWeights`. The links and
    memories are checkpointed every ``checkpoint_interval(B, T)`` steps for the backward.
    Outputs: the features (B, T, H + R W) and the final state rows in the same order."""

    @staticmethod
    def forward(
        ctx, xp, h0, c0, r0, memory, read_w, write_w, usage, prec, links, w_r, w_h, w_xi, b_xi, options
    ):
        keep = options.backward
        a = as_array
        w_h_t = a(w_h.t()) if w_h is not None else a(xp.new_zeros(1, 1))
        state = (h0, c0, r0, memory, read_w, write_w, usage, prec, links)
        every = checkpoint_interval(xp.shape[0], xp.shape[1])
        kernels = dispatch.load("dnc")
        B, T, G = xp.shape
        H, (N, W), R, P = h0.shape[1], memory.shape[1:], read_w.shape[1], b_xi.shape[0]
        shapes = kernels.record_shapes(B, T, G, H, N, W, R, P, keep, every)
        records = _POOL.take(shapes, a(xp).dtype)
        # the records (B, ...) go to the blocks as row views: each block writes its own rows
        out, finals = threads.call(
            kernels.sequence_forward,
            (
                Rows(a(xp)),
                *(Rows(a(t)) for t in state),
                a(w_r.t()),
                w_h_t,
                a(w_xi.t()),
                a(b_xi),
                options.kind,
                options.activation,
                options.pnr,
                keep,
                every,
                tuple(Rows(v) for v in records),
            ),
            (0, (0,) * 9),
            B,
        )
        out = torch.from_numpy(out)
        if keep:
            # everything through save_for_backward (a tensor kept on ctx would make a cycle)
            ctx.save_for_backward(r0, w_r, w_h, w_xi, out, *(torch.from_numpy(v) for v in records))
        ctx.options, ctx.every = options, every
        return (out, *(torch.from_numpy(v) for v in finals))

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, *d_finals):
        options, every = ctx.options, ctx.every
        r0, w_r, w_h, w_xi, out, *saved = ctx.saved_tensors
        records = DNCRecords(*saved)
        a = as_array
        w_h_array = a(w_h) if w_h is not None else a(out.new_zeros(1, 1))
        d_hbar, d_pre, d_raw, d_state = threads.call(
            dispatch.load("dnc").sequence_backward,
            (
                Rows(a(out)),
                tuple(Rows(a(v)) for v in records),
                a(w_r),
                w_h_array,
                a(w_xi),
                options.kind,
                options.activation,
                options.pnr,
                every,
                Rows(a(d_out)),
                tuple(Rows(a(g)) for g in d_finals),
            ),
            (0, 0, 0, (0,) * 9),
            out.shape[0],
        )
        d_hbar, d_pre, d_raw = torch.from_numpy(d_hbar), torch.from_numpy(d_pre), torch.from_numpy(d_raw)
        hs = records.hidden  # h_0 .. h_T
        H = hs.shape[2]
        need = ctx.needs_input_grad
        d_w_r = d_w_h = d_w_xi = None
        if need[10]:
            reads_prev = torch.cat([r0.unsqueeze(1), out[:, :-1, H:]], 1)  # r_{t-1}
            d_w_r = _outer(reads_prev, d_hbar).t()  # this way round: faster (benchmarks/README.md)
        if w_h is not None and need[11]:
            d_w_h = _outer(d_pre, hs[:, :-1])
        if need[12]:
            d_w_xi = _outer(d_raw, hs[:, 1:])
        d_b_xi = d_raw.sum((0, 1)) if need[13] else None
        return (
            d_hbar,
            *(torch.from_numpy(g) for g in d_state),
            d_w_r,
            d_w_h,
            d_w_xi,
            d_b_xi,
            None,
        )


def numba_sequence(x_proj, state: DNCState, weights: DNCWeights, options: DNCOptions) -> DNCResult:
    """The whole-sequence op on the numba kernels (CPU float32/float64 tensors)."""
    return apply_sequence(DNCSequence, x_proj, state, weights, options)
