"""The DNC as plain tensor code: what the numba kernels compute, written to be read beside the
paper (Graves et al. 2016, "Hybrid computing using a neural network with dynamic external
memory"; equations as in the DNC section of Taguchi & Tsuruoka, "Partially Non-Recurrent
Controllers for Memory-Augmented Neural Networks", with the corrections listed in
mannlab.models.dnc). ``memory_step`` is steps (ii)-(iii) as the composition of
mannlab.nn.addressing primitives (the per-step op's reference and its path off the CPU);
``dnc_sequence_reference`` the whole-sequence op, steps (i)-(iv), as a loop over steps.
Autograd differentiates both; the kernels are tested against them (tests/ops/test_dnc_ops.py).

Layout of the raw interface vector (B, P), grouped by activation:
    [k^r (R*W), k^w (W), v (W) | beta^r (R), beta^w | e (W), f (R), g^a, g^w | pi (3R)]
     identity                  | oneplus            | sigmoid                | softmax per head
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from mannlab.nn import addressing
from mannlab.ops.controller_codes import controller_state, controller_tensors
from mannlab.ops.dnc.records import (
    FNN,
    LSTM,
    RELU,
    SIGMOID,
    DNCOptions,
    DNCResult,
    DNCState,
    DNCStepResult,
    DNCStepTrace,
    DNCTrace,
    DNCWeights,
    step_state,
    step_trace,
)


def interface_sizes(read_heads: int, width: int) -> list[int]:
    """Sizes of the four activation groups of the raw interface vector (layout above)."""
    return [read_heads * width + 2 * width, read_heads + 1, width + read_heads + 2, 3 * read_heads]


def activate_interface(raw: torch.Tensor, read_heads: int, width: int):
    """Raw interface vector (B, P) -> (k^r (B, R, W), beta^r (B, R), k^w (B, 1, W),
    beta^w (B, 1), e (B, 1, W), v (B, 1, W), f (B, R), g^a (B,), g^w (B,), pi (B, R, 3))."""
    R, W = read_heads, width
    linear, strengths, gates, modes = raw.split(interface_sizes(R, W), dim=-1)
    read_keys, write_key, write_vector = linear.split([R * W, W, W], dim=-1)
    strengths = 1 + F.softplus(strengths)  # oneplus: beta >= 1
    erase, free, alloc_gate, write_gate = torch.sigmoid(gates).split([W, R, 1, 1], dim=-1)
    modes = torch.softmax(modes.view(-1, R, 3), dim=-1)  # pi over (b, c, f)
    return (
        read_keys.view(-1, R, W),
        strengths[:, :R],
        write_key.unsqueeze(1),
        strengths[:, R:],
        erase.unsqueeze(1),
        write_vector.unsqueeze(1),
        free,
        alloc_gate.squeeze(-1),
        write_gate.squeeze(-1),
        modes,
    )


def memory_step(raw, memory, read_w, write_w, usage, precedence, links) -> DNCStepResult:
    """Steps (ii)-(iii) from the raw interface vector (B, P), M_{t-1} (B, N, W),
    w^r_{t-1} (B, R, N), w^w_{t-1} (B, 1, N), u_{t-1}, p_{t-1} (B, N), L_{t-1} (B, N, N).

    Returns r_t, M_t, w^r_t, w^w_t (B, 1, N), u_t, p_t, L_t and their trace (a_t, pi_t, f_t,
    g^a_t, g^w_t; still in the graph).
    """
    read_heads, width = read_w.shape[1], memory.shape[2]
    (
        read_keys,
        read_strengths,
        write_key,
        write_strength,
        erase,
        write_vector,
        free,
        alloc_gate,
        write_gate,
        modes,
    ) = activate_interface(raw, read_heads, width)
    # (ii) dynamic allocation and the write, addressed on M_{t-1}
    psi = addressing.retention(free, read_w)
    usage = addressing.usage(usage, write_w.squeeze(1), psi)
    alloc = addressing.allocation(usage)
    write_content = addressing.content_weights(write_key, memory, write_strength)  # c^w
    write_vec = addressing.write_weighting(alloc, write_content.squeeze(1), write_gate, alloc_gate)  # (B, N)
    memory = addressing.write(memory, write_vec.unsqueeze(1), erase, write_vector)
    links = addressing.link_matrix(links, write_vec, precedence)  # uses p_{t-1}
    precedence = addressing.precedence(precedence, write_vec)
    # (iii) temporal and content read weightings, read from M_t
    forward, backward = addressing.directional_weights(links, read_w)  # w^r_{t-1}
    read_content = addressing.content_weights(read_keys, memory, read_strengths)  # c^r
    read_w = addressing.read_weighting(backward, read_content, forward, modes)
    reads = addressing.read(memory, read_w)
    return DNCStepResult(
        read_vectors=reads,
        memory=memory,
        read_weights=read_w,
        write_weights=write_vec.unsqueeze(1),
        usage=usage,
        precedence=precedence,
        links=links,
        trace=DNCStepTrace(alloc, modes, free, alloc_gate, write_gate),
    )


_FEED_FORWARD = {RELU: torch.relu, SIGMOID: torch.sigmoid}


def controller_step(h_bar, hidden, cell, weights: DNCWeights, options: DNCOptions):
    """Step (i) from h'bar_t = W_x x_t + b + W_r r_{t-1}: (h_t, c_t, h_out). fnn h = phi(h'bar),
    Elman h = tanh(h'bar + W_h h_{t-1}) (eq. 1), LSTM eqs. 2-7 on that sum with the gates
    (z, i, f, o); h_out = tanh(first block of h'bar) when partially non-recurrent (eq. 10),
    else h. A controller without a cell passes c through."""
    size = hidden.shape[1]
    if options.kind == FNN:
        h = _FEED_FORWARD.get(options.activation, torch.tanh)(h_bar)
    else:
        assert weights.recurrent_weight is not None  # every controller but the feed-forward one
        pre = h_bar + hidden @ weights.recurrent_weight.t()
        if options.kind == LSTM:
            z, gates = torch.tanh(pre[:, :size]), torch.sigmoid(pre[:, size:])  # eqs. 2-5
            i, f, o = gates.chunk(3, dim=-1)
            cell = f * cell + i * z  # eq. 6
            h = o * torch.tanh(cell)  # eq. 7
        else:
            h = torch.tanh(pre)
    h_out = torch.tanh(h_bar[:, :size]) if options.pnr else h
    return h, cell, h_out


def sequence_step(x_t, hidden, cell, state: DNCState, weights: DNCWeights, options: DNCOptions):
    """Steps (i)-(iv) once, from x_proj_t (B, G), the controller's (h, c) and the state: (H^o_t
    (B, H + R W), h_t, c_t, the memory step's :class:`DNCStepResult`). The reference loop runs it
    as it is; the "compiled" backend runs it under torch.compile (ops/compiled.py)."""
    h_bar = x_t + state.read_vectors.flatten(1) @ weights.read_weight.t()
    h, c, h_out = controller_step(h_bar, hidden, cell, weights, options)  # (i)
    raw = h @ weights.interface_weight.t() + weights.interface_bias
    step = memory_step(
        raw,
        state.memory,
        state.read_weights,
        state.write_weights,
        state.usage,
        state.precedence,
        state.links,
    )  # (ii)-(iii)
    return torch.cat([h_out, step.read_vectors.flatten(1)], dim=-1), h, c, step  # (iv)


def dnc_sequence_reference(
    x_proj: torch.Tensor,
    state: DNCState,
    weights: DNCWeights,
    options: DNCOptions,
    step_function: Callable = sequence_step,
) -> DNCResult:
    """The whole-sequence op as a loop over steps: x_proj (B, T, G) = W_x x_t + b of every step,
    the initial state, the weights -> features (B, T, H + R W), the final state and the trace
    (if asked; detached, as the kernels would return it). ``step_function``:
    :func:`sequence_step`, or the same under torch.compile."""
    h, c = controller_tensors(state.controller, options.kind, state.memory, weights.interface_weight.shape[1])
    features, steps = [], []
    for x_t in x_proj.unbind(1):
        features_t, h, c, step = step_function(x_t, h, c, state, weights, options=options)
        state = step_state(controller_state(options.kind, h, c), step)
        features.append(features_t)
        if options.trace:
            steps.append(step_trace(step))
    trace = None
    if options.trace:
        trace = DNCTrace(*(torch.stack(field, dim=1).detach() for field in zip(*steps)))
    return DNCResult(torch.stack(features, dim=1), state, trace)
