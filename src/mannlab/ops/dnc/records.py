"""The typed records of the DNC's whole-sequence op (``mannlab.ops.dnc.dnc_sequence``): what goes
in (the state, the weights, the options) and what comes out (features, final state). Every
backend (numba, the reference loop) reads and returns these by field name; no caller sees a
kernel's argument order.

Sizes: B batch, T steps, H controller size, G its pre-activation width (4 H for the LSTM, H
otherwise), R read heads, N slots, W width, P the interface vector's width.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from mannlab.ops.controller_codes import ELMAN, FNN, LSTM, RELU, SIGMOID, TANH

__all__ = [
    "ELMAN",
    "FNN",
    "LSTM",
    "RELU",
    "SIGMOID",
    "TANH",
    "DNCOptions",
    "DNCResult",
    "DNCSequenceState",
    "DNCWeights",
    "BACKENDS",
    "triton_covers",
]

#: which implementation runs the op: the numba kernels (CPU), the Triton kernels (GPU; on CPU
#: tensors in Triton's interpreter) or the plain tensor loop of reference.py
BACKENDS = ("numba", "triton", "reference")


class DNCSequenceState(NamedTuple):
    """The recurrent state between steps. ``hidden`` and ``cell`` (B, H) are zeros where the
    controller has none (the feed-forward one has neither, Elman no cell); they pass through
    unchanged there."""

    hidden: torch.Tensor  # h (B, H)
    cell: torch.Tensor  # c (B, H), the LSTM's
    reads: torch.Tensor  # r (B, R W), the read heads' vectors side by side
    memory: torch.Tensor  # M (B, N, W)
    read_weights: torch.Tensor  # w^r (B, R, N)
    write_weights: torch.Tensor  # w^w (B, N)
    usage: torch.Tensor  # u (B, N)
    precedence: torch.Tensor  # p (B, N)
    links: torch.Tensor  # L (B, N, N)


class DNCWeights(NamedTuple):
    """The weights the time loop multiplies by, untransposed (out, in). The input projection
    W_x x_t + b is not here: the caller computes it for all steps at once (``x_proj``)."""

    read_weight: torch.Tensor  # W_r (G, R W)
    recurrent_weight: Optional[torch.Tensor]  # W_h (G, H); None for the feed-forward controller
    interface_weight: torch.Tensor  # W_xi (P, H)
    interface_bias: torch.Tensor  # b_xi (P,)


class DNCOptions(NamedTuple):
    """What is not a tensor: the controller ``kind`` (FNN, ELMAN, LSTM of
    ops/controller_codes.py), the feed-forward controller's ``activation`` (TANH, SIGMOID,
    RELU; TANH for the recurrent kinds), whether it is partially non-recurrent (eqs. 9-13),
    and whether a backward follows (``backward``: keep what it reads)."""

    kind: int
    activation: int
    pnr: bool
    backward: bool


class DNCResult(NamedTuple):
    """``features, state = dnc_sequence(...)``: H^o_t = [h_out; r_t] (B, T, H + R W) and the
    final :class:`DNCSequenceState`."""

    features: torch.Tensor
    state: DNCSequenceState


def triton_covers(options: DNCOptions) -> bool:
    """Whether the Triton kernels implement these options: every controller the numba kernels
    implement (fnn with tanh, sigmoid or relu, Elman, LSTM, each partially non-recurrent or
    not), any read heads; an unknown controller or activation code is refused."""
    return options.kind in (FNN, ELMAN, LSTM) and options.activation in (TANH, SIGMOID, RELU)
