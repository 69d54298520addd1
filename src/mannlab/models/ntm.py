"""Neural Turing Machine.

Paper: A. Graves, G. Wayne, I. Danihelka, "Neural Turing Machines", arXiv:1410.5401
(2014). Equations as numbered in the NTM section of N. Taguchi, Y. Tsuruoka,
"Partially Non-Recurrent Controllers for Memory-Augmented Neural Networks",
which states them completely (including the sharpening exponent the summary
omits); step order (i)-(iv) of that paper: controller, write, read, output.

Glossary
    x_t   input (I)                 h_t   controller output, drives the heads
    M_t   memory (N x W)            r_t   read vectors of the R read heads (R x W)
    k     key (W)                   beta  key strength >= 0 (softplus)
    g     interpolation gate (sigmoid)
    s     shift weighting over -shift_range..shift_range (softmax)
    gamma sharpening exponent >= 1 (1 + softplus)
    e, a  erase (sigmoid) and add vectors of each write head (W)
    H^o_t = [h_t; r_t], the output features; y_t = W_o H^o_t + b_o

Per time step (heads of one kind are addressed together, never in a loop):
    (i)   h_t = controller([x_t; r_{t-1}], h_{t-1})
    (ii)  w^w_t = address(M_{t-1}, w^w_{t-1});  M_t = M_{t-1} o (E - w^w e^T) + w^w a^T
    (iii) w^r_t = address(M_t, w^r_{t-1});      r_t = M_t^T w^r_t
    (iv)  H^o_t = [h_t; r_t]
with address = content (eq. 8, cosine K) -> interpolation -> circular shift ->
sharpening: the functions of mannlab.nn.addressing. Steps (ii) and (iii), with the
head activations, run as one fused autograd function (mannlab.ops.ntm.memory_step)
with the same values and gradients.

A whole sequence of steps (i)-(iv) runs as one autograd node, mannlab.ops.ntm.ntm_sequence,
for the feed-forward (tanh), Elman, LSTM and partially non-recurrent controllers, where
mannlab.ops.dispatch.route sends it: on CPU float32/float64 tensors over numba kernels, on
CUDA float32 tensors over Triton kernels (the time loop inside one kernel each way). Both give
the values and gradients of the step loop, which stays the reference and runs everywhere else
(the GRU controller, autocast, torch.compile, other devices and dtypes). Their trace fields
carry no gradient.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from mannlab.errors import ConfigError
from mannlab.models.base import MemoryCell, SequenceModel, batched, check_positive, run_sequence
from mannlab.models.size_check import check_model_size
from mannlab.nn.controllers import RecurrentController, make_controller
from mannlab.ops import ntm as ntm_op
from mannlab.ops.controller_codes import controller_code
from mannlab.ops.ntm import NTMOptions, NTMState, NTMTrace, NTMWeights, ntm_sequence
from mannlab.ops.ntm.memory_step import ntm_memory_step


class NTMCell(MemoryCell):
    """One NTM time step: ``features, state = cell(x_t, state)``.

    x_t (B, input_size) -> features H^o_t (B, controller_size + read_heads * memory_width).
    """

    def __init__(
        self,
        input_size: int,
        controller: str = "lstm",
        controller_size: int = 100,
        memory_slots: int = 128,
        memory_width: int = 20,
        read_heads: int = 1,
        write_heads: int = 1,
        shift_range: int = 1,
    ):
        super().__init__()
        self.input_size = input_size
        check_positive(
            input_size=input_size,
            controller_size=controller_size,
            memory_slots=memory_slots,
            memory_width=memory_width,
            read_heads=read_heads,
            write_heads=write_heads,
        )
        bad_type = isinstance(shift_range, bool) or not isinstance(shift_range, int)
        if bad_type or shift_range < 0 or 2 * shift_range + 1 > memory_slots:
            raise ConfigError(
                f"shift_range must be an integer in [0, (memory_slots - 1) / 2] "
                f"= [0, {(memory_slots - 1) // 2}], got {shift_range!r}"
            )
        self.slots, self.width = memory_slots, memory_width
        self.read_heads, self.write_heads = read_heads, write_heads
        self.num_shifts = 2 * shift_range + 1
        self.controller = make_controller(controller, input_size, read_heads * memory_width, controller_size)
        self.features = controller_size + read_heads * memory_width
        # One linear layer emits every head's parameters: per head (write heads
        # first) [k (W), beta, g, s (S), gamma], then per write head [e (W), a (W)].
        self.address_size = memory_width + 3 + self.num_shifts
        heads = read_heads + write_heads
        self.head_params = nn.Linear(
            controller_size, heads * self.address_size + write_heads * 2 * memory_width
        )
        # Larger than nn.Linear's default so that the first keys and strengths
        # already pick out slots; with near-zero head outputs every weighting
        # starts uniform and the copy task sits longer on its plateau.
        nn.init.xavier_uniform_(self.head_params.weight, gain=1.4)
        nn.init.normal_(self.head_params.bias, std=0.01)
        # Learned initial values ("reset to a learned bias" in the NTM paper).
        bound = (memory_slots + memory_width) ** -0.5
        self.memory_init = nn.Parameter(torch.empty(memory_slots, memory_width).uniform_(-bound, bound))
        self.read_init = nn.Parameter(torch.zeros(read_heads, memory_width))
        self.read_weight_logits = nn.Parameter(torch.zeros(read_heads, memory_slots))
        self.write_weight_logits = nn.Parameter(torch.zeros(write_heads, memory_slots))

    def initial_state(self, batch_size: int, device=None, dtype=None) -> NTMState:
        def batch(p: torch.Tensor) -> torch.Tensor:
            return batched(p, batch_size, device, dtype)

        return NTMState(
            controller=self.controller.initial_state(batch_size, device, dtype),
            memory=batch(self.memory_init),
            read_vectors=batch(self.read_init),
            read_weights=batch(torch.softmax(self.read_weight_logits, dim=-1)),
            write_weights=batch(torch.softmax(self.write_weight_logits, dim=-1)),
        )

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        """The controller's input projection for every step at once (B, T, I) -> (B, T, G)."""
        return self.controller.precompute(x)

    def step(self, x_proj: torch.Tensor, state: NTMState, with_trace: bool = False):
        """One step from the precomputed input projection; returns (H^o_t, state, trace or None)."""
        ctrl, memory, reads, read_w, write_w = state
        h, h_out, ctrl = self.controller.step(x_proj, reads.flatten(1), ctrl)  # (i)
        # Every head's raw parameters from h_t; the activations (beta = softplus, g = sigmoid,
        # s = softmax, gamma = 1 + softplus, e = sigmoid), (ii) the write addressing (eq. 8
        # content weights on M_{t-1}, interpolation, shift, sharpening) and the erase/add
        # write, and (iii) the same addressing on M_t and r^i_t = M_t^T w^{r,i}_t run as one
        # fused function (mannlab.ops.ntm), equal to the mannlab.nn.addressing chain.
        out = ntm_memory_step(
            self.head_params(h), memory, read_w, write_w, self.width, self.num_shifts, with_trace
        )
        reads, memory, read_w, write_w = out[:4]
        features = torch.cat([h_out, reads.flatten(1)], dim=-1)  # (iv)
        trace = NTMTrace._make((read_w, write_w, reads, *out[4:], memory)) if with_trace else None
        return features, NTMState(ctrl, memory, reads, read_w, write_w), trace

    # ------------------------------------------------------ the whole-sequence op

    op = ntm_op

    def op_options(self, with_trace: bool, backward: bool) -> Optional[NTMOptions]:
        """The op's options; None for the GRU controller, which the op has no code for."""
        code = controller_code(self.controller)
        if code is None:
            return None
        kind, activation, pnr = code
        return NTMOptions(kind, activation, pnr, self.width, self.num_shifts, backward, with_trace)

    def op_weights(self) -> NTMWeights:
        controller = self.controller
        return NTMWeights(
            read_weight=controller.read_weight,
            recurrent_weight=controller.recurrent_weight
            if isinstance(controller, RecurrentController)
            else None,
            head_weight=self.head_params.weight,
            head_bias=self.head_params.bias,
        )

    def run_op(
        self, x: torch.Tensor, state: NTMState, options: NTMOptions, weights: NTMWeights, backend: str
    ):
        """All steps of x (B, T, I) through mannlab.ops.ntm.ntm_sequence on ``backend``."""
        return ntm_sequence(self.precompute(x), state, weights, options, backend)


class NTM(SequenceModel):
    """Neural Turing Machine (Graves et al. 2014), shaped like torch.nn.LSTM.

    ``y, state = model(x)`` runs a whole sequence; the memory starts from the learned
    initial state at every call unless a ``state`` is passed in (to carry memory over
    segments: ``model(x2, mannlab.detach_state(state))``). ``model(x, return_trace=True)``
    also returns an :class:`NTMTrace` stacked over time: read/write weightings (B, T,
    heads, N), read vectors, erase/add vectors, head parameters and the memory after
    each write.

    Shapes (B batch, T steps; with ``batch_first=False`` x and y are (T, B, ...)):

    - x: (B, T, input_size)
    - y: logits (B, T, output_size); with ``output_size=None`` the features
      H^o = [h_t; r_t], (B, T, controller_size + read_heads * memory_width)
    - state: :class:`NTMState`: controller state, memory (B, N, W), read vectors
      (B, R, W), read weightings (B, R, N), write weightings (B, H, N)

    Args:
        input_size (int): features per step of x.
        output_size (int | None): logits per step of y, from a linear layer on H^o;
            None returns H^o itself (to put the NTM inside a network of your own).
            Default: None.
        controller (str): the controller network, any name of
            ``mannlab.nn.controllers.CONTROLLERS``: "lstm", "fnn", "elman", "gru",
            "pnr-elman", "pnr-lstm". Default: "lstm".
        controller_size (int): the controller's units (h_t). Default: 100.
        memory_slots (int): N, the memory's rows (cells). Default: 128.
        memory_width (int): W, the width of a memory row and of a read vector.
            Default: 20.
        read_heads (int): R, read heads; each adds W features to H^o. Default: 1.
        write_heads (int): H, write heads (each erases, then adds). Default: 1.
        shift_range (int): r of the location shift: a head may move its weighting by
            -r..r cells per step (circular). Default: 1.
        batch_first (bool): True: x and y are (B, T, features); False: (T, B, features),
            as torch.nn.LSTM's option. Default: True.
    """

    def __init__(
        self,
        input_size: int,
        output_size: Optional[int] = None,
        controller: str = "lstm",
        controller_size: int = 100,
        memory_slots: int = 128,
        memory_width: int = 20,
        read_heads: int = 1,
        write_heads: int = 1,
        shift_range: int = 1,
        batch_first: bool = True,
    ):
        check_model_size("NTM", locals())  # refuse sizes that cannot fit, before building
        check_positive(controller_size=controller_size, read_heads=read_heads, memory_width=memory_width)
        super().__init__(input_size, output_size, controller_size + read_heads * memory_width, batch_first)
        self.cell = NTMCell(
            input_size,
            controller,
            controller_size,
            memory_slots,
            memory_width,
            read_heads,
            write_heads,
            shift_range,
        )

    def _run(self, x: torch.Tensor, state: Any, with_trace: bool):
        """The time loop, or where it applies and pays the compiled whole sequence."""
        return run_sequence(self.cell, x, state, with_trace)
