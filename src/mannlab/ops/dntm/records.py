"""The typed records of the D-NTM's whole-sequence op (mannlab.ops.dntm.dntm_sequence): what goes
in, what comes out, by name. :class:`DNTMState` (with :class:`DNTMLocation` and
:class:`DNTMWriteCounts`), :class:`DNTMStepTrace` and :class:`DNTMTrace` are the model's own
(mannlab.models.dntm re-exports them): the op, every backend and the model's step loop speak
them; :class:`DNTMStateRows` is the state as the kernels step it. Paper symbols as in
mannlab.models.dntm: d_h the controller's size, N' cells (N + 1 with the NOP cell), A (N' x d_a)
the address part, C (N' x d_c) the content part, W = d_a + d_c, R read and H write heads,
K = R + H, J addressing steps, K_w the width of a write key (W with write keys over [A; C], d_c
over C alone), P_c the controller's pre-activation width (3 d_h for the GRU, d_h for the
feed-forward controller).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from mannlab.ops.controller_codes import TANH

#: the addressing modes, in the order of the kernels' integer codes (kernels.py: SOFT = 0, ...):
#: soft weightings; one-hot samples (REINFORCE's, section 4); one-hot argmax; one-hot samples
#: with the gradient of the relaxed sample (straight-through Gumbel-softmax)
MODES = ("soft", "sample", "argmax", "gumbel")
#: the modes that take Exp(1) draws
NOISY_MODES = ("sample", "gumbel")
#: what the write heads' keys are compared with: the content part C, or the memory [A; C] (eq. 10)
WRITE_KEYS = ("content", "memory")
#: how a write head picks its cells: by its learned weighting (eqs. 8-13), or sequentially (one
#: write head: cell n for the n-th write while cells remain, then the cell read least so far)
WRITES = ("learned", "sequential")
#: ε of the similarity S(x, y) = x . y / (|x| |y| + ε) (eqs. 10-11)
SIMILARITY_EPS = 1e-6
#: the LRU moving average, v_t = LRU_DECAY v_{t-1} + (1 - LRU_DECAY) z_t (section 3.3)
LRU_DECAY = 0.1


def head_sizes(read_heads: int, write_heads: int, width: int, write_key_size: int, content_size: int) -> list:
    """The blocks of the head layer's output W_p h_t + b_p, grouped by activation:
    [k^r (R W) | k^w (H K_w) | β (R + H) | γ (R + H) | e (H d_c) | α_h (H) | W_m h + b_m (H d_c)]."""
    R, H = read_heads, write_heads
    return [R * width, H * write_key_size, R + H, R + H, H * content_size, H, H * content_size]


class DNTMLocation(NamedTuple):
    """The previous final weightings w_{t-1} of NTM eq. 7, with location_shifts > 0 (the step
    loop's only: the op has no location-based addressing)."""

    read: torch.Tensor  # (B, R, N')
    write: torch.Tensor  # (B, H, N')


class DNTMWriteCounts(NamedTuple):
    """What writes="sequential" picks its cell from: the writes made so far in the episode
    and the reads of each cell so far (the sum of the read weightings, one-hot when discrete)."""

    written: torch.Tensor  # (B,)
    reads: torch.Tensor  # (B, N')


class DNTMState(NamedTuple):
    """The recurrent state between steps and segments, as the model returns it and the op and
    every backend read it: the controller's state (``(h,)`` (B, d_h) for the GRU, ``()`` for
    the feed-forward controller), content part C (B, N', d_c), read vectors φ (B, R, d_a +
    d_c), the LRU averages v of the read (B, R, N') and write (B, H, N') heads, with
    location_shifts > 0 a :class:`DNTMLocation` and with writes="sequential" a
    :class:`DNTMWriteCounts` (else ``()``, the default, as the feed-forward controller's empty
    state, so code that builds the first five fields keeps working). The address part A is a
    parameter, not state."""

    controller: Any
    content: torch.Tensor
    read_vectors: torch.Tensor
    read_lru: torch.Tensor
    write_lru: torch.Tensor
    location: Any = ()
    counts: Any = ()


class DNTMStepTrace(NamedTuple):
    """Per-step internals: (B, ...) from one step of the model's step loop, stacked over time
    (B, T, ...) from the op. With J addressing steps the head axis holds J * heads entries,
    addressing step major (step 1's heads first). Straight-through's one-hots carry no gradient
    here (their gradient is the step's); with sequential writes the write weightings are the
    chosen cells' one-hots, without a gradient."""

    read_weights: torch.Tensor  # (B, J*R, N')  w used for reading (one-hot if discrete)
    write_weights: torch.Tensor  # (B, J*H, N')  u used for writing
    read_probs: torch.Tensor  # (B, J*R, N')  soft w (the distribution sampled from)
    write_probs: torch.Tensor  # (B, J*H, N')  soft u
    read_vectors: torch.Tensor  # (B, R, d_a + d_c)  φ_t of the last addressing step
    erase_vectors: torch.Tensor  # (B, J*H, d_c)  e_t
    candidates: torch.Tensor  # (B, J*H, d_c)  c̄_t
    input_gates: torch.Tensor  # (B, J*H)  α_t
    key_strengths: torch.Tensor  # (B, J*(R+H))  β, read heads first in each step
    lru_gates: torch.Tensor  # (B, J*(R+H))  γ
    hidden: torch.Tensor  # (B, d_h)  h_t (controller output to the features)
    sampled: torch.Tensor  # (B,)  1 where the weights were sampled (REINFORCE)
    memory: torch.Tensor  # (B, N', d_a + d_c)  M_t = [A; C_t] after the write


class DNTMTrace(NamedTuple):
    """What the model returns with ``return_trace=True``: :class:`DNTMStepTrace` stacked over
    time (B, T, ...), plus the input sequence."""

    read_weights: torch.Tensor
    write_weights: torch.Tensor
    read_probs: torch.Tensor
    write_probs: torch.Tensor
    read_vectors: torch.Tensor
    erase_vectors: torch.Tensor
    candidates: torch.Tensor
    input_gates: torch.Tensor
    key_strengths: torch.Tensor
    lru_gates: torch.Tensor
    hidden: torch.Tensor
    sampled: torch.Tensor
    memory: torch.Tensor
    inputs: torch.Tensor  # (B, T, I)  x, for the baseline and next-input prediction


class DNTMInputs(NamedTuple):
    """Per-step inputs, computed or drawn before the op runs.

    projected: (B, T, P_c + H (d_c + 1)) the input's share of every step,
        [W x_t + b (P_c, the controller's) | W_x x_t (H d_c, eq. 4) | v_α^T x_t (H, eq. 3)]
        (DNTMCell.precompute)
    draws: (T J, B K' N') Exp(1) draws E of the modes "sample" and "gumbel", else None; per
        time and addressing step the read heads' (B, R, N') then, with learned writes, the
        write heads' (B, H, N') (K' = R + H; K' = R with sequential writes). A sample is the
        cell argmax_i w_i / E_i, the one torch.multinomial(w, 1) draws from the same E.
    """

    projected: torch.Tensor
    draws: Optional[torch.Tensor] = None


class DNTMStateRows(NamedTuple):
    """The :class:`DNTMState` as the kernels step it (:func:`state_rows`): the GRU's h (B, d_h)
    (None for the feed-forward controller), the content part C (B, N', d_c), the read vectors φ
    side by side (B, R W), the LRU averages v of the read (B, R, N') and write (B, H, N') heads
    and, with sequential writes (else None), the writes made so far (B,) and the reads of each
    cell so far (B, N')."""

    hidden: Optional[torch.Tensor]
    content: torch.Tensor
    read_vectors: torch.Tensor
    read_lru: torch.Tensor
    write_lru: torch.Tensor
    written: Optional[torch.Tensor] = None
    reads: Optional[torch.Tensor] = None


class DNTMWeights(NamedTuple):
    """The weights the time loop multiplies by, as nn.Linear stores them (out, in); the input
    projections are in DNTMInputs.projected.

    read_weight: W_r (P_c, R W), the controller's weight on φ_{t-1}
    recurrent_weight, recurrent_bias: the GRU's W_h (3 d_h, d_h) and b_h (3 d_h), gates in the
        order (r, u, n) as torch.nn.GRUCell; None for the feed-forward (tanh) controller
    head_weight, head_bias: the head layer W_p (P, d_h), b_p (P), its blocks as :func:`head_sizes`
    address: A (N', d_a)
    """

    read_weight: torch.Tensor
    recurrent_weight: Optional[torch.Tensor]
    recurrent_bias: Optional[torch.Tensor]
    head_weight: torch.Tensor
    head_bias: torch.Tensor
    address: torch.Tensor


class DNTMOptions(NamedTuple):
    """mode: one of :data:`MODES`; addressing_steps J; lru: LRU addressing (eqs. 12-13);
    nop: the last cell is the NOP cell (reads return nothing there, writes are dropped);
    write_keys: one of :data:`WRITE_KEYS`; writes: one of :data:`WRITES`; inverse_temperature:
    1/τ of mode "gumbel"; keep: keep what the backward reads (False: inference, one step's
    scratch); trace: return the per-step internals (:class:`DNTMStepTrace`); similarity_eps,
    lru_decay: the constants of eqs. 10-11 and 13; activation: the feed-forward controller's
    (a code of ops/controller_codes.py; every backend implements tanh only)."""

    mode: str = "soft"
    addressing_steps: int = 1
    lru: bool = True
    nop: bool = False
    write_keys: str = "memory"
    writes: str = "learned"
    inverse_temperature: float = 1.0
    keep: bool = True
    trace: bool = True
    similarity_eps: float = SIMILARITY_EPS
    lru_decay: float = LRU_DECAY
    activation: int = TANH


class DNTMResult(NamedTuple):
    """``features, state, trace = dntm_sequence(...)``: [h_t; φ_t] (B, T, d_h + R W) of the
    last addressing step, the final :class:`DNTMState`, the :class:`DNTMStepTrace` stacked over
    time (with ``options.trace``) or None."""

    features: torch.Tensor
    state: DNTMState
    trace: Optional[DNTMStepTrace]


def state_rows(state: DNTMState) -> DNTMStateRows:
    """The kernels' rows of a :class:`DNTMState` (no location-based addressing)."""
    counts = state.counts
    return DNTMStateRows(
        hidden=state.controller[0] if state.controller else None,
        content=state.content,
        read_vectors=state.read_vectors.flatten(1),
        read_lru=state.read_lru,
        write_lru=state.write_lru,
        written=counts.written if counts else None,
        reads=counts.reads if counts else None,
    )


def model_state(rows: DNTMStateRows, start: DNTMState) -> DNTMState:
    """The :class:`DNTMState` of the kernels' rows, shaped as ``start`` (the state the pass
    began from: its read heads and whether it counts writes)."""
    counts: Any = ()
    if start.counts:
        assert rows.written is not None and rows.reads is not None  # counted with sequential writes
        counts = DNTMWriteCounts(rows.written, rows.reads)
    return DNTMState(
        controller=() if rows.hidden is None else (rows.hidden,),
        content=rows.content,
        read_vectors=rows.read_vectors.unflatten(1, start.read_vectors.shape[1:]),
        read_lru=rows.read_lru,
        write_lru=rows.write_lru,
        counts=counts,
    )


def step_trace(features: torch.Tensor, start: DNTMState, options: DNTMOptions, **internals) -> DNTMStepTrace:
    """The op's trace, stacked over time: h_t and φ_t as views of the features (B, T, d_h +
    R W), whether the weightings were sampled, and the backend's ``internals`` by name (the
    other fields of :class:`DNTMStepTrace`)."""
    B, T = features.shape[:2]
    heads, width = start.read_vectors.shape[1:]
    hidden_size = features.shape[-1] - heads * width
    return DNTMStepTrace(
        hidden=features[..., :hidden_size],
        read_vectors=features[..., hidden_size:].unflatten(-1, (heads, width)),
        sampled=features.new_full((B, T), float(options.mode == "sample")),
        **internals,
    )


def covers(options: DNTMOptions, weights: DNTMWeights, backend: str) -> bool:
    """Every backend implements the GRU and the feed-forward tanh controller (any heads, LRU,
    NOP cell, write keys and addressing mode, with or without the trace); numba, the reference
    and the compiled step any J and either writes, the Triton kernels J = 1 and learned
    writes."""
    if options.activation != TANH:
        return False
    return backend != "triton" or (options.addressing_steps == 1 and options.writes == "learned")


def pays(options: DNTMOptions, weights: DNTMWeights, batch: int) -> bool:
    """The numba kernels measured at least as fast as the step loop at every size tried
    (mannlab.models.dntm's docstring)."""
    return True
