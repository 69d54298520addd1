"""The D-NTM's whole sequence as one autograd node over the Triton kernels (triton_kernels.py):
the GPU's counterpart of numba_sequence.py, reached through
``mannlab.ops.dntm.dntm_sequence(..., backend="triton")``. On CPU tensors the kernels run in
Triton's interpreter (TRITON_INTERPRET=1), which is how tests/ops/test_dntm_ops.py checks them
without a GPU.

The kernels cover what records.covers says; the op refuses the rest. The forward
launches one kernel over tiles of batch rows with the time loop inside; the backward one kernel
with the time loop reversed, which returns the gradients of every step's pre-activations; the
weight gradients are then one matrix product each over all B T steps. The trace's head
activations and memory are computed here from the kernels' records (raw head parameters and
C_t, outputs of the node with gradients), as reference.py computes them.
"""

from __future__ import annotations

import torch
import triton
from torch.autograd.function import once_differentiable

from mannlab.ops.dntm import triton_kernels as kernels
from mannlab.ops.dntm.records import (
    MODES,
    NOISY_MODES,
    DNTMInputs,
    DNTMOptions,
    DNTMResult,
    DNTMState,
    DNTMStateRows,
    DNTMWeights,
    covers,
    head_sizes,
    model_state,
    state_rows,
    step_trace,
)
from mannlab.ops.dntm.reference import activate_heads
from mannlab.ops.triton_math import padded, rows_per_program


def _sizes(
    hidden,
    controller_width,
    projected_width,
    read_heads,
    write_heads,
    slots,
    address_size,
    content_size,
    params,
    options,
    gru,
):
    width = address_size + content_size
    memory_keys = options.write_keys == "memory"
    return dict(
        D=hidden,
        PC=controller_width,
        X=projected_width,
        R=read_heads,
        H=write_heads,
        N=slots,
        DA=address_size,
        DC=content_size,
        KW=width if memory_keys else content_size,
        P=params,
        DP=padded(hidden, 16),
        RWP=padded(read_heads * width, 16),
        PP=padded(params, 16),
        NP=padded(slots),
        DAP=padded(address_size),
        DCP=padded(content_size),
        GRU=int(gru),
        LRU=int(options.lru),
        NOP_CELL=slots - 1 if options.nop else -1,
        MEMKEYS=int(memory_keys),
        MODE=MODES.index(options.mode),
        NOISY=int(options.mode in NOISY_MODES),
    )


class DNTMTritonSequence(torch.autograd.Function):
    """forward(options, draws (T, B (R + H) N', or a placeholder), projected, h_0, C_0,
    φ_0 (B, R W), v^r_0, v^w_0, W_r, W_h, b_h, W_p, b_p, A) -> features (B, T, d_h + R W), the
    final h, φ, C, v^r, v^w, and the records w (T, B, R + H, N'), p_t (T, B, P) and C_t
    (T, B, N', d_c), all differentiable."""

    @staticmethod
    def forward(
        ctx, options, draws, xp, h0, c0, phi0, vr0, vw0, w_read, w_rec, b_rec, w_head, b_head, address
    ):
        B, T, X = xp.shape
        gru = w_rec is not None
        D, P = w_head.shape[1], w_head.shape[0]
        R, H = vr0.shape[1], vw0.shape[1]
        N, DA = address.shape
        DC = c0.shape[2]
        sizes = _sizes(D, w_read.shape[0], X, R, H, N, DA, DC, P, options, gru)
        keep = options.keep or options.trace
        rows, kept_steps = (T + 1, T) if keep else (2, 1)  # else two state rows in turn
        initial = (h0 if gru else xp.new_zeros(B, D), phi0, c0, vr0, vw0)
        states = tuple(xp.new_empty((rows, *s.shape)) for s in initial)
        for state, value in zip(states, initial):
            state[0] = value
        hs, phis, contents, vrs, vws = states
        gates = xp.new_empty(kept_steps, B, 4 * D) if gru else xp.new_empty(1)
        params = xp.new_empty(kept_steps, B, P)
        probs = xp.new_empty(kept_steps, B, R + H, N)
        out = xp.new_empty(B, T, D + phi0.shape[1])
        xp, w_read, w_head, b_head, address = (t.contiguous() for t in (xp, w_read, w_head, b_head, address))
        w_rec_arg = w_rec.contiguous() if gru else w_read  # never read then
        b_rec_arg = b_rec.contiguous() if gru else b_head
        rows_each = rows_per_program(B, xp.device)
        kernels.dntm_forward_kernel[(triton.cdiv(B, rows_each),)](
            xp, w_read, w_rec_arg, b_rec_arg, w_head, b_head, address,
            *states, gates, params, probs, out, draws, B, T,
            float(options.similarity_eps), float(options.lru_decay), KEEP=int(keep),
            BLOCK_B=rows_each, **sizes,
        )  # fmt: skip
        ctx.options, ctx.gru = options, gru
        ctx.set_materialize_grads(False)
        if options.keep:  # everything through save_for_backward (no reference cycle)
            ctx.save_for_backward(xp, draws, w_read, w_rec, w_head, address, *states, gates, params, probs)
        last = T if keep else T % 2
        finals = (hs[last], phis[last], contents[last], vrs[last], vws[last])
        return (out, *finals, probs, params, contents[1:])  # the records are read with the trace only

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_phi, d_c, d_vr, d_vw, d_probs, d_params_in, d_contents):
        options, gru = ctx.options, ctx.gru
        xp, draws, w_read, w_rec, w_head, address, hs, phis, contents, vrs, vws, gates, params, probs = (
            ctx.saved_tensors
        )
        B, T, X = xp.shape
        D, P = w_head.shape[1], w_head.shape[0]
        R, H, N = vrs.shape[2], vws.shape[2], vrs.shape[3]
        DA, DC = address.shape[1], contents.shape[3]

        def given(grad, like):  # a gradient autograd did not materialise: zeros
            return grad.contiguous().clone() if grad is not None else torch.zeros_like(like)

        g_h, g_phi, g_c, g_vr, g_vw = (
            given(g, s[T]) for g, s in zip((d_h, d_phi, d_c, d_vr, d_vw), (hs, phis, contents, vrs, vws))
        )
        trace_grads = d_probs is not None or d_contents is not None
        d_probs = given(d_probs, probs) if trace_grads else probs
        d_contents = given(d_contents, contents[1:]) if trace_grads else contents
        d_params = given(d_params_in, params)
        d_xp = xp.new_zeros(T, B, X)
        d_rec = xp.new_zeros(T, B, 3 * D) if gru else d_xp
        d_address = xp.new_zeros(B, N, DA)
        sizes = _sizes(D, w_read.shape[0], X, R, H, N, DA, DC, P, options, gru)
        rows_each = rows_per_program(B, xp.device)
        kernels.dntm_backward_kernel[(triton.cdiv(B, rows_each),)](
            xp, w_read, w_rec if gru else w_read, w_head, address,
            hs, contents, vrs, vws, gates, params, probs,
            given(d_out, xp.new_empty(B, T, D + phis.shape[2])), d_probs, d_contents,
            g_h, g_phi, g_c, g_vr, g_vw, d_address, d_xp, d_rec, d_params, draws,
            B, T, float(options.similarity_eps), float(options.lru_decay), float(options.inverse_temperature),
            TRACE_GRADS=int(trace_grads), BLOCK_B=rows_each, **sizes,
        )  # fmt: skip
        need = ctx.needs_input_grad

        def outer(grad, value):  # sum over steps and batch of grad (x) value
            return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])

        PC = w_read.shape[0]
        return (
            None,
            None,
            d_xp.transpose(0, 1),
            g_h if gru else None,
            g_c,
            g_phi,
            g_vr,
            g_vw,
            outer(d_xp[..., :PC], phis[:-1]) if need[8] else None,  # W_r: φ_{t-1}
            outer(d_rec, hs[:-1]) if gru and need[9] else None,  # W_h: h_{t-1}
            d_rec.sum((0, 1)) if gru and need[10] else None,
            outer(d_params, hs[1:]) if need[11] else None,  # W_p: h_t
            d_params.sum((0, 1)) if need[12] else None,
            d_address.sum(0) if need[13] else None,
        )


def triton_sequence(
    inputs: DNTMInputs, state: DNTMState, weights: DNTMWeights, options: DNTMOptions
) -> DNTMResult:
    """The whole-sequence op on the Triton kernels (CUDA float32 tensors; any device in
    Triton's interpreter), for the options records.covers: the state in and out as the
    kernels' rows (records.state_rows, records.model_state)."""
    if not covers(options, weights, "triton"):
        raise ValueError(
            "the D-NTM's Triton kernels implement addressing_steps=1 with writes='learned', got "
            f"addressing_steps={options.addressing_steps}, writes={options.writes!r}: take backend "
            "'numba' or 'reference'"
        )
    xp = inputs.projected
    B, T = xp.shape[:2]
    R, H = state.read_lru.shape[1], state.write_lru.shape[1]
    N, dc = state.content.shape[1:]
    W = state.read_vectors.shape[-1]
    gru = weights.recurrent_weight is not None
    draws = inputs.draws.contiguous() if inputs.draws is not None else xp.new_ones(1)
    start = state_rows(state)
    out, h, phi, content, read_v, write_v, probs, params, contents = DNTMTritonSequence.apply(
        options,
        draws,
        xp,
        start.hidden,
        start.content,
        start.read_vectors,
        start.read_lru,
        start.write_lru,
        *weights,
    )
    final = model_state(DNTMStateRows(h if gru else None, content, phi, read_v, write_v), state)
    if not options.trace:
        return DNTMResult(out, final, None)
    probs = probs.transpose(0, 1)  # (B, T, R + H, N')
    read_p, write_p = probs[:, :, :R], probs[:, :, R:]
    if options.mode != "soft":  # the one-hots (of the samples from the draws E), without a gradient
        scores = probs.detach()
        if options.mode in NOISY_MODES:
            assert inputs.draws is not None  # dntm_sequence checked: these modes take draws
            read_e, write_e = inputs.draws.split([B * R * N, B * H * N], 1)
            draws = torch.cat([read_e.view(T, B, R, N), write_e.view(T, B, H, N)], 2)
            scores = scores / draws.transpose(0, 1)
        one_hot = torch.zeros_like(probs).scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)
        read_w, write_w = one_hot[:, :, :R], one_hot[:, :, R:]
    else:
        read_w, write_w = read_p, write_p
    sizes = head_sizes(R, H, W, W if options.write_keys == "memory" else dc, dc)
    x_write = xp[..., weights.read_weight.shape[0] :].reshape(B * T, -1)
    heads = activate_heads(params.transpose(0, 1).reshape(B * T, -1).split(sizes, -1), x_write, W)
    address = weights.address.to(content.dtype).expand(B, T, -1, -1)
    trace = step_trace(
        out,
        state,
        options,
        read_weights=read_w,
        write_weights=write_w,
        read_probs=read_p,
        write_probs=write_p,
        erase_vectors=heads.erase.view(B, T, H, dc),
        candidates=heads.candidate.view(B, T, H, dc),
        input_gates=heads.input_gate.view(B, T, H),
        key_strengths=heads.strengths.view(B, T, R + H),
        lru_gates=heads.gates.view(B, T, R + H),
        memory=torch.cat([address, contents.transpose(0, 1)], -1),
    )
    return DNTMResult(out, final, trace)
