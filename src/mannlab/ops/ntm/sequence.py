"""The NTM's compiled whole-sequence path: controller, head layer and memory step (steps
(i)-(iv) of mannlab.models.ntm) for every step of a sequence as one autograd node over the
kernels of ops/ntm/kernels.py (``sequence_forward`` / ``sequence_backward``).
mannlab.models.ntm (``NTMCell.run_kernels``) feeds it; tests/test_ntm_sequence_kernel.py
checks values and every gradient against the cell's per-step tensor path.

Why: at batch 1 the per-step path is about 20 tensor operations of the controller and head
layer plus the memory step's one kernel call each way, each a few microseconds of dispatch
and autograd bookkeeping; here the time loop runs in machine code. Each batch element runs
its sequence on its own; the weight gradients are one matrix product each over all B T
steps, after the kernel. With several threads the batch runs in row blocks, one kernel call
per thread (ops/threads.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.controller_codes import ELMAN, FNN, LSTM, TANH, controller_code  # noqa: F401 -- re-exported
from mannlab.ops.threads import Rows


class Options(NamedTuple):
    """What the kernels need besides tensors: controller kind, whether it is partially
    non-recurrent (eqs. 9-13), memory width W, number of shifts S, whether a backward
    follows (keep every step), whether the trace is returned."""

    kind: int
    pnr: bool
    width: int
    num_shifts: int
    keep: bool
    trace: bool


# the kernels' states (T + 1 or 2, B, ...) and records (T or 1, B, ...): rows along axis 1
_TIME_MAJOR_STATES = (1,) * 6
_TIME_MAJOR_RECORDS = (1,) * 11


class NTMSequence(torch.autograd.Function):
    """A whole NTM sequence as one autograd node. Inputs: the precomputed input projection
    xp (B, T, G), the initial state (h_0, c_0 (B, d_h), r_0 (B, R W), M_0 (B, N, W),
    w^r_0 (B, R, N), w^w_0 (B, H, N)), the controller's read weights W_r (G, R W) and
    recurrent weights W_h (G, d_h) (None for the feed-forward controller), the head layer's
    weight (P, d_h) and bias (P,), and :class:`Options`. Outputs: the features
    (B, T, d_h + R W), the final h, c, r, M, w^r, w^w, and with the trace the per-step
    records (no gradient): states (B, T, ...) of r, M, w^r, w^w after each step and
    e, a, beta, g, s, gamma."""

    @staticmethod
    def forward(ctx, xp, h0, c0, r0, m0, wr0, ww0, w_read, w_rec, w_head, b_head, options):
        a = as_array
        dummy = np.zeros((1, 1), a(xp).dtype)
        out, states, records = threads.call(
            dispatch.load("ntm").sequence_forward,
            (
                Rows(a(xp)),
                *(Rows(a(s)) for s in (h0, c0, r0, m0, wr0, ww0)),
                a(w_read.t()),
                a(w_rec.t()) if w_rec is not None else dummy,
                a(w_head.t()),
                a(b_head),
                options.kind,
                options.pnr,
                options.width,
                options.num_shifts,
                options.keep or options.trace,
            ),
            (0, _TIME_MAJOR_STATES, _TIME_MAJOR_RECORDS),
            xp.shape[0],
        )
        out = torch.from_numpy(out)
        states = tuple(torch.from_numpy(s) for s in states)
        records = tuple(torch.from_numpy(r) for r in records)
        ctx.options = options
        ctx.set_materialize_grads(False)
        if options.keep:
            # everything through save_for_backward (a tensor kept on ctx would make a cycle)
            ctx.save_for_backward(w_read, w_rec, w_head, out, *states, *records)
        # the final state: row T, or row T mod 2 of the two rows used in turn
        last = xp.shape[1] if options.keep or options.trace else xp.shape[1] % 2
        final = tuple(s[last] for s in states)
        if not options.trace:
            return (out, *final)
        # the kernels' arrays over time are time-major: (T, B, ...) -> (B, T, ...)
        hs, cs, reads, memory, read_w, write_w = (s[1:].transpose(0, 1) for s in states)
        erase, add, betas, gates, shifts, gammas = (r.transpose(0, 1) for r in records[2:8])
        extra = (reads, memory, read_w, write_w, erase, add, betas, gates, shifts, gammas)
        ctx.mark_non_differentiable(*extra)
        return (out, *final, *extra)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_c, d_r, d_m, d_wr, d_ww, *unused):
        options = ctx.options
        w_read, w_rec, w_head, out, *rest = ctx.saved_tensors
        states, records = rest[:6], rest[6:]
        hs, cs, reads, memory, read_w, write_w = states
        a = as_array
        dtype = a(out).dtype

        def given(grad, like):  # a gradient autograd did not materialise: zeros
            return a(grad) if grad is not None else np.zeros(like[-1].shape, dtype)

        dummy = np.zeros((1, 1), dtype)
        d_xp, d_rec, d_params, initial = threads.call(
            dispatch.load("ntm").sequence_backward,
            (
                Rows(a(out)),
                tuple(Rows(a(s), 1) for s in states),
                tuple(Rows(a(r), 1) for r in records),
                a(w_read),
                a(w_rec) if w_rec is not None else dummy,
                a(w_head),
                options.kind,
                options.pnr,
                options.width,
                options.num_shifts,
                Rows(a(d_out) if d_out is not None else np.zeros(out.shape, dtype)),
                *(Rows(given(g, like)) for g, like in zip((d_h, d_c, d_r, d_m, d_wr, d_ww), states)),
            ),
            (1, 1, 1, (0,) * 6),
            out.shape[0],
        )
        d_xp, d_rec, d_params = (torch.from_numpy(g) for g in (d_xp, d_rec, d_params))  # (T, B, .)
        d_h0, d_c0, d_r0, d_m0, d_wr0, d_ww0 = (torch.from_numpy(g) for g in initial)

        def outer(grad, value):  # sum over steps and batch of grad ⊗ value
            return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])

        need = ctx.needs_input_grad
        recurrent = w_rec is not None
        return (
            d_xp.transpose(0, 1),
            d_h0 if recurrent else None,
            d_c0 if options.kind == LSTM else None,
            d_r0,
            d_m0,
            d_wr0,
            d_ww0,
            outer(d_xp, reads[:-1]) if need[7] else None,  # W_r: r_{t-1}
            outer(d_rec, hs[:-1]) if recurrent and need[8] else None,  # W_h: h_{t-1}
            outer(d_params, hs[1:]) if need[9] else None,  # head layer: h_t
            d_params.sum((0, 1)) if need[10] else None,
            None,
        )
