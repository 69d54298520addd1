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


def tardis_reference(
    inputs: TARDISInputs, state: TARDISState, weights: TARDISWeights, options: TARDISOptions
) -> TARDISResult:
    """The features [h_t; r_t] (B, T, d + q), the final state and the trace (the per-step
    w^r_t, w^w_t, w̄^r_t, r_t, h_t, [α_t, β_t], 1/τ_t, u_t) of a whole sequence."""
    h, c, content, counts, last_read, steps = state
    d, k = h.shape[-1], content.shape[1]
    train = inputs.logistic is not None
    address = weights.address.to(content.dtype).expand(content.shape[0], -1, -1)
    use_ln = weights.ln_gates_weight is not None

    def layer_norm(value, gain, bias):
        return F.layer_norm(value, value.shape[-1:], gain, bias, options.eps) if use_ln else value

    per_step = []
    for t in range(inputs.gates.shape[1]):
        memory = torch.cat([address, content], -1)  # M_{t-1} = [A; C_{t-1}]
        usage = normalise_usage(counts, options.usage_eps)  # eq. 6
        query = inputs.read[:, t] + h @ weights.read_hidden.t() + usage @ weights.read_usage.t()
        mlp = torch.tanh(query.unsqueeze(1) + memory @ weights.read_memory.t())  # (B, k, m)
        logits = (mlp @ weights.read_score.t()).squeeze(-1) - options.last_read_penalty * last_read  # eq. 4
        if options.learned_temperature:  # eq. 18, from h_{t-1}
            tau = h @ weights.temperature_weight.t() + weights.temperature_bias
            inverse_temperature = F.softplus(tau) + 1
        else:
            inverse_temperature = h.new_full((h.shape[0], 1), float(options.inverse_temperature))
        gumbel = inputs.gumbel[t] if inputs.gumbel is not None else None
        read_w = read_weights(logits, gumbel, inverse_temperature, options, train)
        r = (read_w.unsqueeze(1) @ memory).squeeze(1)  # eq. 1
        hp, rp = h @ weights.hidden_gates.t(), r @ weights.read_gates.t()
        x = inputs.gates[:, t]
        resets = x[:, 4 * d :] + hp[:, 4 * d :] + rp[:, 4 * d :]
        if train:
            assert inputs.logistic is not None  # drawn for every training pass
            resets = resets + inputs.logistic[t]
        resets = torch.sigmoid(resets / options.reset_temperature)  # eq. 8
        alpha, beta = resets[:, :1], resets[:, 1:]
        gates = x[:, : 3 * d] + hp[:, : 3 * d] + rp[:, : 3 * d]
        gates = layer_norm(gates, weights.ln_gates_weight, weights.ln_gates_bias)
        cand = beta * hp[:, 3 * d : 4 * d] + x[:, 3 * d : 4 * d] + alpha * rp[:, 3 * d : 4 * d]
        cand = torch.tanh(layer_norm(cand, weights.ln_candidate_weight, weights.ln_candidate_bias))  # eq. 9
        if inputs.dropout is not None:
            cand = cand * inputs.dropout[t]
        f, i, o = torch.sigmoid(gates).chunk(3, -1)  # eq. 7
        c = f * c + i * cand
        h = o * torch.tanh(layer_norm(c, weights.ln_cell_weight, weights.ln_cell_bias))  # eq. 10
        step = steps + t  # algorithm 1: slot n while n < k, then the slot just read
        fill = F.one_hot(step.clamp(max=k - 1), k).to(read_w.dtype)
        write_w = torch.where((step < k).unsqueeze(-1), fill, read_w)
        value = h @ weights.micro_state.t()  # eq. 2
        content = content + write_w.unsqueeze(-1) * (value.unsqueeze(1) - content)
        hard = read_w.detach()
        counts, last_read = counts + hard, hard
        per_step.append(  # TARDISOutputs' per-step fields, in order
            (h, r, torch.softmax(logits, -1), read_w, write_w, resets, inverse_temperature.squeeze(-1), usage)
        )
    stacked = [torch.stack(field, 1) for field in zip(*per_step)]
    outputs = TARDISOutputs._make([*stacked, c, content, counts, last_read])
    return sequence_result(outputs, state, options, train)
