"""Baseline LSTM with the library's calling convention and output head.

Hochreiter & Schmidhuber (1997); the "LSTM" column of every paper's tables.
Uses the fused torch.nn.LSTM, so it is also the speed reference the memory
models are compared against.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from mannlab.models.base import SequenceModel, check_positive


class LSTMState(NamedTuple):
    """Hidden and cell states, each (num_layers, B, hidden_size) as in torch.nn.LSTM."""
    hidden: torch.Tensor
    cell: torch.Tensor


class LSTMTrace(NamedTuple):
    """Per-step hidden states of the last layer (B, T, hidden_size)."""
    hidden: torch.Tensor


class LSTM(SequenceModel):
    """``y, state = LSTM(input_size, output_size, hidden_size=100)(x)``; x (B, T, input_size).

    The initial state is a learned bias (zero at initialisation), reset for
    every call unless a state is passed in.
    """

    def __init__(self, input_size: int, output_size: Optional[int] = None, hidden_size: int = 100,
                 num_layers: int = 1, batch_first: bool = True):
        check_positive(hidden_size=hidden_size, num_layers=num_layers)
        super().__init__(input_size, output_size, hidden_size, batch_first)
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.h0 = nn.Parameter(torch.zeros(num_layers, 1, hidden_size))
        self.c0 = nn.Parameter(torch.zeros(num_layers, 1, hidden_size))

    def initial_state(self, batch_size: int, device=None, dtype=None) -> LSTMState:
        return LSTMState(self.h0.expand(-1, batch_size, -1).contiguous(),
                         self.c0.expand(-1, batch_size, -1).contiguous())

    def run(self, x: torch.Tensor, state: LSTMState, with_trace: bool):
        out, (h, c) = self.lstm(x, tuple(state))
        return out, LSTMState(h, c), LSTMTrace(out) if with_trace else None
