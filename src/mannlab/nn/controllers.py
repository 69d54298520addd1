"""Controllers for memory-augmented networks, behind one interface.

A controller receives [x_t; r_{t-1}] (the input and the previous read vectors)
and its own recurrent state, and returns two vectors (Taguchi & Tsuruoka,
"Partially Non-Recurrent Controllers", section "Controller"):

    h_ctrl  = H^r_t = H^w_t, which drives the read and write heads
    h_out   the controller part of H^o_t = [h_out; r_t], which drives the output

For the standard controllers both are h_t. The partially non-recurrent ones
(same paper, eqs. 9-13) return h_out = h'_t, computed without h_{t-1}.
The input-dependent part of the pre-activations does not depend on the
recurrence, so ``precompute`` projects the whole input sequence with one
matrix product before the time loop and ``step`` adds only the read-vector
and recurrent terms (one addmm each).

Interface (every controller):
    precompute(x (B, T, I)) -> (B, T, G)
    step(x_proj_t (B, G), r_prev (B, R*W), state) -> (h_ctrl, h_out, state)
    initial_state(batch_size, device, dtype) -> state (a tuple of (B, hidden) tensors)
    hidden_size

Names (``make_controller``; case-insensitive, "_" may replace "-"):

    fnn        FNNController         h_t = phi(W_xh x_t + W_rh r_{t-1} + b)       state ()
    elman      ElmanController       eq. 1                                          state (h,)
    gru        GRUController         torch.nn.GRUCell over [x_t; r_{t-1}]           state (h,)
    lstm       LSTMController        eqs. 2-7                                       state (h, c)
    pnr-elman  PNRElmanController    eqs. 9-11, the parameters of "elman"           state (h,)
    pnr-lstm   PNRLSTMController     eqs. 12-13 with 3-7, the parameters of "lstm"  state (h, c)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from mannlab.errors import ConfigError

ACTIVATIONS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}


def _uniform_(tensor: torch.Tensor, hidden_size: int) -> None:
    """PyTorch's recurrent-layer initialisation, U(-1/sqrt(H), 1/sqrt(H))."""
    bound = 1.0 / math.sqrt(hidden_size)
    nn.init.uniform_(tensor, -bound, bound)


def _learned(initial: torch.Tensor, batch_size: int, device, dtype) -> torch.Tensor:
    """A learned initial value expanded to the batch, on the device and in the dtype asked
    for (None: the parameter's; a no-op when they match, so the gradient still reaches it)."""
    return initial.to(device=device, dtype=dtype).expand(batch_size, *initial.shape)


class Controller(nn.Module):
    """Shared parameters: input weights W_x (with bias b) and read weights W_r."""

    gates = 1  # how many blocks of hidden_size the pre-activation has

    def __init__(self, input_size: int, read_size: int, hidden_size: int):
        super().__init__()
        if hidden_size < 1:
            raise ConfigError(f"controller_size must be >= 1, got {hidden_size}")
        self.input_size, self.read_size, self.hidden_size = input_size, read_size, hidden_size
        width = self.gates * hidden_size
        self.input_weight = nn.Parameter(torch.empty(width, input_size))
        self.read_weight = nn.Parameter(torch.empty(width, read_size))
        self.bias = nn.Parameter(torch.empty(width))
        for p in (self.input_weight, self.read_weight, self.bias):
            _uniform_(p, hidden_size)

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        """W_x x_t + b for all steps at once: (B, T, I) -> (B, T, gates * hidden).

        The weight goes in with column-major storage, so that linear's backward takes W_x's
        gradient as x^T (I, B T) @ dxp (B T, G), transposed after: with the row-major weight
        it is dxp^T (G, B T) @ x (B T, I), which MKL computes several times slower when the
        inputs are few (benchmarks/README.md, bench_dnc.py)."""
        return torch.nn.functional.linear(x, self.input_weight.t().contiguous().t(), self.bias)

    def _feedforward(self, x_proj: torch.Tensor, r_prev: torch.Tensor) -> torch.Tensor:
        """W_x x_t + W_r r_{t-1} + b."""
        return torch.addmm(x_proj, r_prev, self.read_weight.t())

    def initial_state(
        self, batch_size: int, device: Any = None, dtype: Any = None
    ) -> tuple[torch.Tensor, ...]:
        """The state a sequence starts from: () for the feed-forward controller, else (h_0,)
        or (h_0, c_0), expanded to the batch."""
        raise NotImplementedError(f"{type(self).__name__} defines initial_state")

    def step(
        self, x_proj: torch.Tensor, r_prev: torch.Tensor, state: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """(h_ctrl, h_out, state) from x_proj (a step of ``precompute``), r_{t-1} and the state."""
        raise NotImplementedError(f"{type(self).__name__} defines step")


class FNNController(Controller):
    """Feed-forward controller, h_t = phi(W_xh x_t + W_rh r_{t-1} + b). State: ()."""

    def __init__(self, input_size: int, read_size: int, hidden_size: int, activation: str = "tanh"):
        super().__init__(input_size, read_size, hidden_size)
        if activation not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {activation!r}; valid: {sorted(ACTIVATIONS)}")
        self.activation = ACTIVATIONS[activation]

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return ()

    def step(self, x_proj, r_prev, state):
        h = self.activation(self._feedforward(x_proj, r_prev))
        return h, h, state


class RecurrentController(Controller):
    """Adds the recurrent weights W_h (gates * hidden, hidden) and a learned h_0.

    The initial state is a learned bias (zero at initialisation, as h_0 = c_0 = 0
    in the paper), as the NTM paper resets the controller to learned bias
    vectors for each sequence.
    """

    def __init__(self, input_size: int, read_size: int, hidden_size: int):
        super().__init__(input_size, read_size, hidden_size)
        self.recurrent_weight = nn.Parameter(torch.empty(self.gates * hidden_size, hidden_size))
        _uniform_(self.recurrent_weight, hidden_size)
        self.h0 = nn.Parameter(torch.zeros(hidden_size))

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return (_learned(self.h0, batch_size, device, dtype),)

    def _recurrent(self, pre: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        """pre + W_h h_{t-1}."""
        return torch.addmm(pre, h_prev, self.recurrent_weight.t())

    def _output(self, h_bar: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """h_out of a standard controller: h_t itself (H^o_t = [h_t; r_t])."""
        return h


class PartiallyNonRecurrent:
    """Mixin for eqs. 9-13: h_out = h'_t = tanh(h'bar_t), where h'bar_t is the
    first block (z for the LSTM) of W_x x_t + W_r r_{t-1} + b, without h_{t-1}."""

    hidden_size: int

    def _output(self, h_bar: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(h_bar[:, : self.hidden_size])  # eq. 10


class ElmanController(RecurrentController):
    """Elman controller, eq. 1: h_t = tanh(W_xh x_t + W_rh r_{t-1} + W_hh h_{t-1} + b).

    State (h,), (B, hidden); h_ctrl = h_out = h_t.
    """

    def step(self, x_proj, r_prev, state):
        (h_prev,) = state
        h_bar = self._feedforward(x_proj, r_prev)  # eq. 9 (h'bar)
        # h_t keeps h_{t-1}'s dtype (under autocast the matmul comes out in a lower one)
        h = torch.tanh(self._recurrent(h_bar, h_prev)).to(h_prev.dtype)  # eq. 1 = eq. 11
        return h, self._output(h_bar, h), (h,)


class PNRElmanController(PartiallyNonRecurrent, ElmanController):
    """Partially non-recurrent Elman controller, eqs. 9-11:

        h'bar_t = W_xh x_t + W_rh r_{t-1} + b        (9)
        h'_t    = tanh(h'bar_t)                       (10)  -> h_out
        h_t     = tanh(W_hh h_{t-1} + h'bar_t)        (11)  -> h_ctrl and the state

    Exactly the parameters of ElmanController (same names and shapes).
    """


class GRUController(RecurrentController):
    """GRU controller (Cho et al. 2014) over the input [x_t; r_{t-1}], as torch.nn.GRUCell.

    Gate order of every stacked weight and bias is (r, u, n): reset, update, candidate.
    With a_t = W_x x_t + W_r r_{t-1} + b and g_t = W_h h_{t-1} + b_h:

        r_t = sigmoid(a^r_t + g^r_t)
        u_t = sigmoid(a^u_t + g^u_t)
        n_t = tanh(a^n_t + r_t * g^n_t)          (reset applied to W_hn h_{t-1} + b_hn)
        h_t = (1 - u_t) * n_t + u_t * h_{t-1}

    ``bias`` is GRUCell's bias_ih and ``recurrent_bias`` its bias_hh (only its n
    block is not redundant, but keeping all of it matches GRUCell one-to-one).
    State (h,); h_ctrl = h_out = h_t.
    """

    gates = 3

    def __init__(self, input_size: int, read_size: int, hidden_size: int):
        super().__init__(input_size, read_size, hidden_size)
        self.recurrent_bias = nn.Parameter(torch.empty(3 * hidden_size))
        _uniform_(self.recurrent_bias, hidden_size)

    def step(self, x_proj, r_prev, state):
        (h_prev,) = state
        hidden = self.hidden_size
        a = self._feedforward(x_proj, r_prev)
        g = torch.addmm(self.recurrent_bias, h_prev, self.recurrent_weight.t())
        reset, update = torch.sigmoid(a[:, : 2 * hidden] + g[:, : 2 * hidden]).chunk(2, dim=-1)
        n = torch.tanh(torch.addcmul(a[:, 2 * hidden :], reset, g[:, 2 * hidden :]))
        # h_t keeps h_{t-1}'s dtype (under autocast the matmuls come out in a lower one)
        h = torch.lerp(n.to(h_prev.dtype), h_prev, update.to(h_prev.dtype))  # (1 - u) n + u h_{t-1}
        return h, h, (h,)


class LSTMController(RecurrentController):
    """LSTM controller, eqs. 2-7 of Taguchi & Tsuruoka (gate order z, i, f, o).

    State (h, c), each (B, hidden); h_ctrl = h_out = h_t.
    """

    gates = 4

    def __init__(self, input_size: int, read_size: int, hidden_size: int):
        super().__init__(input_size, read_size, hidden_size)
        self.c0 = nn.Parameter(torch.zeros(hidden_size))

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return (_learned(self.h0, batch_size, device, dtype), _learned(self.c0, batch_size, device, dtype))

    def step(self, x_proj, r_prev, state):
        h_prev, c_prev = state
        h_bar = self._feedforward(x_proj, r_prev)  # its z block is eq. 12
        h, c = _lstm_update(self._recurrent(h_bar, h_prev), c_prev)
        return h, self._output(h_bar, h), (h, c)


class PNRLSTMController(PartiallyNonRecurrent, LSTMController):
    """Partially non-recurrent LSTM controller, eqs. 12-13 with eqs. 3-7:

        h'bar_t = W_xz x_t + W_rz r_{t-1} + b_z       (12)
        h'_t    = tanh(h'bar_t)                       (10)  -> h_out
        z_t     = tanh(W_hz h_{t-1} + h'bar_t)        (13)
        i, f, o, c_t, h_t as in eqs. 3-7              h_t -> h_ctrl and the state

    Exactly the parameters of LSTMController (same names and shapes); z_t of
    eq. 13 equals z_t of eq. 2, so only the returned h_out differs.
    """


def _lstm_update(pre: torch.Tensor, c_prev: torch.Tensor):
    """Eqs. 2-7 from the stacked pre-activations [z; i; f; o] (B, 4H)."""
    hidden = c_prev.shape[-1]
    z = torch.tanh(pre[:, :hidden])  # eq. 2
    gates = torch.sigmoid(pre[:, hidden:])  # eqs. 3-5: i, f, o
    i, f, o = gates.chunk(3, dim=-1)
    c = torch.addcmul(f * c_prev, i, z)  # eq. 6
    h = o * torch.tanh(c)  # eq. 7
    return h, c


CONTROLLERS = {
    "fnn": FNNController,
    "elman": ElmanController,
    "gru": GRUController,
    "lstm": LSTMController,
    "pnr-elman": PNRElmanController,
    "pnr-lstm": PNRLSTMController,
}


def make_controller(name: str, input_size: int, read_size: int, hidden_size: int) -> Controller:
    """Build a controller by name (case-insensitive, "_" or "-"); unknown names fail
    naming the valid ones."""
    key = name.strip().lower().replace("_", "-") if isinstance(name, str) else None
    if key not in CONTROLLERS:
        raise ConfigError(f"unknown controller {name!r}; valid: {sorted(CONTROLLERS)}")
    return CONTROLLERS[key](input_size, read_size, hidden_size)
