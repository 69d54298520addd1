"""The typed records of the NTM's whole-sequence op (``mannlab.ops.ntm.ntm_sequence``): what
goes in (the state, the weights, the options), what comes out (features, final state, trace)
and what the forward keeps for the backward. Every backend (numba, Triton, the reference
loop) reads and returns these by field name; no caller sees a kernel's argument order.

Sizes: B batch, T steps, d_h controller size, G its pre-activation width (4 d_h for the LSTM,
d_h otherwise), R read heads, H write heads, N slots, W width, S shifts, P head parameters.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from mannlab.ops.controller_codes import ELMAN, FNN, LSTM, TANH

__all__ = [
    "ELMAN",
    "FNN",
    "TANH",
    "LSTM",
    "NTMOptions",
    "NTMRecords",
    "NTMResult",
    "NTMState",
    "NTMStates",
    "NTMTrace",
    "NTMWeights",
]


class NTMState(NamedTuple):
    """The recurrent state between steps and segments, as the model returns it and the op,
    every backend and the pictures read it: the controller's state (``()`` for the
    feed-forward controller, ``(h,)`` for Elman, ``(h, c)`` for the LSTM, each (B, d_h)),
    the memory (B, N, W), the read vectors (B, R, W), the read weightings (B, R, N) and the
    write weightings (B, H, N) of the last step."""

    controller: Any
    memory: torch.Tensor
    read_vectors: torch.Tensor
    read_weights: torch.Tensor
    write_weights: torch.Tensor


class NTMWeights(NamedTuple):
    """The weights the time loop multiplies by, untransposed (out, in). The input projection
    W_x x_t + b is not here: the caller computes it for all steps at once (``x_proj``)."""

    read_weight: torch.Tensor  # W_r (G, R W)
    recurrent_weight: Optional[torch.Tensor]  # W_h (G, d_h); None for the feed-forward controller
    head_weight: torch.Tensor  # W_p (P, d_h): every head's raw parameters from h_t
    head_bias: torch.Tensor  # b_p (P,)


class NTMOptions(NamedTuple):
    """What is not a tensor: the controller ``kind`` and the feed-forward controller's
    ``activation`` (codes of ops/controller_codes.py), whether it is partially non-recurrent
    (eqs. 9-13), memory width W, number of shifts S, whether a backward follows (``backward``:
    keep every step) and whether the trace is returned."""

    kind: int
    activation: int
    pnr: bool
    width: int
    num_shifts: int
    backward: bool
    trace: bool


class NTMTrace(NamedTuple):
    """Per-step internals (B, T, ...), stacked over time; from the op they carry no gradient."""

    read_weights: torch.Tensor  # (B, T, R, N)  w^r_t
    write_weights: torch.Tensor  # (B, T, H, N)  w^w_t
    read_vectors: torch.Tensor  # (B, T, R, W)  r_t
    erase_vectors: torch.Tensor  # (B, T, H, W)  e_t
    add_vectors: torch.Tensor  # (B, T, H, W)  a_t
    key_strengths: torch.Tensor  # (B, T, H + R) beta, write heads first
    interpolation_gates: torch.Tensor  # (B, T, H + R) g
    shift_weights: torch.Tensor  # (B, T, H + R, S) s
    sharpening: torch.Tensor  # (B, T, H + R) gamma
    memory: torch.Tensor  # (B, T, N, W) M_t after the write


class NTMResult(NamedTuple):
    """``features, state, trace = ntm_sequence(...)``: H^o_t = [h_out; r_t] (B, T, d_h + R W),
    the final :class:`NTMState`, the :class:`NTMTrace` or None."""

    features: torch.Tensor
    state: NTMState
    trace: Optional[NTMTrace]


class NTMStates(NamedTuple):
    """The state as the kernels step it: the controller's h and c (zeros where it keeps none),
    the reads side by side (B, R W), the memory and the weightings. One row (B, ...) at the
    autograd boundary; over time (T + 1, B, ...) what a forward keeps for its backward, row 0
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


def covers(options: NTMOptions, weights: NTMWeights, backend: str) -> bool:
    """Every backend implements the feed-forward (tanh), Elman, LSTM and partially
    non-recurrent controllers, any heads and shifts, with or without the trace."""
    return options.activation == TANH


def pays(options: NTMOptions, weights: NTMWeights, batch: int) -> bool:
    """The numba kernels beat the step loop at every batch measured (benchmarks/README.md)."""
    return True
