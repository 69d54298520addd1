"""The plain tensor time loop of exactly what TARDIS's kernels compute, to read beside the paper
(Gulcehre, Chandar, Bengio, "Memory Augmented Neural Networks with Wormhole Connections", 2017):
eqs. 4-6 and 18-19 (the read), 1 (the read vector), 7-10 (the controller, with section 8.1's
layer norm and recurrent dropout) and the writes of eq. 2 and algorithm 1, with the
corrections listed in mannlab.models.tardis. Autograd differentiates it; the numba kernels are
tested against it (tests/ops/test_tardis_ops.py). It takes the records of
mannlab.ops.tardis.tardis_sequence (backend "reference"). The fusion g(h_t, r_t) of eq. 11
and the output layer do not feed back into the recurrence: the caller applies them.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from mannlab.nn import sampling
from mannlab.ops.tardis.records import (
    TARDISInputs,
    TARDISOptions,
    TARDISOutputs,
    TARDISResult,
    TARDISState,
    TARDISWeights,
    sequence_result,
)


def normalise_usage(counts: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """u_t = norm(sum_{i<t} w^r_i) (eq. 6): counts (B, k) centred over the slots and divided
    by their standard deviation -> (B, k). Equal counts (e.g. none yet) give 0."""
    centred = counts - counts.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)


def read_weights(logits, gumbel, inverse_temperature, options: TARDISOptions, train: bool):
    """The one-hot w^r_t from π_t (B, k): gumbel: one-hot of argmax softmax((π + g) / τ) with
    that softmax's gradient (eq. 19, straight-through); reinforce: argmax(π + g), a sample of
    softmax(π) (Gumbel-max), no gradient; argmax (and evaluation): argmax π."""
    if options.mode == "gumbel" and train:
        return sampling.gumbel_softmax(logits, inverse_temperature, hard=True, noise=gumbel)
    if options.mode == "reinforce" and train:
        return sampling.argmax_one_hot(logits + gumbel)
    return sampling.argmax_one_hot(logits)


def sequence_step(gates_t, read_t, draws_t, scheduled, address, row: TARDISState, weights, options):
    """One step (eqs. 4-6, 18-19, 1, 7-10, 2 and algorithm 1's write) from the step's input
    projections gates_t (B, G) and read_t (B, m), its draws (the Gumbel noise (B, k), the
    logistic noise (B, 2) in training, the dropout mask (B, d); each or None), the scheduled
    1/τ (B, 1) (None when learned), the addresses A (B, k, a) and the state ``row`` before the
    step (its ``steps`` counts the steps before this one) -> (the state after it, the step's
    per-step fields of :class:`TARDISOutputs`). The reference loop runs it as it is; the
    "compiled" backend runs it under torch.compile (ops/compiled.py)."""
    h, c, content, counts, last_read, step = row
    gumbel_t, logistic_t, dropout_t = draws_t
    d, k = h.shape[-1], content.shape[1]
    train = logistic_t is not None
    use_ln = weights.ln_gates_weight is not None

    def layer_norm(value, gain, bias):
        return F.layer_norm(value, value.shape[-1:], gain, bias, options.eps) if use_ln else value

    memory = torch.cat([address, content], -1)  # M_{t-1} = [A; C_{t-1}]
    usage = normalise_usage(counts, options.usage_eps)  # eq. 6
    query = read_t + h @ weights.read_hidden.t() + usage @ weights.read_usage.t()
    mlp = torch.tanh(query.unsqueeze(1) + memory @ weights.read_memory.t())  # (B, k, m)
    logits = (mlp @ weights.read_score.t()).squeeze(-1) - options.last_read_penalty * last_read  # eq. 4
    if options.learned_temperature:  # eq. 18, from h_{t-1}
        tau = h @ weights.temperature_weight.t() + weights.temperature_bias
        inverse_temperature = F.softplus(tau) + 1
    else:
        inverse_temperature = scheduled
    read_w = read_weights(logits, gumbel_t, inverse_temperature, options, train)
    r = (read_w.unsqueeze(1) @ memory).squeeze(1)  # eq. 1
    hp, rp = h @ weights.hidden_gates.t(), r @ weights.read_gates.t()
    x = gates_t
    resets = x[:, 4 * d :] + hp[:, 4 * d :] + rp[:, 4 * d :]
    if train:
        resets = resets + logistic_t
    resets = torch.sigmoid(resets / options.reset_temperature)  # eq. 8
    alpha, beta = resets[:, :1], resets[:, 1:]
    gates = x[:, : 3 * d] + hp[:, : 3 * d] + rp[:, : 3 * d]
    gates = layer_norm(gates, weights.ln_gates_weight, weights.ln_gates_bias)
    cand = beta * hp[:, 3 * d : 4 * d] + x[:, 3 * d : 4 * d] + alpha * rp[:, 3 * d : 4 * d]
    cand = torch.tanh(layer_norm(cand, weights.ln_candidate_weight, weights.ln_candidate_bias))  # eq. 9
    if dropout_t is not None:
        cand = cand * dropout_t
    f, i, o = torch.sigmoid(gates).chunk(3, -1)  # eq. 7
    c = f * c + i * cand
    h = o * torch.tanh(layer_norm(c, weights.ln_cell_weight, weights.ln_cell_bias))  # eq. 10
    # algorithm 1: slot n while n < k, then the slot just read
    fill = F.one_hot(step.clamp(max=k - 1), k).to(read_w.dtype)
    write_w = torch.where((step < k).unsqueeze(-1), fill, read_w)  # the slot just read (DECISIONS.md)
    value = h @ weights.micro_state.t()  # eq. 2
    content = content + write_w.unsqueeze(-1) * (value.unsqueeze(1) - content)
    hard = read_w.detach()
    row = TARDISState(h, c, content, counts + hard, hard, step + 1)
    probs, inverse = torch.softmax(logits, -1), inverse_temperature.squeeze(-1)
    return row, (h, r, probs, read_w, write_w, resets, inverse, usage)  # TARDISOutputs' per-step fields


def per_step(values: Optional[torch.Tensor], T: int) -> Sequence[Optional[torch.Tensor]]:
    """A draw's T per-step slices (T, B, ...) -> T (B, ...), or T Nones where it is not drawn."""
    return (None,) * T if values is None else values.unbind(0)


def tardis_reference(
    inputs: TARDISInputs,
    state: TARDISState,
    weights: TARDISWeights,
    options: TARDISOptions,
    step: Callable = sequence_step,
) -> TARDISResult:
    """The features [h_t; r_t] (B, T, d + q), the final state and the trace (the per-step
    w^r_t, w^w_t, w̄^r_t, r_t, h_t, [α_t, β_t], 1/τ_t, u_t) of a whole sequence. ``step``:
    :func:`sequence_step`, or the same under torch.compile."""
    h, content = state.hidden, state.content
    B, T = inputs.gates.shape[:2]
    train = inputs.logistic is not None
    address = weights.address.to(content.dtype).expand(B, -1, -1)
    scheduled = None
    if not options.learned_temperature:
        scheduled = h.new_full((B, 1), float(options.inverse_temperature))
    draws = zip(*(per_step(values, T) for values in (inputs.gumbel, inputs.logistic, inputs.dropout)))
    row, steps = state, []
    for gates_t, read_t, draws_t in zip(inputs.gates.unbind(1), inputs.read.unbind(1), draws):
        row, outputs_t = step(gates_t, read_t, draws_t, scheduled, address, row, weights, options=options)
        steps.append(outputs_t)
    stacked = [torch.stack(field, 1) for field in zip(*steps)]
    outputs = TARDISOutputs._make([*stacked, row.cell, row.content, row.read_counts, row.last_read])
    return sequence_result(outputs, state, options, train)
