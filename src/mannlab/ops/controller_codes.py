"""Which controllers the NTM's and DNC's whole-sequence kernels implement, as the integer
codes the kernels read (ops/ntm/kernels.py and ops/dnc/kernels.py define the same values).

    controller_code(controller) -> (kind, activation, partially non-recurrent) | None
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
