"""TARDIS: Temporal Automatic Relation Discovery in Sequences.

Paper: C. Gulcehre, S. Chandar, Y. Bengio, "Memory Augmented Neural Networks with
Wormhole Connections" (2017), sections 2 (model), 3 (training) and 8.3 (algorithmic
tasks), with these corrections to the paper's text: the usage vector is the running
sum of the discrete read weights normalised feature-wise (centred, divided by its
standard deviation), and 100 is subtracted from the logit of the slot read at the
previous step.

Glossary
    x_t        input (I)                          h_t, c_t  LSTM controller state (d_h)
    k          memory cells (slots)               a, c      address / content widths, q = a + c
    A          address part (k x a): fixed random sparse vectors, a buffer, never written
    C_t        content part (k x c): micro-states W_m h (eq. 2), C_0 a learned parameter
    M_t        = [A; C_t] (k x q); row i is M_t[i]
    u_t        normalised usage: norm(sum_{i<t} w^r_i) (eq. 6)
    π_t        read logits (eq. 4); w̄^r_t = softmax(π_t) (eq. 5); w^r_t its one-hot
    τ(h)       learned inverse temperature, softplus(w^τ h + b^τ) + 1 (eq. 18)
    α_t, β_t   scalar RESET gates, gumbel-sigmoid with temperature 0.3 (eq. 8)
    r_t        read vector M_{t-1}^T w^r_t (eq. 1), q wide (address and content)
    g(h, r)    output fusion tanh(W_gh h_t + W_gr r_t + b) (eq. 11); y_t = W^o g + b^o

Per time step t (0-based n counts steps since the memory was empty):
    π_t[i] = a^T tanh(W_h h_{t-1} + W_x x_t + W_m M_{t-1}[i] + W_u u_t) - 100 [i read at t-1]
    w^r_t  = one-hot of π_t (gumbel-softmax + straight-through, a sample, or argmax)
    r_t    = M_{t-1}^T w^r_t                                        eq. 1
    f, i, o = sigm(W_h h_{t-1} + W_x x_t + W_r r_t)                  eq. 7
    α, β   = gumbel-sigmoid(w_h h_{t-1} + w_x x_t + w_r r_t)          eq. 8
    c̃_t = tanh(β W^g_h h_{t-1} + W^g_x x_t + α W^g_r r_t); c_t = f c_{t-1} + i c̃_t   eq. 9
    h_t = o tanh(c_t)                                                eq. 10
    For language modelling (section 8.1: "layer-normalization and the recurrent dropout"),
    ``layer_norm`` normalises the pre-activations of eq. 7 (f, i, o jointly) and of eq. 9,
    and c_t inside eq. 10 (h_t = o tanh(LN(c_t))), as in Ba et al.'s LN-LSTM; the paper
    does not say where, this is our choice. ``recurrent_dropout`` drops units of c̃_t
    (Semeniuta et al.: c_t = f c_{t-1} + i d(c̃_t)), a fresh mask per step, training only.
    write: C_t[n] = W_m h_t while n < k (sequential), else C_t[j] = W_m h_t for the
           slot j just read (tied read/write)                        eq. 2, algorithm 1
Algorithm 1 writes the read logits as read(h_t, M_t, x_t) before h_t exists; the
logits use h_{t-1} and M_{t-1}, the quantities available when the read happens
(as ARMIN's auto-addressing does). The usage term W_u u_t takes the whole usage
vector (k), as eq. 4 writes it; the random address rows let the MLP tell slots apart.

Addressing (``addressing``): "gumbel" (eqs. 18-19, straight-through: the forward
pass reads and writes the one-hot, the backward pass uses the gradient of the
gumbel-softmax), "reinforce" (a one-hot sample of w̄^r; the read MLP learns only
through ``aux_loss``), "argmax". Evaluation (``model.eval()``) always takes the
argmax and drops the gumbel-sigmoid noise, so a trained model is deterministic.
``temperature="scheduled"`` replaces eq. 18 by 1/τ set from the training step
(ARMIN's set-up, appendix C) through mannlab.training.schedules.

Random numbers (training only): each step takes one draw E ~ Exp(1) of B (k + 4 + d) values
(``TARDISCell.draws``): the read's Gumbel noise g = -log E (gumbel-softmax; REINFORCE samples
w̄^r by Gumbel-max, argmax(π + g), which is distributed as w̄^r), the RESET gates' logistic
noise log E' - log E'' (two per gate: the difference of two Gumbels is logistic) and the
recurrent-dropout keep mask E < -log p (probability 1 - p).

Speed: on CPU float32/float64 tensors a pass over a sequence runs as one autograd node whose
forward and backward are compiled loops over time (mannlab.ops.tardis), for every
configuration above (gumbel, reinforce, argmax and evaluation; learned or scheduled 1/τ; layer
norm and recurrent dropout on or off) and with or without the trace that REINFORCE's
``aux_loss`` reads (its fields carry the tensor path's gradients). The input projections run
for all steps first, the fusion g and the output layer for all steps after. The compiled path
draws all steps' random numbers in one call, which torch's generator fills exactly as the
step loop's per-step calls, so both paths see the same samples for a seed; values and every
gradient equal the per-step tensor path to rounding (tests/models/test_tardis.py). The compiled path
is faster than the tensor path at every size measured (benchmarks/README.md,
bench_tardis.py). The first use compiles the kernels once per dtype (ops/notice.py says how
long); numba caches them on disk.
``mannlab.ops.use_kernels(False)`` or MANNLAB_KERNELS=0 select the per-step tensor path,
which other devices and dtypes use anyway. Triton kernels of the same op
(ops/tardis/triton_kernels.py, every configuration while d_h, k, a + c and m are at most 128)
are tested in Triton's interpreter only: they run when forced (MANNLAB_KERNELS=triton,
``use_kernels("triton")``) until they have run on a GPU.

``TARDIS.aux_loss`` (REINFORCE, section 3.1): reward R'_j = log p(y_j | r̄_j, x_j) of
the auxiliary predictor softmax/sigmoid(W^o_r r̄_j + W^o_x x_j) (eq. 17; r̄ is r
without gradient), minus a per-step baseline b_j (the other sequences' mean reward at step
j), discounted into returns (eq. 16), centred and divided by their running standard deviation
(variance normalisation); plus the auxiliary predictor's own loss.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mannlab.errors import ConfigError
from mannlab.models.base import (
    CellTemperature,
    SequenceModel,
    TemperatureCell,
    batched,
    check_bool,
    check_choice,
    check_integer,
    check_number,
    check_positive,
    run_sequence,
    size_or_default,
)
from mannlab.models.size_check import check_model_size
from mannlab.nn import sampling
from mannlab.ops import tardis as tardis_op
from mannlab.ops.tardis import (
    TARDISInputs,
    TARDISOptions,
    TARDISState,
    TARDISStepTrace,
    TARDISTrace,
    TARDISWeights,
    tardis_sequence,
)
from mannlab.ops.tardis.reference import normalise_usage

ADDRESSING_MODES = ("gumbel", "reinforce", "argmax")
TEMPERATURES = ("learned", "scheduled")
#: subtracted from the logit of the slot read at the previous step (section 2.2)
LAST_READ_PENALTY = 100.0
#: temperature of the gumbel-sigmoid RESET gates (section 2.3)
RESET_TEMPERATURE = 0.3
#: ε of the usage normalisation (u - mean) / sqrt(var + ε)
USAGE_EPS = 1e-5


# ---------------------------------------------------------------- primitives


def default_nonzeros(size: int) -> int:
    """Nonzero entries per address row when none is given: half the address features."""
    return max(1, size // 2)


def distinct_address_rows(size: int, nonzeros: int) -> int:
    """How many different rows ``sparse_addresses`` can draw: a choice of ``nonzeros``
    positions out of ``size``, each entry with its own sign."""
    return math.comb(size, nonzeros) * 2**nonzeros


def smallest_address_size(slots: int, nonzeros: Optional[int] = None) -> int:
    """The smallest address size with at least ``slots`` different rows, at ``nonzeros``
    nonzero entries (None: ``default_nonzeros`` of each size)."""
    size = nonzeros or 1
    while distinct_address_rows(size, nonzeros or default_nonzeros(size)) < slots:
        size += 1
    return size


def _signed_rows(rows: int, size: int, nonzeros: int, gen: torch.Generator) -> torch.Tensor:
    """(rows, size) of ``nonzeros`` entries ±1 at random positions, the rest 0."""
    rank = torch.rand(rows, size, generator=gen).argsort(-1).argsort(-1)  # random positions
    signs = torch.randint(0, 2, (rows, size), generator=gen) * 2.0 - 1.0
    return torch.where(rank < nonzeros, signs, torch.zeros(()))


def sparse_addresses(slots: int, size: int, nonzeros: int, seed: int = 0) -> torch.Tensor:
    """Fixed random sparse address vectors A (slots, size): ``nonzeros`` entries of each
    row are ±1/sqrt(nonzeros) at random positions, the rest 0 (section 2.2). Drawn from
    a generator seeded with ``seed``, so a model rebuilt from its config has the same A.

    The addresses are what tells the cells apart, so the rows are all different: a row
    that repeats an earlier one is redrawn (in row order, from the same generator) until
    it is new. Every other row keeps its first draw, so where the first draw has no
    repeats A is exactly that draw and models built on it keep their addresses.
    ConfigError when ``slots`` exceeds the number of different rows
    (``distinct_address_rows``)."""
    check_integer("address_seed", seed)
    if not 1 <= nonzeros <= size:
        raise ConfigError(f"address nonzeros must be in [1, address_size={size}], got {nonzeros}")
    possible = distinct_address_rows(size, nonzeros)
    if slots > possible:
        at_nonzeros = smallest_address_size(slots, nonzeros)
        at_default = smallest_address_size(slots)
        fits = [k for k in range(1, size + 1) if distinct_address_rows(size, k) >= slots]
        ways = [f"address_size >= {at_nonzeros} at nonzeros={nonzeros}"]
        if at_default != at_nonzeros:
            ways.append(f"address_size >= {at_default} at the default nonzeros (address_size // 2)")
        if fits:
            ways.append(f"nonzeros in {fits} at address_size={size}")
        raise ConfigError(
            f"{slots} memory slots need {slots} different address rows, but address_size={size} "
            f"at nonzeros={nonzeros} has only {possible} (C({size}, {nonzeros}) positions x "
            f"2^{nonzeros} signs); enough rows: " + "; ".join(ways)
        )
    gen = torch.Generator().manual_seed(seed)
    rows = _signed_rows(slots, size, nonzeros, gen)
    seen, repeats = set(), []
    for i, row in enumerate(rows.tolist()):
        if tuple(row) in seen:
            repeats.append(i)
        seen.add(tuple(row))
    while repeats:  # a block of candidates per round: few rounds even when slots == possible
        for row in _signed_rows(slots, size, nonzeros, gen).tolist():
            if tuple(row) not in seen:
                seen.add(tuple(row))
                rows[repeats.pop(0)] = torch.tensor(row)
                if not repeats:
                    break
    return rows / nonzeros**0.5


class TardisAddressing(nn.Module):
    """The read-logit MLP of eq. 4 with the last-read penalty; shared with ARMIN+TARDIS-addr.

    ``precompute(x (B, T, I)) -> (B, T, m)`` (W_x x_t + b for all steps), then
    ``logits(x_part (B, m), h (B, d_h), memory (B, k, q), counts (B, k), last_read (B, k))
    -> π (B, k)``. m is the MLP width (``mlp_size``).
    """

    def __init__(self, input_size: int, hidden_size: int, memory_width: int, slots: int, mlp_size: int):
        super().__init__()
        check_positive(mlp_size=mlp_size)
        self.input_part = nn.Linear(input_size, mlp_size)  # W_x^γ (+ bias)
        self.hidden_part = nn.Linear(hidden_size, mlp_size, bias=False)  # W_h^γ
        self.usage_part = nn.Linear(slots, mlp_size, bias=False)  # W_u^γ
        self.memory_part = nn.Linear(memory_width, mlp_size, bias=False)  # W_m^γ
        self.score = nn.Linear(mlp_size, 1, bias=False)  # a

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        return self.input_part(x)

    def logits(
        self,
        x_part: torch.Tensor,
        h: torch.Tensor,
        memory: torch.Tensor,
        counts: torch.Tensor,
        last_read: torch.Tensor,
    ) -> torch.Tensor:
        usage = normalise_usage(counts)  # eq. 6
        query = x_part + self.hidden_part(h) + self.usage_part(usage)  # (B, m)
        pre = torch.tanh(query.unsqueeze(1) + self.memory_part(memory))  # (B, k, m)
        pi = self.score(pre).squeeze(-1)  # eq. 4
        return pi - LAST_READ_PENALTY * last_read


def sequential_slots(step: torch.Tensor, slots: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot of slot n for the steps n < k of the filling phase (rows past it are 0):
    step (B,) long -> (B, k), and the (B, 1) mask of rows still filling."""
    column = step.unsqueeze(-1)
    one_hot = (column == _slot_numbers(slots, step.device)).to(dtype)
    return one_hot, column < slots


_SLOT_NUMBERS: dict = {}


def _slot_numbers(slots: int, device) -> torch.Tensor:
    """arange(slots), cached per (slots, device): it is needed at every step."""
    key = (slots, str(device))
    if key not in _SLOT_NUMBERS:
        _SLOT_NUMBERS[key] = torch.arange(slots, device=device)
    return _SLOT_NUMBERS[key]


def write_rows(memory: torch.Tensor, weights: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """M[j] <- (1 - w_j) M[j] + w_j v for every slot j (one-hot w: replace one row), as one
    lerp: memory (B, k, W), weights (B, k), value (B, W) -> (B, k, W). The memory keeps its
    dtype (under autocast the value comes out of a linear layer in a lower one)."""
    dtype = memory.dtype
    return torch.lerp(memory, value.to(dtype).unsqueeze(1), weights.to(dtype).unsqueeze(-1))


# ---------------------------------------------------------------------- cell


class TARDISCell(TemperatureCell):
    """One TARDIS step: ``features, state = cell(x_t, state)``; x_t (B, I) -> g(h_t, r_t)
    (B, fusion_size)."""

    address: torch.Tensor  # buffer: the fixed sparse address rows A

    def __init__(
        self,
        input_size: int,
        hidden_size: int = 120,
        memory_slots: int = 16,
        address_size: int = 4,
        content_size: int = 32,
        read_mlp_size: Optional[int] = None,
        fusion_size: Optional[int] = None,
        addressing: str = "gumbel",
        temperature: str = "learned",
        address_nonzeros: Optional[int] = None,
        address_seed: int = 0,
        layer_norm: bool = False,
        recurrent_dropout: float = 0.0,
    ):
        super().__init__()
        self.input_size = input_size
        check_positive(
            input_size=input_size,
            hidden_size=hidden_size,
            memory_slots=memory_slots,
            address_size=address_size,
            content_size=content_size,
        )
        read_mlp_size = size_or_default(read_mlp_size, max(1, hidden_size // 4))
        fusion_size = size_or_default(fusion_size, hidden_size)
        check_positive(read_mlp_size=read_mlp_size, fusion_size=fusion_size)
        self.addressing = check_choice("addressing", addressing, ADDRESSING_MODES)
        self.temperature = check_choice("temperature", temperature, TEMPERATURES)
        self.hidden_size, self.slots, self.content_size = hidden_size, memory_slots, content_size
        self.width = address_size + content_size  # q
        self.features = fusion_size
        self.inverse_temperature = 1.0  # used with temperature="scheduled"
        d, q = hidden_size, self.width
        nonzeros = size_or_default(address_nonzeros, default_nonzeros(address_size))
        check_positive(address_nonzeros=nonzeros)
        self.register_buffer(
            "address", sparse_addresses(memory_slots, address_size, nonzeros, address_seed)
        )  # A
        self.initial_content = nn.Parameter(torch.zeros(memory_slots, content_size))  # C_0
        self.h0 = nn.Parameter(torch.zeros(hidden_size))
        self.c0 = nn.Parameter(torch.zeros(hidden_size))
        # Pre-activations [f, i, o (3d) | c̃ part (d) | α, β (2)] from x (with bias), h and r
        self.input_gates = nn.Linear(input_size, 4 * d + 2)
        self.hidden_gates = nn.Linear(d, 4 * d + 2, bias=False)
        self.read_gates = nn.Linear(q, 4 * d + 2, bias=False)
        with torch.no_grad():
            self.input_gates.bias[:d].fill_(1.0)  # forget gate
        self.micro_state = nn.Linear(d, content_size, bias=False)  # W_m (eq. 2)
        self.read_head = TardisAddressing(input_size, d, q, memory_slots, read_mlp_size)
        self.temperature_layer = nn.Linear(d, 1)  # w^τ, b^τ
        self.fusion = nn.Linear(d + q, fusion_size)  # g (eq. 11)
        self.recurrent_dropout = check_number(
            "recurrent_dropout", recurrent_dropout, 0.0, 1.0, high_open=True
        )
        check_bool("layer_norm", layer_norm)
        self.ln_gates = nn.LayerNorm(3 * d) if layer_norm else None  # f, i, o
        self.ln_candidate = nn.LayerNorm(d) if layer_norm else None  # c̃
        self.ln_cell = nn.LayerNorm(d) if layer_norm else None  # c in eq. 10
        if self.ln_gates is not None:
            with torch.no_grad():
                self.ln_gates.bias[:d].fill_(1.0)  # the forget-gate bias, after the norm

    def initial_state(self, batch_size: int, device=None, dtype=None) -> TARDISState:
        ref = self.h0
        device = ref.device if device is None else device
        dtype = ref.dtype if dtype is None else dtype
        k = self.slots
        zeros = torch.zeros((), device=device, dtype=dtype).expand(batch_size, k)

        def batch(p: torch.Tensor) -> torch.Tensor:
            return batched(p, batch_size, device, dtype)

        return TARDISState(
            batch(self.h0),
            batch(self.c0),
            batch(self.initial_content),
            zeros,
            zeros,
            torch.zeros(batch_size, dtype=torch.long, device=device),
        )

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        """[gate pre-activations of x (4 d_h + 2) | W_x^γ x + b (m)] for all steps at once."""
        return torch.cat([self.input_gates(x), self.read_head.precompute(x)], dim=-1)

    def memory(self, content: torch.Tensor) -> torch.Tensor:
        """M = [A; C]: (B, k, c) -> (B, k, q)."""
        return torch.cat([self.address.to(content.dtype).expand(content.shape[0], -1, -1), content], dim=-1)

    def _inverse_temperature(self, h: torch.Tensor) -> torch.Tensor:
        if self.temperature == "learned":
            return F.softplus(self.temperature_layer(h)) + 1  # eq. 18 (B, 1)
        return h.new_full((h.shape[0], 1), float(self.inverse_temperature))

    def draws(self, steps: int, batch: int, like: torch.Tensor, read: bool = True):
        """The random numbers of ``steps`` training steps, in the order the step loop uses
        them: Gumbel noise g of the reads (T, B, k) (gumbel and reinforce; None for argmax or
        ``read=False``), logistic noise l of the RESET gates (T, B, 2), and the recurrent-dropout
        masks of c̃ (T, B, d), 0 or 1 / (1 - p) (None without dropout); all None at evaluation.
        One draw E ~ Exp(1) of (T, B (k + 4 + d)) gives them all: g = -log E, l = log E' -
        log E'' (the difference of two Gumbels is logistic), keep = E < -log p (probability
        1 - p). The tensor path draws one step at a time, the compiled path all steps at once:
        torch's exponential_ fills them from the same stream, so both see the same numbers."""
        if not self.training:
            return None, None, None
        k = self.slots if read and self.addressing != "argmax" else 0
        d = self.hidden_size if self.recurrent_dropout else 0
        e = like.new_empty(steps, batch * (k + 4 + d)).exponential_()
        gumbel = -torch.log(e[:, : batch * k]).view(steps, batch, k) if k else None
        pair = torch.log(e[:, batch * k : batch * (k + 4)]).view(steps, batch, 2, 2)
        logistic = pair[..., 1] - pair[..., 0]
        mask = None
        if d:
            p = self.recurrent_dropout
            keep = e[:, batch * (k + 4) :].view(steps, batch, d) < -math.log(p)
            mask = keep.to(like.dtype) * (1.0 / (1.0 - p) if p < 1 else 0.0)
        return gumbel, logistic, mask

    def _read_weights(self, logits: torch.Tensor, h: torch.Tensor, gumbel: Optional[torch.Tensor]):
        """(one-hot w^r (B, k), sampled?) from π and the step's Gumbel noise (B, k): gumbel-ST,
        a sample (Gumbel-max: argmax(π + g) is distributed as softmax(π)) or argmax (eval)."""
        if not self.training or self.addressing == "argmax":
            return sampling.argmax_one_hot(logits), False
        if self.addressing == "reinforce":
            assert gumbel is not None  # drawn for every training step that samples
            return sampling.argmax_one_hot(logits + gumbel), True
        return sampling.gumbel_softmax(
            logits, self._inverse_temperature(h), hard=True, noise=gumbel
        ), False  # eq. 19

    def controller(
        self,
        x_gates: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        r: torch.Tensor,
        noise: Optional[tuple] = None,
    ):
        """Eqs. 7-10: (h_t, c_t, [α, β]) from W x + b (B, 4d+2), h_{t-1}, c_{t-1}, r_t.
        ``noise``: (logistic noise (B, 2), dropout mask (B, d) or None) of this step, drawn by
        :meth:`draws` when not given (training)."""
        d = self.hidden_size
        if noise is None:
            _, logistic, mask = self.draws(1, h.shape[0], h, read=False)
            noise = (None, None) if logistic is None else (logistic[0], None if mask is None else mask[0])
        logistic, mask = noise
        hp, rp = self.hidden_gates(h), self.read_gates(r)
        gates = x_gates[:, : 3 * d] + hp[:, : 3 * d] + rp[:, : 3 * d]
        pre = x_gates[:, 4 * d :] + hp[:, 4 * d :] + rp[:, 4 * d :]
        if logistic is not None:  # gumbel-sigmoid (eq. 8); noise-free at evaluation
            pre = pre + logistic
        resets = torch.sigmoid(pre / RESET_TEMPERATURE)
        alpha, beta = resets[:, :1], resets[:, 1:]
        cand = beta * hp[:, 3 * d : 4 * d] + x_gates[:, 3 * d : 4 * d] + alpha * rp[:, 3 * d : 4 * d]  # eq. 9
        if self.ln_gates is not None and self.ln_candidate is not None:
            gates, cand = self.ln_gates(gates), self.ln_candidate(cand)
        f, i, o = torch.sigmoid(gates).chunk(3, -1)  # eq. 7
        cand = torch.tanh(cand)
        if mask is not None:  # recurrent dropout (training only)
            cand = cand * mask
        c = f * c + i * cand
        c_out = c if self.ln_cell is None else self.ln_cell(c)
        return o * torch.tanh(c_out), c, resets  # eq. 10

    def step(self, inputs: torch.Tensor, state: TARDISState, with_trace: bool = False):
        h, c, content, counts, last_read, steps = state
        x_gates, x_read = inputs[:, : 4 * self.hidden_size + 2], inputs[:, 4 * self.hidden_size + 2 :]
        gumbel, logistic, mask = self.draws(1, h.shape[0], h)
        memory = self.memory(content)  # M_{t-1}
        logits = self.read_head.logits(x_read, h, memory, counts, last_read)  # eq. 4
        read_w, sampled = self._read_weights(logits, h, None if gumbel is None else gumbel[0])
        r = (read_w.unsqueeze(1) @ memory).squeeze(1)  # eq. 1
        noise = (None, None) if logistic is None else (logistic[0], None if mask is None else mask[0])
        h_new, c, resets = self.controller(x_gates, h, c, r, noise)  # eqs. 7-10
        fill, filling = sequential_slots(steps, self.slots, read_w.dtype)
        # algorithm 1: the slot just read, as the straight-through one-hot w^r_t, so its gradient
        # reaches the read (the paper does not say; cut, copy learned far slower: DECISIONS.md)
        write_w = torch.where(filling, fill, read_w)
        content = write_rows(content, write_w, self.micro_state(h_new))  # eq. 2
        features = torch.tanh(self.fusion(torch.cat([h_new, r], dim=-1)))  # eq. 11
        hard = read_w.detach()
        state = TARDISState(h_new, c, content, counts + hard, hard, steps + 1)
        trace = None
        if with_trace:
            trace = TARDISStepTrace(
                read_w.unsqueeze(1),
                write_w.unsqueeze(1),
                torch.softmax(logits, -1).unsqueeze(1),
                r,
                h_new,
                resets,
                self._inverse_temperature(h).squeeze(-1),
                normalise_usage(counts),
                h.new_full((h.shape[0],), float(sampled)),
            )
        return features, state, trace

    # ------------------------------------------------------ the whole-sequence op

    op = tardis_op

    def op_options(self, with_trace: bool, backward: bool) -> TARDISOptions:
        """The op's options: every configuration has them (records.covers says which backends
        run it)."""
        return TARDISOptions(
            mode="argmax" if not self.training or self.addressing == "argmax" else self.addressing,
            learned_temperature=self.temperature == "learned",
            inverse_temperature=float(self.inverse_temperature),
            eps=self.ln_gates.eps if self.ln_gates is not None else 1e-5,
            keep=backward,
            last_read_penalty=LAST_READ_PENALTY,
            reset_temperature=RESET_TEMPERATURE,
            usage_eps=USAGE_EPS,
            trace=with_trace,
        )

    def op_weights(self) -> TARDISWeights:
        head, tau = self.read_head, self.temperature_layer
        ln: list[Optional[torch.Tensor]] = [None] * 6
        norms = (self.ln_gates, self.ln_candidate, self.ln_cell)
        if self.ln_gates is not None:
            ln = [p for norm in norms if norm is not None for p in (norm.weight, norm.bias)]
        return TARDISWeights(
            self.address,
            self.hidden_gates.weight,
            self.read_gates.weight,
            self.micro_state.weight,
            head.memory_part.weight,
            head.hidden_part.weight,
            head.usage_part.weight,
            head.score.weight,
            tau.weight,
            tau.bias,
            *ln,
        )

    def run_op(
        self,
        x: torch.Tensor,
        state: TARDISState,
        options: TARDISOptions,
        weights: TARDISWeights,
        backend: str,
    ):
        """All steps of x (B, T, I) through mannlab.ops.tardis.tardis_sequence on ``backend``, all
        steps' random numbers drawn first (as the step loop draws them); the fusion g of eq. 11
        on the op's features."""
        gumbel, logistic, mask = self.draws(x.shape[1], x.shape[0], x)
        inputs = TARDISInputs(self.input_gates(x), self.read_head.precompute(x), gumbel, logistic, mask)
        features, final, trace = tardis_sequence(inputs, state, weights, options, backend)
        return torch.tanh(self.fusion(features)), final, trace  # eq. 11


# -------------------------------------------------------------------- module


class TARDIS(CellTemperature, SequenceModel):
    """TARDIS (Gulcehre et al. 2017, wormhole connections), shaped like torch.nn.LSTM.

    ``y, state = model(x)`` runs a whole sequence; the memory starts empty (its learned
    initial content C_0) at every call unless a ``state`` is passed in.
    ``model(x, return_trace=True)`` also returns the read weightings and what REINFORCE's
    ``aux_loss`` needs. Evaluation (``model.eval()``) reads the argmax and drops the
    gate noise, so a trained model is deterministic.

    Shapes (B batch, T steps; with ``batch_first=False`` x and y are (T, B, ...)):

    - x: (B, T, input_size)
    - y: logits (B, T, output_size) from the fusion g(h_t, r_t) (eq. 11); with
      ``output_size=None`` g itself, (B, T, fusion_size)
    - state: :class:`TARDISState`: LSTM h, c (B, hidden_size); content C (B, k,
      content_size); read counts and last read (B, k); steps since the memory was
      empty (B,)

    Args:
        input_size (int): features per step of x.
        output_size (int | None): logits per step of y, from a linear layer on g;
            None returns g itself. Default: None.
        hidden_size (int): d_h, the LSTM controller's units. Default: 120 (section 8.3).
        memory_slots (int): k, the memory's cells. Default: 16.
        address_size (int): a, the width of each cell's fixed random sparse address.
            Default: 4.
        content_size (int): c, the width of each cell's content (a micro-state W_m h_t,
            d_m < d_h). Default: 32.
        read_mlp_size (int | None): width of the read MLP's hidden layer (a of eq. 4);
            None: hidden_size // 4. Default: None.
        fusion_size (int | None): width of the output fusion g (eq. 11); None:
            hidden_size. Default: None.
        addressing (str): "gumbel" (gumbel-softmax with straight-through, eqs. 18-19),
            "reinforce" (a one-hot sample; the read MLP learns through ``aux_loss``) or
            "argmax". Default: "gumbel".
        temperature (str): "learned" (1/τ from h, eq. 18) or "scheduled" (1/τ = 1,
            +1 every ``temperature_every`` training steps, up to k - 1). Default:
            "learned".
        temperature_every (int): training steps per increase of the scheduled 1/τ
            (0 keeps it at 1). Default: 200.
        address_nonzeros (int | None): nonzero entries per address row; None: half of
            address_size. Default: None.
        address_seed (int): the seed of the fixed random addresses. Default: 0.
        discount (float): γ of the discounted returns, eq. 16 (the paper gives no
            value). Default: 0.95.
        reward_momentum (float): momentum of the running return moments that normalise
            REINFORCE's reward. Default: 0.9.
        reinforce_weight (float): weight of the REINFORCE term (1 = the paper's cost).
            Default: 1.0.
        aux_weight (float): weight of the auxiliary predictor's loss (eq. 17).
            Default: 1.0.
        layer_norm (bool): layer norm on the gates' pre-activations and on c_t (section
            8.1's language-modelling option). Default: False.
        recurrent_dropout (float): probability of dropping a unit of the candidate c̃_t
            (Semeniuta et al.; training only). Default: 0.0.
        batch_first (bool): True: x and y are (B, T, features); False: (T, B, features).
            Default: True.
    """

    cell: TARDISCell

    #: aux_loss takes ``score`` (logits -> per-step NLL on the targets), see training/loop.py
    aux_loss_scores = True

    def __init__(
        self,
        input_size: int,
        output_size: Optional[int] = None,
        hidden_size: int = 120,
        memory_slots: int = 16,
        address_size: int = 4,
        content_size: int = 32,
        read_mlp_size: Optional[int] = None,
        fusion_size: Optional[int] = None,
        addressing: str = "gumbel",
        temperature: str = "learned",
        temperature_every: int = 200,
        address_nonzeros: Optional[int] = None,
        address_seed: int = 0,
        discount: float = 0.95,
        reward_momentum: float = 0.9,
        reinforce_weight: float = 1.0,
        aux_weight: float = 1.0,
        layer_norm: bool = False,
        recurrent_dropout: float = 0.0,
        batch_first: bool = True,
    ):
        check_model_size("TARDIS", locals())  # refuse sizes that cannot fit, before building
        cell = TARDISCell(
            input_size,
            hidden_size,
            memory_slots,
            address_size,
            content_size,
            read_mlp_size,
            fusion_size,
            addressing,
            temperature,
            address_nonzeros,
            address_seed,
            layer_norm,
            recurrent_dropout,
        )
        super().__init__(input_size, output_size, cell.features, batch_first)
        self.cell = cell
        check_positive(temperature_every=temperature_every)
        self.temperature_every = temperature_every
        self.discount = check_number("discount", discount, 0.0, 1.0)
        self.reinforce_weight = check_number("reinforce_weight", reinforce_weight, 0.0)
        self.aux_weight = check_number("aux_weight", aux_weight, 0.0)
        reward_momentum = check_number("reward_momentum", reward_momentum, 0.0, 0.999)
        self.uses_aux_loss = addressing == "reinforce"
        if self.uses_aux_loss and output_size is None:
            raise ConfigError(
                "addressing='reinforce' needs output_size (the auxiliary "
                "predictor of eq. 17 predicts the targets)"
            )
        self.aux_read: Optional[nn.Linear] = None  # W^o_r
        self.aux_input: Optional[nn.Linear] = None  # W^o_x
        if self.uses_aux_loss and output_size is not None:
            self.aux_read = nn.Linear(cell.width, output_size)
            self.aux_input = nn.Linear(input_size, output_size, bias=False)
        self.return_stats = sampling.RunningMoments(momentum=reward_momentum)

    @property
    def temperature_schedule(self):
        """(every, maximum) of 1/τ for begin_step, or None (learned τ)."""
        if self.cell.temperature != "scheduled":
            return None
        return self.temperature_every, max(1, self.cell.slots - 1)

    def _run(self, x: torch.Tensor, state: Any, with_trace: bool):
        features, state, steps = run_sequence(self.cell, x, state, with_trace)
        return features, state, (TARDISTrace._make((*steps, x)) if with_trace else None)

    def aux_logits(self, trace: TARDISTrace) -> torch.Tensor:
        """W^o_r r̄_t + W^o_x x_t (eq. 17) for every step, (B, T, O); r̄ carries no gradient."""
        if self.aux_read is None or self.aux_input is None:
            raise ConfigError("aux_logits exists only with addressing='reinforce'")
        return self.aux_read(trace.read_vectors.detach()) + self.aux_input(trace.inputs.detach())

    def aux_loss(
        self,
        trace: TARDISTrace,
        step_nll: torch.Tensor,
        outputs_per_step: Optional[int] = None,
        reducer: Optional[sampling.Reducer] = None,
        score: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> torch.Tensor:
        """The estimator's terms (0 for "gumbel" and "argmax"); see :meth:`aux_terms`."""
        terms = self.aux_terms(trace, step_nll, score, outputs_per_step, reducer)
        return sum(terms.values(), step_nll.new_zeros(()))

    def aux_terms(
        self,
        trace: TARDISTrace,
        step_nll: torch.Tensor,
        score: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        outputs_per_step: Optional[int] = None,
        reducer: Optional[sampling.Reducer] = None,
    ) -> dict[str, torch.Tensor]:
        """REINFORCE with the auxiliary cost (section 3.1), means over the batch.

        step_nll (B, T): the task's per-step NLL (only its shape and scored steps are
        used: the reward is the auxiliary one). score: logits (B, T, O) -> per-step NLL
        (B, T) on the targets (the training loop passes it). Terms:

        - ``auxiliary``: aux_weight sum_t NLL_aux(t) / S, trains W^o_r, W^o_x only
        - ``reinforce``: -reinforce_weight sum_t A_t log w̄^r_t[j_t] / S with
          R'_j = -NLL_aux(j) (eq. 17), G_t = sum_{j>=t} γ^{j-t} (R'_j - b_j) (eq. 16) and
          A_t = (G_t - m) / σ from the running moments m, σ² of G over earlier minibatches
          (variance normalisation; this minibatch's returns enter them afterwards, in
          training mode, so they never centre themselves). The paper does not say how b_j is made: here it is
          the mean of R'_j over the other sequences of the minibatch that score step j
          (leave-one-out, so unbiased; 0 at batch 1, where m alone centres G)

        S is the mean number of terms the task loss averages over per sequence: scored
        steps times ``outputs_per_step`` (output bits for a BCE task, the default; 1 for a
        categorical task), so the terms keep the paper's ratio to the NLL. ``reducer``: the
        batch statistics (S, b_j, m and σ²) over the global batch (see Model.aux_loss).
        """
        scored = self._scored_outputs(trace, TARDISTrace, step_nll, outputs_per_step, reducer)  # S
        sampled = trace.sampled.amax(1)  # (B,)
        if not self.uses_aux_loss or not bool(sampled.any()):
            return {}
        if score is None:
            raise ValueError(
                "TARDIS with addressing='reinforce' needs score= (logits -> "
                "per-step NLL on the targets) for the auxiliary reward of eq. 17"
            )
        aux_nll = score(self.aux_logits(trace))  # (B, T)
        rewards, scored_steps = -aux_nll.detach(), (step_nll > 0)  # eq. 17
        baseline = sampling.leave_one_out_mean(rewards, scored_steps, reducer)  # b_j
        returns = sampling.discounted_returns((rewards - baseline) * scored_steps, self.discount)  # eq. 16
        # moments of earlier minibatches (evaluation never moves them)
        advantage = self.return_stats.advantage(returns, sampled > 0, update=self.training, reducer=reducer)
        log_p = sampling.log_prob(trace.read_weights.detach(), trace.read_probs).sum(-1)  # (B, T)
        surrogate = sampling.reinforce_surrogate(log_p, advantage).sum(1) * sampled
        return {
            "auxiliary": self.aux_weight * aux_nll.sum(1).mean() / scored,
            "reinforce": self.reinforce_weight * surrogate.mean() / scored,
        }
