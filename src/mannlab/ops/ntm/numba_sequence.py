"""The NTM's compiled whole-sequence path: controller, head layer and memory step (steps
(i)-(iv) of mannlab.models.ntm) for every step of a sequence as one autograd node over the
kernels of ops/ntm/kernels.py (``sequence_forward`` / ``sequence_backward``).
``numba_sequence`` is its entry point for ``mannlab.ops.ntm.ntm_sequence`` (records.py's
records in and out); tests/ops/test_ntm_sequence_kernel.py checks it against the cell's step loop
and tests/ops/test_ntm_kernels.py against ops/ntm/reference.py.

Why: at batch 1 the per-step path is about 20 tensor operations of the controller and head
layer plus the memory step's one kernel call each way, each a few microseconds of dispatch
and autograd bookkeeping; here the time loop runs in machine code. Each batch element runs
its sequence on its own; the weight gradients are one matrix product each over all B T
steps, after the kernel. With several threads the batch runs in row blocks, one kernel call
per thread (ops/threads.py).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.controller_codes import controller_state, controller_tensors
from mannlab.ops.fields import split_records
from mannlab.ops.ntm.records import (
    FNN,
    LSTM,
    NTMOptions,
    NTMResult,
    NTMState,
    NTMStates,
    NTMTrace,
    NTMWeights,
)
from mannlab.ops.threads import Rows

# the kernels' states (T + 1 or 2, B, ...) and records (T or 1, B, ...): rows along axis 1
_TIME_MAJOR_STATES = (1,) * 6
_TIME_MAJOR_RECORDS = (1,) * 11


class NTMSequence(torch.autograd.Function):
    """A whole NTM sequence as one autograd node over the numba kernels. Inputs: x_proj
    (B, T, G), the kernels' state rows (the fields of :class:`NTMStates`), the fields of
    :class:`NTMWeights`, then :class:`NTMOptions`. Outputs: the features (B, T, d_h + R W), the
    final state rows, and with the trace the fields of :class:`NTMTrace` (no gradient)."""

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
                options.backward or options.trace,
            ),
            (0, _TIME_MAJOR_STATES, _TIME_MAJOR_RECORDS),
            xp.shape[0],
        )
        out = torch.from_numpy(out)
        states = NTMStates(*(torch.from_numpy(s) for s in states))
        records = tuple(torch.from_numpy(r) for r in records)
        ctx.options = options
        ctx.set_materialize_grads(False)
        if options.backward:
            # everything through save_for_backward (a tensor kept on ctx would make a cycle)
            ctx.save_for_backward(w_read, w_rec, w_head, out, *states, *records)
        # the final state: row T, or row T mod 2 of the two rows used in turn
        last = xp.shape[1] if options.backward or options.trace else xp.shape[1] % 2
        final = tuple(s[last] for s in states)
        if not options.trace:
            return (out, *final)
        # the kernels' arrays over time are time-major: (T, B, ...) -> (B, T, ...)
        reads, memory, read_w, write_w = (s[1:].transpose(0, 1) for s in states[2:])
        erase, add, betas, gates, shifts, gammas = (r.transpose(0, 1) for r in records[2:8])
        trace = NTMTrace(
            read_weights=read_w,
            write_weights=write_w,
            read_vectors=reads.unflatten(-1, (read_w.shape[2], options.width)),
            erase_vectors=erase,
            add_vectors=add,
            key_strengths=betas,
            interpolation_gates=gates,
            shift_weights=shifts,
            sharpening=gammas,
            memory=memory,
        )
        ctx.mark_non_differentiable(*trace)
        return (out, *final, *trace)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_c, d_r, d_m, d_wr, d_ww, *unused):
        options = ctx.options
        w_read, w_rec, w_head, out, *rest = ctx.saved_tensors
        states, records = split_records(rest, NTMStates)
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
        initial = NTMStates(*(torch.from_numpy(g) for g in initial))
        return weight_gradients(ctx.needs_input_grad, options, states, d_xp, d_rec, d_params, initial)


def weight_gradients(need, options: NTMOptions, states: NTMStates, d_xp, d_rec, d_params, initial: NTMStates):
    """The backward's gradients of the op's inputs from the kernels' time-major gradients of
    the pre-activations: d_xp (T, B, G) of W_x x_t + W_r r_{t-1} + b, d_rec (T, B, G) of
    W_h h_{t-1} (the same tensor but for the partially non-recurrent controllers), d_params
    (T, B, P) of the head layer's output, and ``initial``, those of the initial state. Each
    weight's gradient is one matrix product over all T B steps. ``need``: ctx.needs_input_grad
    in the order of the autograd Functions' inputs."""

    def outer(grad, value):  # sum over steps and batch of grad (x) value
        return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])

    recurrent = options.kind != FNN
    return (
        d_xp.transpose(0, 1),
        initial.hidden if recurrent else None,
        initial.cell if options.kind == LSTM else None,
        initial.reads,
        initial.memory,
        initial.read_weights,
        initial.write_weights,
        outer(d_xp, states.reads[:-1]) if need[7] else None,  # W_r: r_{t-1}
        outer(d_rec, states.hidden[:-1]) if recurrent and need[8] else None,  # W_h: h_{t-1}
        outer(d_params, states.hidden[1:]) if need[9] else None,  # head layer: h_t
        d_params.sum((0, 1)) if need[10] else None,
        None,
    )


def apply_sequence(function, x_proj, state: NTMState, weights: NTMWeights, options: NTMOptions) -> NTMResult:
    """Calls an autograd Function of the shape of :class:`NTMSequence`: the :class:`NTMState` as
    the kernels' state rows (the controller's h and c, the reads side by side) in, the final
    rows back into an :class:`NTMState`, the trace as the :class:`NTMTrace` it returns."""
    hidden, cell = controller_tensors(
        state.controller, options.kind, state.memory, weights.head_weight.shape[1]
    )
    rows = NTMStates(
        hidden,
        cell,
        state.read_vectors.flatten(1),
        state.memory,
        state.read_weights,
        state.write_weights,
    )
    features, *rest = function.apply(x_proj, *rows, *weights, options)
    final, trace_fields = split_records(rest, NTMStates)
    trace = NTMTrace(*trace_fields) if options.trace else None
    return NTMResult(
        features,
        NTMState(
            controller_state(options.kind, final.hidden, final.cell),
            final.memory,
            final.reads.unflatten(1, state.read_vectors.shape[1:]),
            final.read_weights,
            final.write_weights,
        ),
        trace,
    )


def numba_sequence(x_proj, state: NTMState, weights: NTMWeights, options: NTMOptions) -> NTMResult:
    """The whole-sequence op on the numba kernels (CPU float32/float64 tensors)."""
    return apply_sequence(NTMSequence, x_proj, state, weights, options)
