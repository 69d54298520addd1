"""Baseline LSTM with the library's calling convention and output head.

Hochreiter & Schmidhuber (1997); the "LSTM" column of every paper's tables.
With its options off it runs the fused torch.nn.LSTM, so it is also the speed
reference the memory models are compared against.

The char-level LM baseline of the ARMIN (appendix C) and TARDIS (section 8.1) papers
adds options nn.LSTM cannot run; with any of them on, the same parameters
(``lstm.weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``, gate
order i, f, g, o as in nn.LSTM) are stepped in a Python cell loop:

    a_t = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh            (4H: i, f, g, o)
    a_t = LN_g(a_t)                                         layer_norm (Ba et al. 2016)
    i, f, o = σ(a_i), σ(a_f), σ(a_o);  g = tanh(a_g)
    g = d(g)                     recurrent_dropout (Semeniuta et al. 2016; TARDIS 8.1)
    c'_t = f ∘ c_{t-1} + i ∘ g
    h'_t = o ∘ tanh(LN_c(c'_t))                             layer_norm
    c_t = z^c ∘ c_{t-1} + (1 - z^c) ∘ c'_t                  zoneout (Krueger et al. 2016):
    h_t = z^h ∘ h_{t-1} + (1 - z^h) ∘ h'_t                  z ~ Bernoulli(p) per unit in
                                                            training, z = p at evaluation
    y_t = head(d_out(h_t))                                  dropout (output layer)

Layer norm normalises the summed pre-activations of all four gates as one 4H vector
(one LayerNorm per layer, with gain and bias), and the cell state before its tanh, as
ARMIN does for its eqs. 6 and 7. Dropout and zoneout are off in eval mode (zoneout
then uses its expectation). ``fused`` forces a path: ``fused=False`` runs the cell loop
with every option off (tested equal to nn.LSTM).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mannlab.errors import ConfigError
from mannlab.models.base import SequenceModel, check_positive, check_probability
from mannlab.models.size_check import check_model_size
from mannlab.ops import dispatch


class LSTMState(NamedTuple):
    """Hidden and cell states, each (num_layers, B, hidden_size) as in torch.nn.LSTM."""

    hidden: torch.Tensor
    cell: torch.Tensor


class LSTMTrace(NamedTuple):
    """Per-step hidden states of the last layer (B, T, hidden_size)."""

    hidden: torch.Tensor


def zoneout(previous: torch.Tensor, new: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Keep each unit of ``previous`` with probability p (training), else take ``new``;
    at evaluation the expectation p * previous + (1 - p) * new."""
    if not p:
        return new
    if training:
        return torch.where(torch.rand_like(new) < p, previous, new)
    return p * previous + (1 - p) * new


def _cpu_autocast_off(x: torch.Tensor):
    """Autocast off for the fused LSTM on the CPU: oneDNN's bfloat16 LSTM fails to build on
    CPUs without bfloat16 instructions (common ones), so there it runs in the input's dtype.
    Elsewhere (CUDA's cuDNN LSTM supports autocast) nothing changes."""
    if x.device.type == "cpu" and dispatch.autocast_active(x):
        return torch.autocast("cpu", enabled=False)
    return nullcontext()


class LSTM(SequenceModel):
    """LSTM baseline with the library's calling convention and output head.

    ``y, state = model(x)``; the initial state is a learned bias (zero at
    initialisation), reset at every call unless a ``state`` is passed in. With its
    options off it runs the fused torch.nn.LSTM; ``layer_norm``, ``zoneout`` or
    ``recurrent_dropout`` step the same parameters in a Python cell loop (the module
    docstring gives the equations).

    Shapes (B batch, T steps; with ``batch_first=False`` x and y are (T, B, ...)):

    - x: (B, T, input_size)
    - y: logits (B, T, output_size); with ``output_size=None`` the last layer's h_t,
      (B, T, hidden_size)
    - state: :class:`LSTMState`: hidden and cell, each (num_layers, B, hidden_size) as
      in torch.nn.LSTM

    Args:
        input_size (int): features per step of x.
        output_size (int | None): logits per step of y, from a linear layer on h_t;
            None returns h_t itself. Default: None.
        hidden_size (int): units per layer. Default: 100.
        num_layers (int): stacked LSTM layers, as torch.nn.LSTM's. Default: 1.
        layer_norm (bool): layer norm on the four gates' pre-activations and on the
            cell state before its tanh (Ba et al. 2016; ARMIN eqs. 6-7). Default: False.
        zoneout (float): probability p of keeping a unit's previous h and c
            (Krueger et al. 2016); its expectation at evaluation. Default: 0.0.
        dropout (float): dropout on the features entering the output head (training
            only). Default: 0.0.
        recurrent_dropout (float): dropout on the candidate g (Semeniuta et al. 2016;
            TARDIS 8.1). Default: 0.0.
        fused (bool | None): None runs torch.nn.LSTM unless an option above needs the
            cell loop; False forces the cell loop; True forces nn.LSTM (an error with
            those options on). Default: None.
        batch_first (bool): True: x and y are (B, T, features); False: (T, B, features).
            Default: True.
    """

    def __init__(
        self,
        input_size: int,
        output_size: Optional[int] = None,
        hidden_size: int = 100,
        num_layers: int = 1,
        layer_norm: bool = False,
        zoneout: float = 0.0,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        fused: Optional[bool] = None,
        batch_first: bool = True,
    ):
        check_model_size("LSTM", locals())  # refuse sizes that cannot fit, before building
        check_positive(hidden_size=hidden_size, num_layers=num_layers)
        if not isinstance(layer_norm, bool):
            raise ConfigError(f"layer_norm must be true or false, got {layer_norm!r}")
        if fused is not None and not isinstance(fused, bool):
            raise ConfigError(f"fused must be true, false or absent, got {fused!r}")
        super().__init__(input_size, output_size, hidden_size, batch_first)
        self.hidden_size, self.num_layers, self.layer_norm = hidden_size, num_layers, layer_norm
        self.zoneout = check_probability("zoneout", zoneout)
        self.recurrent_dropout = check_probability("recurrent_dropout", recurrent_dropout)
        self.output_dropout = nn.Dropout(check_probability("dropout", dropout))
        needs_cells = layer_norm or bool(self.zoneout) or bool(self.recurrent_dropout)
        if fused and needs_cells:
            raise ConfigError(
                "fused=true cannot run layer_norm, zoneout or recurrent_dropout "
                "(torch.nn.LSTM has none of them); leave fused unset"
            )
        self.fused = not needs_cells if fused is None else fused
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.h0 = nn.Parameter(torch.zeros(num_layers, 1, hidden_size))
        self.c0 = nn.Parameter(torch.zeros(num_layers, 1, hidden_size))
        if layer_norm:
            self.ln_gates = nn.ModuleList(nn.LayerNorm(4 * hidden_size) for _ in range(num_layers))
            self.ln_cell = nn.ModuleList(nn.LayerNorm(hidden_size) for _ in range(num_layers))

    def initial_state(self, batch_size: int, device=None, dtype=None) -> LSTMState:
        def batch(p: torch.Tensor) -> torch.Tensor:
            return p.to(device=device, dtype=dtype).expand(-1, batch_size, -1).contiguous()

        return LSTMState(batch(self.h0), batch(self.c0))

    def _run(self, x: torch.Tensor, state: LSTMState, with_trace: bool):
        if self.fused:
            with _cpu_autocast_off(x):
                out, (h, c) = self.lstm(x, tuple(state))
            h, c = h.to(x.dtype), c.to(x.dtype)  # the state in the input's dtype under autocast
        else:
            out, hs, cs = x, [], []
            for layer in range(self.num_layers):
                out, h, c = self._layer(layer, out, state.hidden[layer], state.cell[layer])
                hs.append(h)
                cs.append(c)
            h, c = torch.stack(hs), torch.stack(cs)
        return self.output_dropout(out), LSTMState(h, c), LSTMTrace(out) if with_trace else None

    def _layer(self, layer: int, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        """One layer over the sequence x (B, T, I) from (h, c) (B, H) each."""
        lstm, hidden = self.lstm, self.hidden_size
        w_hh = getattr(lstm, f"weight_hh_l{layer}")
        bias = getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")
        inputs = F.linear(x, getattr(lstm, f"weight_ih_l{layer}"), bias)  # once, outside the loop
        ln_gates = self.ln_gates[layer] if self.layer_norm else None
        ln_cell = self.ln_cell[layer] if self.layer_norm else None
        training, p_zone, p_drop = self.training, self.zoneout, self.recurrent_dropout
        outputs = []
        for x_t in inputs.unbind(1):
            gates = x_t + F.linear(h, w_hh)
            if ln_gates is not None:
                gates = ln_gates(gates)
            i, f, g, o = gates.split(hidden, dim=-1)
            g = torch.tanh(g)
            if p_drop and training:
                g = F.dropout(g, p_drop, training=True)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * g
            h_new = torch.sigmoid(o) * torch.tanh(ln_cell(c_new) if ln_cell is not None else c_new)
            c = zoneout(c, c_new, p_zone, training)
            h = zoneout(h, h_new, p_zone, training)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h, c
