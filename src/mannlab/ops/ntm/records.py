"""The typed records of the NTM's whole-sequence op (``mannlab.ops.ntm.ntm_sequence``): what
goes in (the state, the weights, the options), what comes out (features, final state, trace)
and what the forward keeps for the backward. Every backend (numba, Triton, the reference
loop) reads and returns these by field name; no caller sees a kernel's argument order.

Sizes: B batch, T steps, d_h controller size, G its pre-activation width (4 d_h for the LSTM,
d_h otherwise), R read heads, H write heads, N slots, W width, S shifts, P head parameters.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from mannlab.ops.controller_codes import ELMAN, FNN, LSTM

__all__ = [
    "ELMAN",
    "FNN",
    "LSTM",
    "NTMOptions",
    "NTMRecords",
    "NTMResult",
    "NTMSequenceState",
    "NTMSequenceTrace",
    "NTMStates",
    "NTMWeights",
]


class NTMSequenceState(NamedTuple):
    """The recurrent state between steps. ``hidden`` and ``cell`` (B, d_h) are zeros where the
    controller has none (the feed-forward one has neither, Elman no cell)."""

    hidden: torch.Tensor  # h (B, d_h)
    cell: torch.Tensor  # c (B, d_h), the LSTM's
    reads: torch.Tensor  # r (B, R W), the read heads' vectors side by side
    memory: torch.Tensor  # M (B, N, W)
    read_weights: torch.Tensor  # w^r (B, R, N)
    write_weights: torch.Tensor  # w^w (B, H, N)


class NTMWeights(NamedTuple):
    """The weights the time loop multiplies by, untransposed (out, in). The input projection
    W_x x_t + b is not here: the caller computes it for all steps at once (``x_proj``)."""

    read_weight: torch.Tensor  # W_r (G, R W)
    recurrent_weight: Optional[torch.Tensor]  # W_h (G, d_h); None for the feed-forward controller
    head_weight: torch.Tensor  # W_p (P, d_h): every head's raw parameters from h_t
    head_bias: torch.Tensor  # b_p (P,)


class NTMOptions(NamedTuple):
    """What is not a tensor: the controller ``kind`` (FNN, ELMAN, LSTM of
    ops/controller_codes.py; the feed-forward one is tanh), whether it is partially
    non-recurrent (eqs. 9-13), memory width W, number of shifts S, whether a backward follows
    (``backward``: keep every step) and whether the trace is returned."""

    kind: int
    pnr: bool
    width: int
    num_shifts: int
    backward: bool
    trace: bool


class NTMSequenceTrace(NamedTuple):
    """Per-step values (B, T, ...), for inspection: they carry no gradient."""

    reads: torch.Tensor  # r_t (B, T, R W)
    memory: torch.Tensor  # M_t (B, T, N, W) after the write
    read_weights: torch.Tensor  # w^r_t (B, T, R, N)
    write_weights: torch.Tensor  # w^w_t (B, T, H, N)
    erase: torch.Tensor  # e (B, T, H, W)
    add: torch.Tensor  # a (B, T, H, W)
    beta: torch.Tensor  # key strengths (B, T, H + R), write heads first
    gate: torch.Tensor  # interpolation gates g (B, T, H + R)
    shift: torch.Tensor  # shift weightings s (B, T, H + R, S)
    gamma: torch.Tensor  # sharpening exponents (B, T, H + R)


class NTMResult(NamedTuple):
    """``features, state, trace = ntm_sequence(...)``: H^o_t = [h_out; r_t] (B, T, d_h + R W),
    the final :class:`NTMSequenceState`, the :class:`NTMSequenceTrace` or None."""

    features: torch.Tensor
    state: NTMSequenceState
    trace: Optional[NTMSequenceTrace]


class NTMStates(NamedTuple):
    """The states over time a forward keeps for its backward, time-major (T + 1, B, ...): row 0
    the initial state, row t + 1 the state after step t."""

    hidden: torch.Tensor
    cell: torch.Tensor
    reads: torch.Tensor
    memory: torch.Tensor
    read_weights: torch.Tensor
    write_weights: torch.Tensor


class NTMRecords(NamedTuple):
    """The per-step values (T, B, ...) a forward keeps besides the states: the controller's
    activated gates (T, B, G), the raw head parameters (T, B, P) and the interpolated
    weightings w^g of every head (T, B, H + R, N), which the backward's circular shift reads
    at shifted slots. (The numba kernels keep more: their own tuple, ops/ntm/kernels.py.)"""

    gates: torch.Tensor
    params: torch.Tensor
    gated: torch.Tensor
