"""Which controllers the NTM's and DNC's whole-sequence kernels implement, as the integer
codes the kernels read (ops/ntm/kernels.py and ops/dnc/kernels.py define the same values).

    controller_code(controller) -> (kind, activation, partially non-recurrent) | None
    controller_tensors(controller_state, kind, like, hidden_size) -> (h, c)
    controller_state(kind, h, c) -> the controller's own state tuple
"""

from __future__ import annotations

import torch
from torch import nn

from mannlab.nn.controllers import (
    ElmanController,
    FNNController,
    LSTMController,
    PNRElmanController,
    PNRLSTMController,
)

#: Controller kinds and feed-forward activations.
FNN, ELMAN, LSTM = 0, 1, 2
TANH, SIGMOID, RELU = 0, 1, 2
ACTIVATIONS = {torch.tanh: TANH, torch.sigmoid: SIGMOID, torch.relu: RELU}
_KINDS = {
    FNNController: (FNN, False),
    ElmanController: (ELMAN, False),
    PNRElmanController: (ELMAN, True),
    LSTMController: (LSTM, False),
    PNRLSTMController: (LSTM, True),
}


def controller_code(controller: nn.Module) -> tuple[int, int, bool] | None:
    """(kind, activation, partially non-recurrent) of a controller the kernels implement,
    or None (the GRU, subclasses, unknown activations: the tensor path). The activation is
    TANH for the recurrent kinds."""
    kind = _KINDS.get(type(controller))
    if kind is None:
        return None
    if isinstance(controller, FNNController):
        activation = ACTIVATIONS.get(controller.activation)
    else:
        activation = TANH
    if activation is None:
        return None
    return kind[0], activation, kind[1]


def controller_tensors(
    state: tuple, kind: int, like: torch.Tensor, hidden_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A controller's state as the kernels step it, (h, c) (B, d_h): zeros where the controller
    keeps none (the feed-forward one neither, Elman no c); ``like`` gives the batch, dtype and
    device of the zeros."""
    zeros = like.new_zeros(like.shape[0], hidden_size)
    return state[0] if kind != FNN else zeros, state[1] if kind == LSTM else zeros


def controller_state(kind: int, hidden: torch.Tensor, cell: torch.Tensor) -> tuple:
    """The controller's own state from the kernels' (h, c): () for the feed-forward
    controller, (h,) for Elman, (h, c) for the LSTM."""
    return () if kind == FNN else (hidden, cell) if kind == LSTM else (hidden,)
