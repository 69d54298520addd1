"""Controllers for memory-augmented networks, behind one interface.

A controller receives [x_t; r_{t-1}] (the input and the previous read vectors)
and its own recurrent state, and returns two vectors (Taguchi & Tsuruoka,
"Partially Non-Recurrent Controllers", section "Controller"):

    h_ctrl  = H^r_t = H^w_t, which drives the read and write heads
    h_out   the controller part of H^o_t = [h_out; r_t], which drives the output

For the standard controllers both are h_t. The input-dependent part of the
pre-activations does not depend on the recurrence, so ``precompute`` projects
the whole input sequence with one matrix product before the time loop and
``step`` adds only the read-vector and recurrent terms.

Interface (every controller):
    precompute(x (B, T, I)) -> (B, T, G)
    step(x_proj_t (B, G), r_prev (B, R*W), state) -> (h_ctrl, h_out, state)
    initial_state(batch_size, device, dtype) -> state (tensor or tuple of tensors)
    hidden_size
"""
from __future__ import annotations

import math

import torch
from torch import nn

from mannlab.errors import ConfigError

ACTIVATIONS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}


def _uniform_(tensor: torch.Tensor, hidden_size: int) -> None:
    """PyTorch's recurrent-layer initialisation, U(-1/sqrt(H), 1/sqrt(H))."""
    bound = 1.0 / math.sqrt(hidden_size)
    nn.init.uniform_(tensor, -bound, bound)


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
        """W_x x_t + b for all steps at once: (B, T, I) -> (B, T, gates * hidden)."""
        return torch.nn.functional.linear(x, self.input_weight, self.bias)

    def _feedforward(self, x_proj: torch.Tensor, r_prev: torch.Tensor) -> torch.Tensor:
        """W_x x_t + W_r r_{t-1} + b."""
        return torch.addmm(x_proj, r_prev, self.read_weight.t())


class FNNController(Controller):
    """Feed-forward controller, h_t = phi(W_xh x_t + W_rh r_{t-1} + b). State: None."""

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


class LSTMController(Controller):
    """LSTM controller, eqs. 2-7 of Taguchi & Tsuruoka (gate order z, i, f, o).

    State (h, c), each (B, hidden). The initial state is a learned bias (zero at
    initialisation, as h_0 = c_0 = 0 in the paper), as the NTM paper resets the
    controller to learned bias vectors for each sequence.
    """

    gates = 4

    def __init__(self, input_size: int, read_size: int, hidden_size: int):
        super().__init__(input_size, read_size, hidden_size)
        self.recurrent_weight = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        _uniform_(self.recurrent_weight, hidden_size)
        self.h0 = nn.Parameter(torch.zeros(hidden_size))
        self.c0 = nn.Parameter(torch.zeros(hidden_size))

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return (self.h0.expand(batch_size, -1), self.c0.expand(batch_size, -1))

    def step(self, x_proj, r_prev, state):
        h_prev, c_prev = state
        pre = torch.addmm(self._feedforward(x_proj, r_prev), h_prev, self.recurrent_weight.t())
        h, c = _lstm_update(pre, c_prev)
        return h, h, (h, c)


def _lstm_update(pre: torch.Tensor, c_prev: torch.Tensor):
    """Eqs. 2-7 from the stacked pre-activations [z; i; f; o] (B, 4H)."""
    hidden = c_prev.shape[-1]
    z = torch.tanh(pre[:, :hidden])                       # eq. 2
    gates = torch.sigmoid(pre[:, hidden:])                # eqs. 3-5: i, f, o
    i, f, o = gates.chunk(3, dim=-1)
    c = torch.addcmul(f * c_prev, i, z)                   # eq. 6
    h = o * torch.tanh(c)                                 # eq. 7
    return h, c


CONTROLLERS = {"fnn": FNNController, "lstm": LSTMController}


def make_controller(name: str, input_size: int, read_size: int, hidden_size: int) -> Controller:
    """Build a controller by name; unknown names fail naming the valid ones."""
    if name not in CONTROLLERS:
        raise ConfigError(f"unknown controller {name!r}; valid: {sorted(CONTROLLERS)}")
    return CONTROLLERS[name](input_size, read_size, hidden_size)
