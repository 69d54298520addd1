"""The typed records of TARDIS's whole-sequence op (mannlab.ops.tardis.tardis_sequence): what
goes in, what comes out, by name. :class:`TARDISState` and :class:`TARDISStepTrace` are the
model's own (mannlab.models.tardis re-exports them): the op, every backend and the model's step
loop speak them. Paper symbols as in mannlab.models.tardis: d = d_h, k slots, a + c = q features
per slot (address | content), m the read MLP's width, G = 4 d + 2 (the pre-activations
[f, i, o (3 d) | c̃ (d) | α, β (2)] of eqs. 7-9).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

#: the reads, in the order of the kernels' integer codes (kernels.py: GUMBEL = 0, ...)
MODES = ("gumbel", "reinforce", "argmax")
#: the modes whose reads take Gumbel noise (in training)
NOISY_MODES = ("gumbel", "reinforce")
#: the largest d_h, k, a + c and m the Triton kernels take: their weight tiles are loaded whole
#: and each program holds its rows' memory (BLOCK_B, k, a + c) in registers (ARMIN's bound,
#: not yet measured for these kernels on a GPU)
TRITON_MAX_SIZE = 128


class TARDISState(NamedTuple):
    """The recurrent state between steps and segments, as the model returns it and the op and
    every backend read it: LSTM h, c (B, d); content C (B, k, c); read counts sum_{i<t} w^r_i
    (B, k); the last read one-hot (B, k); steps n since the memory was empty (B,) long (the
    write fills slot n while n < k)."""

    hidden: torch.Tensor
    cell: torch.Tensor
    content: torch.Tensor
    read_counts: torch.Tensor
    last_read: torch.Tensor
    steps: torch.Tensor


class TARDISStepTrace(NamedTuple):
    """Per-step internals: (B, ...) from one step of the model's step loop, stacked over time
    (B, T, ...) from the op. The one-hots carry gradient in mode "gumbel" only
    (straight-through), 1/τ_t when learned, the usage never."""

    read_weights: torch.Tensor  # (B, 1, k)  w^r_t (one-hot)
    write_weights: torch.Tensor  # (B, 1, k)  slot written (sequential, then w^r_t)
    read_probs: torch.Tensor  # (B, 1, k)  w̄^r_t = softmax(π_t)
    read_vectors: torch.Tensor  # (B, q)  r_t
    hidden: torch.Tensor  # (B, d_h)  h_t
    resets: torch.Tensor  # (B, 2)  α_t, β_t
    inverse_temperature: torch.Tensor  # (B,)  τ(h_{t-1}) or the scheduled 1/τ
    usage: torch.Tensor  # (B, k)  u_t
    sampled: torch.Tensor  # (B,)  1 where w^r_t was sampled (REINFORCE)


class TARDISTrace(NamedTuple):
    """What the model returns with ``return_trace=True``: :class:`TARDISStepTrace` stacked over
    time (B, T, ...), plus the inputs x (B, T, I) (the auxiliary predictor of eq. 17 reads
    them)."""

    read_weights: torch.Tensor
    write_weights: torch.Tensor
    read_probs: torch.Tensor
    read_vectors: torch.Tensor
    hidden: torch.Tensor
    resets: torch.Tensor
    inverse_temperature: torch.Tensor
    usage: torch.Tensor
    sampled: torch.Tensor
    inputs: torch.Tensor


class TARDISInputs(NamedTuple):
    """Per-step inputs, computed or drawn before the op runs (TARDISCell.draws).

    gates: (B, T, G) W x_t + b, the input's share of eqs. 7-9
    read: (B, T, m) W_x^γ x_t + b^γ, the input's share of the read MLP (eq. 4)
    gumbel: (T, B, k) Gumbel noise of the reads (modes "gumbel" and "reinforce" in training),
        else None
    logistic: (T, B, 2) logistic noise of the RESET gates α, β (eq. 8) in training; None at
        evaluation (noise-free gates)
    dropout: (T, B, d) recurrent-dropout masks of c̃ (0 or 1 / (1 - p)), or None
    """

    gates: torch.Tensor
    read: torch.Tensor
    gumbel: Optional[torch.Tensor] = None
    logistic: Optional[torch.Tensor] = None
    dropout: Optional[torch.Tensor] = None


class TARDISWeights(NamedTuple):
    """The recurrent weights as nn.Linear stores them (out, in), the fixed addresses and the
    layer norms (None without layer norm).

    address: A (k, a), fixed, never learned
    hidden_gates: W_h (G, d);  read_gates: W_r (G, q);  micro_state: W_m (c, d) (eq. 2)
    read_memory: W_m^γ (m, q);  read_hidden: W_h^γ (m, d);  read_usage: W_u^γ (m, k);
        read_score: a (1, m) (eq. 4)
    temperature_weight: w^τ (1, d);  temperature_bias: b^τ (1,) (eq. 18)
    ln_gates_*: the norm of eq. 7's pre-activations (3 d); ln_candidate_*: of eq. 9's (d);
        ln_cell_*: of c_t inside eq. 10 (d)
    """

    address: torch.Tensor
    hidden_gates: torch.Tensor
    read_gates: torch.Tensor
    micro_state: torch.Tensor
    read_memory: torch.Tensor
    read_hidden: torch.Tensor
    read_usage: torch.Tensor
    read_score: torch.Tensor
    temperature_weight: torch.Tensor
    temperature_bias: torch.Tensor
    ln_gates_weight: Optional[torch.Tensor] = None
    ln_gates_bias: Optional[torch.Tensor] = None
    ln_candidate_weight: Optional[torch.Tensor] = None
    ln_candidate_bias: Optional[torch.Tensor] = None
    ln_cell_weight: Optional[torch.Tensor] = None
    ln_cell_bias: Optional[torch.Tensor] = None


class TARDISOptions(NamedTuple):
    """mode: one of :data:`MODES` ("argmax" at evaluation); learned_temperature: 1/τ from
    eq. 18, else ``inverse_temperature`` (the scheduled 1/τ); eps: the layer norms' epsilon;
    keep: keep what the backward reads (False: inference, one step's scratch);
    last_read_penalty, reset_temperature, usage_eps: the constants of section 2.2, eq. 8 and
    eq. 6; trace: return the per-step internals (:class:`TARDISStepTrace`)."""

    mode: str = "gumbel"
    learned_temperature: bool = True
    inverse_temperature: float = 1.0
    eps: float = 1e-5
    keep: bool = True
    last_read_penalty: float = 100.0
    reset_temperature: float = 0.3
    usage_eps: float = 1e-5
    trace: bool = True


class TARDISResult(NamedTuple):
    """``features, state, trace = tardis_sequence(...)``: [h_t; r_t] (B, T, d + q), what the
    fusion g(h_t, r_t) of eq. 11 reads; the final :class:`TARDISState`; the
    :class:`TARDISStepTrace` stacked over time, or None."""

    features: torch.Tensor
    state: TARDISState
    trace: Optional[TARDISStepTrace]


class TARDISOutputs(NamedTuple):
    """What every backend's loop returns, in its autograd Function's order: per step (B, T, .)
    h_t, r_t, softmax(π_t), the read and write one-hots (k), [α_t, β_t], 1/τ_t (B, T) and u_t;
    then the final c, C, read counts and last read. :func:`sequence_result` makes the op's
    result of them."""

    hidden: torch.Tensor
    reads: torch.Tensor
    read_probs: torch.Tensor
    read_weights: torch.Tensor
    write_weights: torch.Tensor
    resets: torch.Tensor
    inverse_temperature: torch.Tensor
    usage: torch.Tensor
    cell: torch.Tensor
    content: torch.Tensor
    read_counts: torch.Tensor
    last_read: torch.Tensor


def sequence_result(
    out: TARDISOutputs, start: TARDISState, options: TARDISOptions, train: bool
) -> TARDISResult:
    """The op's result from a backend's outputs and the state it started from (``train``: the
    pass drew noise): the features [h_t; r_t], the final state by name and, with
    ``options.trace``, the trace as the model's step loop stacks it (a head axis of one on the
    weightings)."""
    B, T = out.hidden.shape[:2]
    features = torch.cat([out.hidden, out.reads], dim=-1)
    final = TARDISState(
        hidden=out.hidden[:, -1].clone(),
        cell=out.cell,
        content=out.content,
        read_counts=out.read_counts,
        last_read=out.last_read,
        steps=start.steps + T,
    )
    if not options.trace:
        return TARDISResult(features, final, None)
    trace = TARDISStepTrace(
        read_weights=out.read_weights.unsqueeze(2),
        write_weights=out.write_weights.unsqueeze(2),
        read_probs=out.read_probs.unsqueeze(2),
        read_vectors=out.reads,
        hidden=out.hidden,
        resets=out.resets,
        inverse_temperature=out.inverse_temperature,
        usage=out.usage,
        sampled=out.hidden.new_full((B, T), float(train and options.mode == "reinforce")),
    )
    return TARDISResult(features, final, trace)


def sizes(weights: TARDISWeights) -> tuple[int, int, int, int]:
    """(d_h, k, q = a + c, m) of the weights."""
    return (
        weights.hidden_gates.shape[1],
        weights.address.shape[0],
        weights.read_gates.shape[1],
        weights.read_memory.shape[0],
    )


def covers(options: TARDISOptions, weights: TARDISWeights, backend: str) -> bool:
    """The numba kernels, the reference and the compiled step implement every configuration:
    each read mode in training and at evaluation, learned or scheduled 1/τ, layer norm,
    recurrent dropout, with or without the trace; the Triton kernels too, while d_h, k,
    q = a + c and m are at most :data:`TRITON_MAX_SIZE`."""
    return backend != "triton" or max(sizes(weights)) <= TRITON_MAX_SIZE


def pays(options: TARDISOptions, weights: TARDISWeights, batch: int) -> bool:
    """The numba kernels beat the step loop at every batch and size measured
    (benchmarks/README.md, bench_tardis.py)."""
    return True
