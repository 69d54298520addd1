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

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from mannlab.nn import addressing as A
from mannlab.ops.controller_codes import controller_state, controller_tensors
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


def sequence_step(x_t, row: NTMStates, weights: NTMWeights, options: NTMOptions):
    """Steps (i)-(iv) once, from x_proj_t (B, G) and the kernels' state row: (H^o_t
    (B, d_h + R W), the next row, the raw head parameters p_t (B, P)). The reference loop runs
    it as it is; the "compiled" backend runs it under torch.compile (ops/compiled.py)."""
    pre_ff = x_t + row.reads @ weights.read_weight.t()
    h, c, h_out = controller_step(pre_ff, row.hidden, row.cell, weights, options)  # (i)
    params = h @ weights.head_weight.t() + weights.head_bias
    reads, memory, read_w, write_w = memory_step(
        params, row.memory, row.read_weights, row.write_weights, options.width, options.num_shifts
    )
    reads = reads.flatten(1)
    features = torch.cat([h_out, reads], dim=-1)  # (iv)
    return features, NTMStates(h, c, reads, memory, read_w, write_w), params


def ntm_sequence_reference(
    x_proj: torch.Tensor,
    state: NTMState,
    weights: NTMWeights,
    options: NTMOptions,
    step: Callable = sequence_step,
) -> NTMResult:
    """The whole-sequence op as a loop over steps: x_proj (B, T, G) = W_x x_t + b of every step,
    the initial state, the weights -> features (B, T, d_h + R W), final state, trace (if asked;
    detached, as the kernels return it). ``step``: :func:`sequence_step`, or the same under
    torch.compile."""
    h, c = controller_tensors(state.controller, options.kind, state.memory, weights.head_weight.shape[1])
    _, memory, reads, read_w, write_w = state
    row = NTMStates(h, c, reads.flatten(1), memory, read_w, write_w)
    heads_and_width = reads.shape[1:]
    write_heads, read_heads = write_w.shape[1], read_w.shape[1]
    features, steps = [], []
    for x_t in x_proj.unbind(1):
        features_t, row, params = step(x_t, row, weights, options=options)
        features.append(features_t)
        if options.trace:
            heads = head_values(params, write_heads, read_heads, options.width, options.num_shifts)
            steps.append(
                NTMTrace(
                    read_weights=row.read_weights,
                    write_weights=row.write_weights,
                    read_vectors=row.reads.unflatten(1, heads_and_width),
                    erase_vectors=heads.erase,
                    add_vectors=heads.add,
                    key_strengths=heads.beta,
                    interpolation_gates=heads.gate,
                    shift_weights=heads.shift,
                    sharpening=heads.gamma,
                    memory=row.memory,
                )
            )
    trace = None
    if options.trace:
        trace = NTMTrace(*(torch.stack(field, dim=1).detach() for field in zip(*steps)))
    final = NTMState(
        controller_state(options.kind, row.hidden, row.cell),
        row.memory,
        row.reads.unflatten(1, heads_and_width),
        row.read_weights,
        row.write_weights,
    )
    return NTMResult(torch.stack(features, dim=1), final, trace)
