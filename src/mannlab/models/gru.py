"""Baseline GRU with the library's calling convention and output head.

Cho et al. (2014). It is the encoder of Single-Stream Temporal Action Proposals (SST, Buch
et al. CVPR 2017), the "SST" row of ARMIN's Table 3 (section 4.3, appendix C.3), where MA-SST
replaces it with an ARMIN cell. It runs the fused torch.nn.GRU (gate order r, z, n, as there):

    r_t = σ(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
    z_t = σ(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
    n_t = tanh(W_in x_t + b_in + r_t ∘ (W_hn h_{t-1} + b_hn))
    h_t = (1 - z_t) ∘ n_t + z_t ∘ h_{t-1}
    y_t = head(d_out(h_t))                                  dropout (output layer)

The initial state is a learned bias (zero at initialisation, h_0 = 0), as the LSTM's.
Dropout is off in eval mode.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from mannlab.models.base import SequenceModel, check_positive, check_probability
from mannlab.models.lstm import _cpu_autocast_off
from mannlab.models.size_check import check_model_size


class GRUState(NamedTuple):
    """The hidden state, (num_layers, B, hidden_size) as in torch.nn.GRU."""

    hidden: torch.Tensor


class GRUTrace(NamedTuple):
    """Per-step hidden states of the last layer (B, T, hidden_size)."""

    hidden: torch.Tensor


class GRU(SequenceModel):
    """GRU baseline (Cho et al. 2014; SST's encoder), shaped like torch.nn.LSTM.

    ``y, state = model(x)``; the initial state is a learned bias (zero at
    initialisation), reset at every call unless a ``state`` is passed in. It runs the
    fused torch.nn.GRU.

    Shapes (B batch, T steps; with ``batch_first=False`` x and y are (T, B, ...)):

    - x: (B, T, input_size)
    - y: logits (B, T, output_size); with ``output_size=None`` the last layer's h_t,
      (B, T, hidden_size)
    - state: :class:`GRUState`: hidden, (num_layers, B, hidden_size) as in torch.nn.GRU

    Args:
        input_size (int): features per step of x.
        output_size (int | None): logits per step of y, from a linear layer on h_t;
            None returns h_t itself. Default: None.
        hidden_size (int): units per layer. Default: 100.
        num_layers (int): stacked GRU layers, as torch.nn.GRU's. Default: 1.
        dropout (float): dropout on the features entering the output head (training
            only). Default: 0.0.
        batch_first (bool): True: x and y are (B, T, features); False: (T, B, features).
            Default: True.
    """

    def __init__(
        self,
        input_size: int,
        output_size: Optional[int] = None,
        hidden_size: int = 100,
        num_layers: int = 1,
        dropout: float = 0.0,
        batch_first: bool = True,
    ):
        check_model_size("GRU", locals())  # refuse sizes that cannot fit, before building
        check_positive(hidden_size=hidden_size, num_layers=num_layers)
        super().__init__(input_size, output_size, hidden_size, batch_first)
        self.hidden_size, self.num_layers = hidden_size, num_layers
        self.output_dropout = nn.Dropout(check_probability("dropout", dropout))
        self.gru = nn.GRU(input_size, hidden_size, num_layers, batch_first=True)
        self.h0 = nn.Parameter(torch.zeros(num_layers, 1, hidden_size))

    def initial_state(self, batch_size: int, device=None, dtype=None) -> GRUState:
        return GRUState(self.h0.to(device=device, dtype=dtype).expand(-1, batch_size, -1).contiguous())

    def _run(self, x: torch.Tensor, state: GRUState, with_trace: bool):
        with _cpu_autocast_off(x):
            out, h = self.gru(x, state.hidden)
        h = h.to(x.dtype)  # the state in the input's dtype under autocast
        return self.output_dropout(out), GRUState(h), GRUTrace(out) if with_trace else None
