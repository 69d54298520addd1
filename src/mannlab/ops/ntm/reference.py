"""The NTM's whole-sequence op as a plain tensor loop: what the numba and Triton kernels
compute, written to be read beside the paper (Graves, Wayne, Danihelka 2014, "Neural Turing
Machines"; equations as numbered in the NTM section of Taguchi & Tsuruoka, "Partially
Non-Recurrent Controllers for Memory-Augmented Neural Networks"). The tests hold every kernel
to it: values, final state, trace and, through autograd, every gradient.

Per step t, for a batch of rows at once:

    (i)   controller      h'bar_t = x_proj_t + W_r r_{t-1}             (x_proj_t = W_x x_t + b)
                          FNN   h_t = tanh(h'bar_t)
                          Elman h_t = tanh(h'bar_t + W_h h_{t-1})      eq. 1
                          LSTM  [z; i; f; o] = act(h'bar_t + W_h h_{t-1}), c_t = f c_{t-1} + i z,
                                h_t = o tanh(c_t)                        eqs. 2-7
                          h_out = h_t, or tanh(first block of h'bar_t) when partially
                          non-recurrent (eqs. 9-13)
          head layer      p_t = W_p h_t + b_p: per head (write heads first) [k, beta, g, s, gamma],
                          then per write head [e, a]
    (ii)  write heads     address M_{t-1}; M_t = M_{t-1} o prod_h (1 - w^w_h e_h^T) + sum_h w^w_h a_h^T
    (iii) read heads      address M_t;     r_t = w^r_t M_t
    (iv)  features        H^o_t = [h_out; r_t]

where ``address`` is content addressing (cosine K, w^c = softmax(beta K)), interpolation
(w^g = g w^c + (1 - g) w_{t-1}), circular shift (w~(i) = sum_j w^g(j) s(i - j)) and
sharpening (w = w~^gamma / sum w~^gamma), the primitives of mannlab.nn.addressing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from mannlab.nn import addressing as A
from mannlab.ops.ntm.records import (
    FNN,
    LSTM,
    NTMOptions,
    NTMResult,
    NTMState,
    NTMTrace,
    NTMWeights,
    controller_state,
    controller_tensors,
)


class HeadValues(NamedTuple):
    """The activated head parameters of one step; per head (B, H + R, ...), write heads first,
    and the write heads' erase and add vectors (B, H, W)."""

    key: torch.Tensor  # k (W)
    beta: torch.Tensor  # key strength, softplus >= 0
    gate: torch.Tensor  # interpolation gate g, sigmoid
    shift: torch.Tensor  # shift weighting s (S), softmax
    gamma: torch.Tensor  # sharpening exponent, 1 + softplus >= 1
    erase: torch.Tensor  # e (W), sigmoid
    add: torch.Tensor  # a (W)


def head_values(params, write_heads: int, read_heads: int, width: int, num_shifts: int) -> HeadValues:
    """Raw head parameters p_t (B, P) -> their activated values."""
    batch, size = params.shape[0], width + 3 + num_shifts
    heads = write_heads + read_heads
    address = params[:, : heads * size].view(batch, heads, size)
    key, beta, gate, shift, gamma = address.split([width, 1, 1, num_shifts, 1], dim=-1)
    erase, add = params[:, heads * size :].view(batch, write_heads, 2 * width).split(width, -1)
    return HeadValues(
        key,
        F.softplus(beta.squeeze(-1)),
        torch.sigmoid(gate.squeeze(-1)),
        torch.softmax(shift, -1),
        1 + F.softplus(gamma.squeeze(-1)),
        torch.sigmoid(erase),
        add,
    )


def address(heads: HeadValues, select: slice, memory, previous):
    """Content -> interpolation -> circular shift -> sharpening for the heads ``select``."""
    content = A.content_weights(heads.key[:, select], memory, heads.beta[:, select])
    gated = A.interpolate(content, previous, heads.gate[:, select])
    return A.sharpen(A.circular_shift(gated, heads.shift[:, select]), heads.gamma[:, select])


def memory_step(params, memory, read_prev, write_prev, width: int, num_shifts: int):
    """Steps (ii)-(iii) from raw head parameters (B, P), M_{t-1} (B, N, W), w^r_{t-1} (B, R, N)
    and w^w_{t-1} (B, H, N) -> (r_t (B, R, W), M_t, w^r_t, w^w_t)."""
    write_heads = write_prev.shape[1]
    heads = head_values(params, write_heads, read_prev.shape[1], width, num_shifts)
    write_w = address(heads, slice(0, write_heads), memory, write_prev)  # (ii)
    new_memory = A.write(memory, write_w, heads.erase, heads.add)
    read_w = address(heads, slice(write_heads, None), new_memory, read_prev)  # (iii)
    return A.read(new_memory, read_w), new_memory, read_w, write_w


def controller_step(pre_ff, hidden, cell, weights: NTMWeights, options: NTMOptions):
    """Step (i) from h'bar_t = x_proj_t + W_r r_{t-1}: (h_t, c_t, h_out)."""
    size = hidden.shape[1]
    if options.kind == FNN:
        h = torch.tanh(pre_ff)
        c = torch.zeros_like(cell)
    else:
        assert weights.recurrent_weight is not None  # every controller but the feed-forward one
        pre = pre_ff + hidden @ weights.recurrent_weight.t()
        if options.kind == LSTM:
            z, gates = torch.tanh(pre[:, :size]), torch.sigmoid(pre[:, size:])
            i, f, o = gates.chunk(3, dim=-1)
            c = f * cell + i * z
            h = o * torch.tanh(c)
        else:
            h, c = torch.tanh(pre), torch.zeros_like(cell)
    h_out = torch.tanh(pre_ff[:, :size]) if options.pnr else h
    return h, c, h_out


def ntm_sequence_reference(
    x_proj: torch.Tensor, state: NTMState, weights: NTMWeights, options: NTMOptions
) -> NTMResult:
    """The whole-sequence op as a loop over steps: x_proj (B, T, G) = W_x x_t + b of every step,
    the initial state, the weights -> features (B, T, d_h + R W), final state, trace (if asked;
    detached, as the kernels return it)."""
    h, c = controller_tensors(state, options.kind, weights.head_weight.shape[1])
    _, memory, step_reads, read_w, write_w = state
    write_heads, read_heads = write_w.shape[1], read_w.shape[1]
    width, num_shifts = options.width, options.num_shifts
    features, steps = [], []
    for x_t in x_proj.unbind(1):
        pre_ff = x_t + step_reads.flatten(1) @ weights.read_weight.t()
        h, c, h_out = controller_step(pre_ff, h, c, weights, options)  # (i)
        params = h @ weights.head_weight.t() + weights.head_bias
        step_reads, memory, read_w, write_w = memory_step(params, memory, read_w, write_w, width, num_shifts)
        features.append(torch.cat([h_out, step_reads.flatten(1)], dim=-1))  # (iv)
        if options.trace:
            heads = head_values(params, write_heads, read_heads, width, num_shifts)
            steps.append(
                NTMTrace(
                    read_weights=read_w,
                    write_weights=write_w,
                    read_vectors=step_reads,
                    erase_vectors=heads.erase,
                    add_vectors=heads.add,
                    key_strengths=heads.beta,
                    interpolation_gates=heads.gate,
                    shift_weights=heads.shift,
                    sharpening=heads.gamma,
                    memory=memory,
                )
            )
    trace = None
    if options.trace:
        trace = NTMTrace(*(torch.stack(field, dim=1).detach() for field in zip(*steps)))
    final = NTMState(controller_state(options.kind, h, c), memory, step_reads, read_w, write_w)
    return NTMResult(torch.stack(features, dim=1), final, trace)
