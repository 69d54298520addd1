"""TARDIS's whole sequence as one autograd node over the Triton kernels (triton_kernels.py): the
GPU's counterpart of numba_sequence.py, reached through
``mannlab.ops.tardis.tardis_sequence(..., backend="triton")``. On CPU tensors the kernels run
in Triton's interpreter (TRITON_INTERPRET=1), which is how tests/ops/test_tardis_ops.py checks
them without a GPU.

The forward launches one kernel over tiles of batch rows with the time loop inside; the
backward one kernel with the time loop reversed, which returns the gradients of every step's
pre-activations; the weight gradients are then one matrix product each over all B T steps,
the score a's (summed here from each step's terms) and the layer norms' gains and biases
(summed per program in the kernel).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
from torch.autograd.function import once_differentiable

from mannlab.ops.fields import split_records
from mannlab.ops.tardis import triton_kernels as kernels
from mannlab.ops.tardis.records import (
    MODES,
    TRITON_MAX_SIZE,
    TARDISInputs,
    TARDISOptions,
    TARDISOutputs,
    TARDISResult,
    TARDISState,
    TARDISWeights,
    covers,
    sequence_result,
)
from mannlab.ops.triton_math import padded, rows_per_program


def _sizes(
    like: torch.Tensor, batch: int, hidden: int, slots: int, address: int, content: int, mlp: int
) -> dict:
    """The kernels' compile-time sizes, actual and padded, and the rows per program of a launch
    over ``batch`` rows on ``like``'s device."""
    sizes = dict(
        D=hidden,
        K=slots,
        A=address,
        C=content,
        M=mlp,
        DP=padded(hidden, 16),
        KP=padded(slots, 16),
        AP=padded(address, 16),
        CP=padded(content, 16),
        QP=padded(address + content, 16),
        MP=padded(mlp, 16),
        BLOCK_B=rows_per_program(batch, like.device),
    )
    # each row's scratch: h | the read MLP's query | d w^w | W_m h_t | d r_t (kernels' order)
    sizes["S"] = sizes["DP"] + sizes["MP"] + sizes["KP"] + sizes["CP"] + sizes["QP"]
    return sizes


def _outer(grad: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """The sum over every leading index (batch, time, slot) of grad ⊗ value."""
    return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])


class SavedInputs(NamedTuple):
    """What the forward keeps of its inputs for the backward, before the weights (the noise
    as the kernels took it: a placeholder where absent)."""

    gates: torch.Tensor
    read: torch.Tensor
    gumbel: torch.Tensor
    logistic: torch.Tensor
    dropout: torch.Tensor
    hidden: torch.Tensor
    steps: torch.Tensor
    last_read: torch.Tensor


class SavedOutputs(NamedTuple):
    """What the forward keeps of its outputs for the backward, after the weights: h_t, r_t,
    softmax(π_t), the one-hots, [α_t, β_t], u_t, and with ``keep`` every step's c_t and C_t."""

    hidden: torch.Tensor
    reads: torch.Tensor
    read_probs: torch.Tensor
    read_weights: torch.Tensor
    write_weights: torch.Tensor
    resets: torch.Tensor
    usage: torch.Tensor
    cells: torch.Tensor
    contents: torch.Tensor


class TARDISTritonSequence(torch.autograd.Function):
    """forward(options, *TARDISInputs, *TARDISState, *TARDISWeights) -> the fields of
    :class:`TARDISOutputs`, as numba_sequence.TARDISSequence. Gradients not asked for are None,
    so parameters no gradient reaches stay None as on the tensor path."""

    @staticmethod
    def forward(ctx, options: TARDISOptions, *tensors):
        inputs, state, weights, _ = split_records(tensors, TARDISInputs, TARDISState, TARDISWeights)
        xg, xr, gumbel, logistic, mask = inputs
        h0, c0, C0, counts0, last0, steps0 = state
        xg, xr, steps0 = xg.contiguous(), xr.contiguous(), steps0.contiguous()  # the backward reads them too
        B, T, _ = xg.shape
        D, K, C = h0.shape[1], C0.shape[1], C0.shape[2]
        A, M = weights.address.shape[1], weights.read_memory.shape[0]
        Q = A + C
        train, learned, use_ln = (
            logistic is not None,
            options.learned_temperature,
            weights.ln_gates_weight is not None,
        )
        flat = _flat_weights(weights, xg)
        new = xg.new_empty
        outputs: tuple[torch.Tensor, ...] = (
            new(B, T, D),
            new(B, T, Q),
            new(B, T, K),
            new(B, T, K),
            new(B, T, K),
            new(B, T, 2),
        )
        # the final memory's buffer starts as C_0: the kernel writes the steps' memory there
        outputs += (new(B, T), new(B, T, K), new(B, D), C0.contiguous().clone(), new(B, K), new(B, K))
        keep = options.keep
        records = (new(B, T, D), new(B, T, K, C)) if keep else (new(1), new(1))
        dummy = new(1)
        noise = tuple(v.contiguous() if v is not None else dummy for v in (gumbel, logistic, mask))
        rows = [v.contiguous() for v in (h0, c0, counts0, last0)]
        sizes = _sizes(xg, B, D, K, A, C, M)
        kernels.tardis_forward_kernel[(triton.cdiv(B, sizes["BLOCK_B"]),)](
            xg, xr, *noise, *rows, steps0, *flat, *outputs, *records, new(B, sizes["S"]),
            B, T, float(options.inverse_temperature), float(options.eps), float(options.last_read_penalty),
            float(options.reset_temperature), float(options.usage_eps), **sizes,
            MODE=MODES.index(options.mode), TRAIN=int(train), LEARNED=int(learned), LN=int(use_ln),
            USE_MASK=int(mask is not None), KEEP=int(keep),
        )  # fmt: skip
        h_all, r_all, probs, read_w, write_w, resets, tau, usage, c, content, counts, last = outputs
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(usage, counts, last)
        if options.mode != "gumbel":
            ctx.mark_non_differentiable(read_w, write_w)
        if not learned:
            ctx.mark_non_differentiable(tau)
        if keep:  # everything through save_for_backward (a tensor kept on ctx would make a cycle)
            ctx.save_for_backward(
                xg, xr, *noise, h0, steps0, last0, *flat, h_all, r_all, probs, read_w, write_w, resets, usage,
                *records,
            )  # fmt: skip
        ctx.options, ctx.flags = options, (train, learned, use_ln, mask is not None)
        ctx.sizes = sizes  # the backward's launch takes the forward's rows per program
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, d_h_all, d_r_all, d_probs, d_read_w, d_write_w, d_resets, d_tau, *rest):
        d_usage, d_c, d_content, d_counts, d_last = rest
        options = ctx.options
        train, learned, use_ln, use_mask = ctx.flags
        ins, flat, outs, _ = split_records(ctx.saved_tensors, SavedInputs, TARDISWeights, SavedOutputs)
        xg, xr, gumbel, logistic, mask, h0, steps0, last0 = ins
        h_all, r_all, probs, read_w, write_w, resets, usage, cs, mems = outs
        B, T, D = h_all.shape
        K, C = mems.shape[2], mems.shape[3]
        address, M = flat.address, flat.read_memory.shape[0]
        gumbel_st = options.mode == "gumbel" and train
        read_grad = gumbel_st or d_probs is not None  # does any gradient reach π?
        tau_grad = learned and (gumbel_st or d_tau is not None)

        def given(grad, like):  # a gradient autograd did not materialise: zeros
            return grad.contiguous() if grad is not None else torch.zeros_like(like)

        hprev = torch.cat([h0.unsqueeze(1), h_all[:, :-1]], 1).contiguous()
        lasts = torch.cat([last0.unsqueeze(1), read_w[:, :-1]], 1).contiguous()
        new = h_all.new_zeros
        d_c0 = d_c.contiguous().clone() if d_c is not None else new(B, D)
        d_C0 = d_content.contiguous().clone() if d_content is not None else new(B, K, C)
        programs = triton.cdiv(B, ctx.sizes["BLOCK_B"])
        d_h0, d_xg, d_xr = new(B, D), new(B, T, 4 * D + 2), new(B, T, M)
        d_value, d_proj, d_tau_pre = new(B, T, C), new(B, T, K, M), new(B, T)
        d_score, d_ln = new(B, T, M), new(programs, kernels.LN_BLOCKS, D)
        kernels.tardis_backward_kernel[(programs,)](
            xg, xr, gumbel, logistic, mask, hprev, cs, mems, lasts, usage, probs, read_w, write_w, r_all,
            steps0, *flat,
            given(d_h_all, h_all), given(d_r_all, r_all), given(d_probs, probs), given(d_read_w, probs),
            given(d_write_w, probs), given(d_resets, resets),
            given(d_tau, new(B, T)), d_c0, d_C0,
            d_h0, d_xg, d_xr, d_value, d_proj, d_tau_pre, d_score, d_ln, new(B, ctx.sizes["S"]),
            B, T, float(options.inverse_temperature), float(options.eps), float(options.last_read_penalty),
            float(options.reset_temperature), **ctx.sizes,
            MODE=MODES.index(options.mode), TRAIN=int(train), LEARNED=int(learned), LN=int(use_ln),
            USE_MASK=int(use_mask), READ_GRAD=int(read_grad), USE_DPROBS=int(d_probs is not None),
        )  # fmt: skip
        cand = slice(3 * D, 4 * D)  # the c̃ block: β W^g_h h, α W^g_r r (eq. 9)
        d_hp, d_rp = d_xg.clone(), d_xg.clone()
        d_hp[..., cand] *= resets[..., 1:]
        d_rp[..., cand] *= resets[..., :1]
        memory = torch.cat([address.to(mems.dtype).expand(B, T, -1, -1), mems], -1)  # M_{t-1}
        read = (
            (_outer(d_proj, memory), _outer(d_xr, hprev), _outer(d_xr, usage), d_score.sum((0, 1)).view(1, M))
            if read_grad
            else (None,) * 4
        )
        temperature = (
            (_outer(d_tau_pre.unsqueeze(-1), hprev), d_tau_pre.sum().view(1)) if tau_grad else (None, None)
        )
        ln = (None,) * 6
        if use_ln:
            sums = d_ln.sum(0)
            ln = (sums[0:3].flatten(), sums[3:6].flatten(), sums[6], sums[7], sums[8], sums[9])
        weights = TARDISWeights(
            None, _outer(d_hp, hprev), _outer(d_rp, r_all), _outer(d_value, h_all), *read, *temperature, *ln
        )
        inputs = TARDISInputs(d_xg, d_xr, None, None, None)
        state = TARDISState(d_h0, d_c0, d_C0, None, None, None)
        return None, *inputs, *state, *weights


def _flat_weights(weights: TARDISWeights, like: torch.Tensor) -> tuple:
    """The weights in the kernels' order, contiguous (the layer norms' as placeholders without
    layer norm; the score a and w^τ as vectors)."""
    dummy = like.new_ones(1)
    return tuple((w if w is not None else dummy).to(like.dtype).contiguous() for w in weights)


def triton_sequence(
    inputs: TARDISInputs, state: TARDISState, weights: TARDISWeights, options: TARDISOptions
) -> TARDISResult:
    """The whole-sequence op on the Triton kernels (CUDA float32 tensors; any device in
    Triton's interpreter), for the sizes records.covers."""
    if not covers(options, weights, "triton"):
        d, k, c = state.hidden.shape[1], state.content.shape[1], state.content.shape[2]
        a, m = weights.address.shape[1], weights.read_memory.shape[0]
        raise ValueError(
            f"TARDIS's Triton kernels implement sizes up to {TRITON_MAX_SIZE}, got d_h="
            f"{d}, slots={k}, address + content={a + c}, read MLP={m}: take backend 'numba' or "
            "'reference'"
        )
    outputs = TARDISTritonSequence.apply(options, *inputs, *state, *weights)
    return sequence_result(TARDISOutputs(*outputs), state, options, inputs.logistic is not None)
