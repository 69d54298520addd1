"""The NTM's whole sequence as one autograd node over the Triton kernels (triton_kernels.py):
the GPU's counterpart of numba_sequence.py, with the same inputs and outputs, so that
``mannlab.ops.ntm.ntm_sequence(..., backend="triton")`` differs from the numba backend only in
where it runs. On CPU tensors the kernels run in Triton's interpreter (TRITON_INTERPRET=1),
which is how tests/ops/test_ntm_kernels.py checks them without a GPU.

The forward launches one kernel over tiles of batch rows with the time loop inside; the
backward one kernel with the time loop reversed, which returns the gradients of every step's
pre-activations; the weight gradients are then one matrix product each over all B T steps
(numba_sequence.weight_gradients, shared with the numba backend).
"""

from __future__ import annotations

import torch
import triton
from torch.autograd.function import once_differentiable

from mannlab.ops.fields import split_records
from mannlab.ops.ntm import triton_kernels as kernels
from mannlab.ops.ntm.numba_sequence import apply_sequence, weight_gradients
from mannlab.ops.ntm.records import (
    NTMOptions,
    NTMRecords,
    NTMResult,
    NTMState,
    NTMStates,
    NTMTrace,
    NTMWeights,
)
from mannlab.ops.ntm.reference import head_values
from mannlab.ops.triton_math import padded, rows_per_program


def _sizes(like, batch, gates, hidden, read_heads, write_heads, slots, params, options: NTMOptions) -> dict:
    """The kernels' compile-time sizes, actual and padded to powers of two (tl.dot's to 16), and
    the rows per program of a launch over ``batch`` rows on ``like``'s device."""
    width, shifts = options.width, options.num_shifts
    return dict(
        D=hidden,
        G=gates,
        R=read_heads,
        H=write_heads,
        N=slots,
        W=width,
        S=shifts,
        P=params,
        DP=padded(hidden, 16),
        RWP=padded(read_heads * width, 16),
        PP=padded(params, 16),
        NP=padded(slots),
        WP=padded(width),
        SP=padded(shifts),
        KIND=options.kind,
        PNR=options.pnr,
        BLOCK_B=rows_per_program(batch, like.device),
        KC=kernels.BLOCK_K,
        num_warps=kernels.NUM_WARPS,
    )


def _trace(states: NTMStates, params: torch.Tensor, write_heads, read_heads, options) -> NTMTrace:
    """The per-step values (B, T, ...) from the kept states and raw head parameters."""
    steps, batch = params.shape[:2]
    heads = head_values(params.flatten(0, 1), write_heads, read_heads, options.width, options.num_shifts)
    values = [v.unflatten(0, (steps, batch)).transpose(0, 1) for v in heads[1:]]
    erase, add, beta, gate, shift, gamma = values[4], values[5], *values[:4]
    reads, memory, read_w, write_w = (s[1:].transpose(0, 1) for s in states[2:])
    return NTMTrace(
        read_weights=read_w,
        write_weights=write_w,
        read_vectors=reads.unflatten(-1, (read_heads, options.width)),
        erase_vectors=erase,
        add_vectors=add,
        key_strengths=beta,
        interpolation_gates=gate,
        shift_weights=shift,
        sharpening=gamma,
        memory=memory,
    )


class NTMTritonSequence(torch.autograd.Function):
    """Inputs and outputs as numba_sequence.NTMSequence: x_proj (B, T, G), the kernels' state
    rows (:class:`NTMStates`), the fields of :class:`NTMWeights`, then :class:`NTMOptions`; the
    features, the final state rows and with the trace the fields of :class:`NTMTrace` (no
    gradient)."""

    @staticmethod
    def forward(ctx, xp, h0, c0, r0, m0, wr0, ww0, w_read, w_rec, w_head, b_head, options):
        batch, steps, _ = xp.shape
        hidden, (read_heads, slots), write_heads = h0.shape[1], wr0.shape[1:], ww0.shape[1]
        width, params = options.width, b_head.shape[0]
        keep = options.backward or options.trace
        rows, kept_steps = (steps + 1, steps) if keep else (2, 1)
        initial = (h0, c0, r0, m0, wr0, ww0)
        states = NTMStates(*(xp.new_empty((rows, *s.shape)) for s in initial))
        for state, value in zip(states, initial):
            state[0] = value
        records = NTMRecords(
            gates=xp.new_empty(kept_steps, batch, xp.shape[2]),
            params=xp.new_empty(kept_steps, batch, params),
            gated=xp.new_empty(kept_steps, batch, write_heads + read_heads, slots),
        )
        out = xp.new_empty(batch, steps, hidden + read_heads * width)
        sizes = _sizes(xp, batch, xp.shape[2], hidden, read_heads, write_heads, slots, params, options)
        w_read, w_head, b_head = (t.contiguous() for t in (w_read, w_head, b_head))
        w_rec_arg = w_rec.contiguous() if w_rec is not None else w_read  # never read then
        kernels.ntm_forward_kernel[(triton.cdiv(batch, sizes["BLOCK_B"]),)](
            xp.contiguous(),
            w_read,
            w_rec_arg,
            w_head,
            b_head,
            *states,
            *records,
            out,
            batch,
            steps,
            KEEP=keep,
            **sizes,
        )
        ctx.options = options
        ctx.set_materialize_grads(False)
        if options.backward:
            # everything through save_for_backward (a tensor kept on ctx would make a cycle)
            ctx.save_for_backward(w_read, w_rec, w_head, out, *states, *records)
        last = steps if keep else steps % 2
        final = tuple(s[last] for s in states)
        if not options.trace:
            return (out, *final)
        trace = _trace(states, records.params, write_heads, read_heads, options)
        ctx.mark_non_differentiable(*trace)
        return (out, *final, *trace)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_c, d_r, d_m, d_wr, d_ww, *unused):
        options = ctx.options
        w_read, w_rec, w_head, out, *rest = ctx.saved_tensors
        states, records, _ = split_records(rest, NTMStates, NTMRecords)
        steps, batch, hidden = states.hidden.shape[0] - 1, out.shape[0], states.hidden.shape[2]
        read_heads, slots = states.read_weights.shape[2:]
        write_heads, params = states.write_weights.shape[2], records.params.shape[2]

        def given(grad, like):  # a gradient autograd did not materialise: zeros
            return grad.contiguous() if grad is not None else torch.zeros_like(like)

        def carried(grad, like):  # two rows used in turn by the reversed time loop
            rows = like.new_zeros((2, *like.shape))
            if grad is not None:
                rows[0] = grad
            return rows

        final = NTMStates(*(s[-1] for s in states))
        g_h, g_c, g_r = (given(g, s).clone() for g, s in zip((d_h, d_c, d_r), final[:3]))
        g_m, g_wr, g_ww = (carried(g, s) for g, s in zip((d_m, d_wr, d_ww), final[3:]))
        d_xp = out.new_empty(records.gates.shape)
        d_rec = out.new_empty(records.gates.shape) if options.pnr else d_xp
        d_params = out.new_zeros(records.params.shape)
        scratch = out.new_zeros(batch, write_heads + read_heads, slots)
        sizes = _sizes(
            out, batch, records.gates.shape[2], hidden, read_heads, write_heads, slots, params, options
        )
        kernels.ntm_backward_kernel[(triton.cdiv(batch, sizes["BLOCK_B"]),)](
            w_read,
            w_rec if w_rec is not None else w_read,
            w_head,
            *states,
            *records,
            out,
            given(d_out, out),
            g_h,
            g_c,
            g_r,
            g_m,
            g_wr,
            g_ww,
            scratch,
            d_xp,
            d_rec,
            d_params,
            batch,
            steps,
            **sizes,
        )
        last = steps % 2
        initial = NTMStates(g_h, g_c, g_r, g_m[last], g_wr[last], g_ww[last])
        return weight_gradients(ctx.needs_input_grad, options, states, d_xp, d_rec, d_params, initial)


def triton_sequence(x_proj, state: NTMState, weights: NTMWeights, options: NTMOptions) -> NTMResult:
    """The whole-sequence op on the Triton kernels (CUDA float32 tensors; any device in
    Triton's interpreter)."""
    return apply_sequence(NTMTritonSequence, x_proj, state, weights, options)
