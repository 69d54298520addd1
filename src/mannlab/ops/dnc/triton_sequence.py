"""The DNC's whole sequence as one autograd node over the Triton kernels (triton_kernels.py): the
GPU's counterpart of numba_sequence.py, with the same records in and out, reached through
``mannlab.ops.dnc.dnc_sequence(..., backend="triton")``. On CPU tensors the kernels run in
Triton's interpreter (TRITON_INTERPRET=1), which is how tests/ops/test_dnc_ops.py checks them
without a GPU.

The forward launches one kernel over tiles of batch rows with the time loop inside; the backward
one kernel with the time loop reversed, which returns the gradients of every step's
pre-activations; the weight gradients are then one matrix product each over all B T steps.
"""

from __future__ import annotations

import math

import torch
import triton
from torch.autograd.function import once_differentiable

from mannlab.ops.dnc import triton_kernels as kernels
from mannlab.ops.dnc.records import DNCOptions, DNCResult, DNCState, DNCWeights, apply_sequence
from mannlab.ops.triton_math import padded, rows_per_program


def checkpoint_interval(steps: int) -> int:
    """Steps per segment of the links' checkpoints, ceil(sqrt(T)): the forward keeps
    ceil(T / every) (B, N, N) link matrices and the backward a scratch of ``every``, and
    T / every + every is least at sqrt(T). Tests monkeypatch this to reach other
    segmentations."""
    return max(1, math.isqrt(max(steps, 1) - 1) + 1)


def _sizes(xp, batch, hidden, read_heads, slots, width, params, options: DNCOptions) -> dict:
    """The kernels' compile-time sizes, actual and padded to powers of two (tl.dot's to 16), and
    their launch's rows per program (``batch`` rows on ``xp``'s device) and num_warps."""
    return dict(
        D=hidden,
        G=xp.shape[-1],
        R=read_heads,
        N=slots,
        W=width,
        P=params,
        DP=padded(hidden, 16),
        RWP=padded(read_heads * width, 16),
        PP=padded(params, 16),
        NP=padded(slots),
        WP=padded(width),
        KIND=options.kind,
        ACT=options.activation,
        PNR=int(options.pnr),
        BLOCK_B=rows_per_program(batch, xp.device),
        KC=kernels.BLOCK_K,
        LC=kernels.LINK_ROWS,
        num_warps=kernels.NUM_WARPS,
    )


def _outer(grad: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """sum over steps and batch of grad (T, B, G) (x) value (T, B, K) -> (G, K)."""
    return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])


class DNCTritonSequence(torch.autograd.Function):
    """Inputs and outputs as numba_sequence.DNCSequence: x_proj (B, T, G), the kernels' state
    rows (records.DNCStates), the fields of :class:`DNCWeights`, then :class:`DNCOptions`; the
    features (B, T, H + R W) and the final state rows."""

    @staticmethod
    def forward(ctx, xp, h0, c0, r0, m0, wr0, ww0, u0, p0, l0, w_r, w_h, w_xi, b_xi, options):
        B, T, G = xp.shape
        D, (R, N), W, P = h0.shape[1], wr0.shape[1:], m0.shape[2], b_xi.shape[0]
        keep = options.backward
        every = checkpoint_interval(T)
        rows, kept_steps = (T + 1, T) if keep else (2, 1)
        initial = (h0, c0, r0, m0, wr0, ww0, u0, p0)
        states = tuple(xp.new_empty((rows, *s.shape)) for s in initial)
        for state, value in zip(states, initial):
            state[0] = value
        links = xp.new_empty(2, B, N, N)
        links[0] = l0
        link_rec = xp.new_empty((T + every - 1) // every if keep else 1, B, N, N)
        link_rec[0] = l0
        gates = xp.new_empty(kept_steps, B, G)
        params = xp.new_empty(kept_steps, B, P)
        out = xp.new_empty(B, T, D + R * W)
        w_r, w_xi, b_xi = (t.contiguous() for t in (w_r, w_xi, b_xi))
        w_h_arg = w_h.contiguous() if w_h is not None else w_r  # never read then
        sizes = _sizes(xp, B, D, R, N, W, P, options)
        kernels.dnc_forward_kernel[(triton.cdiv(B, sizes["BLOCK_B"]),)](
            xp.contiguous(), w_r, w_h_arg, w_xi, b_xi, *states, links, link_rec, gates, params, out,
            B, T, every, KEEP=int(keep), **sizes,
        )  # fmt: skip
        ctx.options, ctx.every = options, every
        ctx.set_materialize_grads(False)
        if keep:  # everything through save_for_backward (a tensor kept on ctx would make a cycle)
            ctx.save_for_backward(w_r, w_h, w_xi, out, *states, link_rec, gates, params)
        last = T if keep else T % 2
        return (out, *(s[last] for s in states), links[T % 2])

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_c, d_r, d_m, d_wr, d_ww, d_u, d_p, d_l):
        options, every = ctx.options, ctx.every
        w_r, w_h, w_xi, out, hs, cs, reads, mem, rws, wws, us, ps, link_rec, gates, params = ctx.saved_tensors
        T, B = gates.shape[:2]
        D, (R, N), W, P = hs.shape[2], rws.shape[2:], mem.shape[3], params.shape[2]

        def given(grad, like):  # a gradient autograd did not materialise: zeros
            return grad.contiguous().clone() if grad is not None else torch.zeros_like(like)

        def carried(grad, like):  # two rows used in turn by the reversed time loop
            rows = like.new_zeros((2, *like.shape))
            if grad is not None:
                rows[0] = grad
            return rows

        g_h, g_c, g_r = (given(g, s[T]) for g, s in zip((d_h, d_c, d_r), (hs, cs, reads)))
        g_m, g_wr, g_ww, g_u, g_p = (
            carried(g, s[T]) for g, s in zip((d_m, d_wr, d_ww, d_u, d_p), (mem, rws, wws, us, ps))
        )
        g_l = given(d_l, link_rec[0])
        scratch = out.new_empty(every, B, N, N)
        vectors = out.new_empty(B, R + 5, N)
        d_xp = out.new_zeros(gates.shape)
        d_rec = out.new_zeros(gates.shape) if options.pnr else d_xp
        d_params = out.new_zeros(params.shape)
        sizes = _sizes(gates, B, D, R, N, W, P, options)
        kernels.dnc_backward_kernel[(triton.cdiv(B, sizes["BLOCK_B"]),)](
            w_r, w_h if w_h is not None else w_r, w_xi, hs, cs, mem, rws, wws, us, ps, link_rec,
            scratch, vectors, gates, params, out, given(d_out, out), g_h, g_c, g_r, g_m, g_wr, g_ww, g_u, g_p,
            g_l, d_xp, d_rec, d_params, B, T, every, **sizes,
        )  # fmt: skip
        need, last = ctx.needs_input_grad, T % 2
        return (
            d_xp.transpose(0, 1),
            g_h,
            g_c,
            g_r,
            *(g[last] for g in (g_m, g_wr, g_ww, g_u, g_p)),
            g_l,
            _outer(d_xp, reads[:-1]) if need[10] else None,  # W_r: r_{t-1}
            _outer(d_rec, hs[:-1]) if w_h is not None and need[11] else None,  # W_h: h_{t-1}
            _outer(d_params, hs[1:]) if need[12] else None,  # W_xi: h_t
            d_params.sum((0, 1)) if need[13] else None,
            None,
        )


def triton_sequence(x_proj, state: DNCState, weights: DNCWeights, options: DNCOptions) -> DNCResult:
    """The whole-sequence op on the Triton kernels (CUDA float32 tensors; any device in Triton's
    interpreter)."""
    return apply_sequence(DNCTritonSequence, x_proj, state, weights, options)
