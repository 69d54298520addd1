"""Differentiable Neural Computer.

Paper: A. Graves, G. Wayne, M. Reynolds, T. Harley, I. Danihelka et al., "Hybrid
computing using a neural network with dynamic external memory", Nature 538 (2016).
Equations as written in the DNC section of N. Taguchi, Y. Tsuruoka, "Partially
Non-Recurrent Controllers for Memory-Augmented Neural Networks", with two corrections
to that text: u_t = (u_{t-1} + w^w_{t-1} - u_{t-1} ∘ w^w_{t-1}) ∘ ψ_t, and
L_t[i, j] = (1 - w^w[i] - w^w[j]) L_{t-1}[i, j] + w^w[i] p_{t-1}[j] with L[i, i] = 0.
One write head, no sparse link matrix, as there.

Glossary
    x_t   input (I)                   h_t   controller output, drives the heads
    M_t   memory (N x W)              r_t   read vectors of the R read heads (R x W)
    k^r, beta^r  read keys (R x W), strengths >= 1 (oneplus = 1 + softplus)
    k^w, beta^w  write key (W), strength >= 1 (oneplus)
    e, v  erase (sigmoid) and write vectors (W)
    f     free gates, one per read head (sigmoid)
    g^a, g^w  allocation and write gates (sigmoid)
    pi    read modes per read head over (backward, content, forward) (softmax)
    psi   retention           u   usage            a   allocation weighting
    p     precedence          L   temporal links (L[i, j]: i written right after j)
    c     content weighting (eq. 8 with beta inside the exponential, cosine K)
    H^o_t = [h_t; r_t], the output features; y_t = W_o H^o_t + b_o

Per time step (read heads together; steps (ii)-(iii) are one fused autograd function,
mannlab.ops.dnc: compiled kernels on CPU, else the composition of the
mannlab.nn.addressing functions):
    (i)   h_t = controller([x_t; r_{t-1}], h_{t-1}); interface vector = W_xi h_t + b_i
    (ii)  psi_t = prod_i (1 - f^i w^{r,i}_{t-1})                        retention
          u_t = (u_{t-1} + w^w_{t-1} - u_{t-1} o w^w_{t-1}) o psi_t     usage
          a_t[phi[j]] = (1 - u_t[phi[j]]) prod_{i<j} u_t[phi[i]]      allocation
          w^w_t = g^w [g^a a_t + (1 - g^a) C(M_{t-1}, k^w, beta^w)]    write weighting
          M_t = M_{t-1} o (E - w^w e^T) + w^w v^T                      write
          L_t[i,j] = (1 - w^w[i] - w^w[j]) L_{t-1}[i,j] + w^w[i] p_{t-1}[j], L_t[i,i] = 0
          p_t = (1 - sum_i w^w_t[i]) p_{t-1} + w^w_t                   precedence
    (iii) f^i = L_t w^{r,i}_{t-1},  b^i = L_t^T w^{r,i}_{t-1}            (previous reads)
          w^{r,i}_t = pi^i[0] b^i + pi^i[1] C(M_t, k^{r,i}, beta^{r,i}) + pi^i[2] f^i
          r^i_t = M_t^T w^{r,i}_t
    (iv)  H^o_t = [h_t; r_t]
Every sequence starts from zeros: memory, usage, precedence, links, weightings
and read vectors (the DNC's reset; the controller's initial state is its own).

Speed: on CPU float32/float64 tensors, with the fnn (tanh, sigmoid or relu), elman, lstm,
pnr-elman or pnr-lstm controller and without the trace, a whole sequence runs as one
autograd node whose forward and backward are compiled loops over time
(mannlab.ops.dnc.dnc_sequence: steps (i)-(iv) of every step, the weight gradients one matrix
product each after the backward; the links are kept for the backward only every
ceil(sqrt(B T)) steps and recomputed in between). The GRU controller, the trace, other
devices and dtypes, autocast, torch.compile and ``mannlab.ops.use_kernels(False)`` take the
step loop above (the reference: same values and gradients to rounding,
tests/ops/test_dnc_sequence.py). Each batch element is an independent loop over time. The same
controllers have Triton kernels (ops/dnc/triton_kernels.py, the time loop inside one kernel
each way), tested in Triton's interpreter only: they run only when forced
(MANNLAB_KERNELS=triton) until a GPU has checked them (benchmarks/gpu_check.sh).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from mannlab.models.base import MemoryCell, SequenceModel, check_positive, run_sequence
from mannlab.models.size_check import check_model_size
from mannlab.nn.controllers import RecurrentController, make_controller
from mannlab.ops import dnc as dnc_op
from mannlab.ops.controller_codes import controller_code
from mannlab.ops.dnc import DNCOptions, DNCState, DNCTrace, DNCWeights, dnc_sequence
from mannlab.ops.dnc.memory_step import dnc_memory_step, interface_sizes
from mannlab.ops.dnc.records import step_state, step_trace

__all__ = ["DNC", "DNCCell", "DNCState", "DNCTrace"]


class DNCCell(MemoryCell):
    """One DNC time step: ``features, state = cell(x_t, state)``.

    x_t (B, input_size) -> features H^o_t (B, controller_size + read_heads * memory_width).
    """

    def __init__(
        self,
        input_size: int,
        controller: str = "lstm",
        controller_size: int = 128,
        memory_slots: int = 128,
        memory_width: int = 20,
        read_heads: int = 1,
    ):
        super().__init__()
        self.input_size = input_size
        check_positive(
            input_size=input_size,
            controller_size=controller_size,
            memory_slots=memory_slots,
            memory_width=memory_width,
            read_heads=read_heads,
        )
        self.slots, self.width, self.read_heads = memory_slots, memory_width, read_heads
        self.controller = make_controller(controller, input_size, read_heads * memory_width, controller_size)
        self.features = controller_size + read_heads * memory_width
        # The interface vector, one linear layer on h_t, grouped by activation
        # (the paper's order differs; only the grouping matters):
        #   [k^r (R*W), k^w (W), v (W) | beta^r (R), beta^w (1) | e (W), f (R), g^a, g^w | pi (3R)]
        #    identity                  | oneplus                | sigmoid                | softmax
        self.interface = nn.Linear(controller_size, sum(interface_sizes(read_heads, memory_width)))

    def initial_state(self, batch_size: int, device=None, dtype=None) -> DNCState:
        """Zero memory, usage, precedence, links, weightings and read vectors."""
        ref = self.interface.weight
        zero = torch.zeros(
            (), device=ref.device if device is None else device, dtype=ref.dtype if dtype is None else dtype
        )
        R, N, W = self.read_heads, self.slots, self.width

        def zeros(*shape: int) -> torch.Tensor:
            return zero.expand(batch_size, *shape)

        return DNCState(
            controller=self.controller.initial_state(batch_size, device, dtype),
            memory=zeros(N, W),
            read_vectors=zeros(R, W),
            read_weights=zeros(R, N),
            write_weights=zeros(1, N),
            usage=zeros(N),
            precedence=zeros(N),
            links=zeros(N, N),
        )

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        """The controller's input projection for every step at once (B, T, I) -> (B, T, G)."""
        return self.controller.precompute(x)

    def step(self, x_proj: torch.Tensor, state: DNCState, with_trace: bool = False):
        """One step from the precomputed input projection; returns (H^o_t, state, trace or None)."""
        h, h_out, ctrl = self.controller.step(x_proj, state.read_vectors.flatten(1), state.controller)  # (i)
        # (ii) retention, usage, allocation, write weighting, write, links, precedence;
        # (iii) forward/backward/content read weightings and reads: one fused step
        # (mannlab.ops.dnc) from the raw interface vector W_xi h_t + b_i
        step = dnc_memory_step(
            self.interface(h),
            state.memory,
            state.read_weights,
            state.write_weights,
            state.usage,
            state.precedence,
            state.links,
            with_trace,
        )
        features = torch.cat([h_out, step.read_vectors.flatten(1)], dim=-1)  # (iv)
        return features, step_state(ctrl, step), step_trace(step) if with_trace else None

    # ------------------------------------------------------ the whole-sequence op

    op = dnc_op

    def op_options(self, with_trace: bool, backward: bool) -> Optional[DNCOptions]:
        """The op's options; None for the GRU controller (and subclasses, unknown activations),
        which the op has no code for."""
        code = controller_code(self.controller)
        if code is None:
            return None
        kind, activation, pnr = code
        return DNCOptions(kind, activation, pnr, backward, with_trace)

    def op_weights(self) -> DNCWeights:
        controller = self.controller
        return DNCWeights(
            read_weight=controller.read_weight,
            recurrent_weight=controller.recurrent_weight
            if isinstance(controller, RecurrentController)
            else None,
            interface_weight=self.interface.weight,
            interface_bias=self.interface.bias,
        )

    def run_op(
        self, x: torch.Tensor, state: DNCState, options: DNCOptions, weights: DNCWeights, backend: str
    ):
        """All steps of x (B, T, I) through mannlab.ops.dnc.dnc_sequence on ``backend``."""
        return dnc_sequence(self.precompute(x), state, weights, options, backend)


class DNC(SequenceModel):
    """Differentiable Neural Computer (Graves et al. 2016), shaped like torch.nn.LSTM.

    ``y, state = model(x)`` runs a whole sequence; every call starts from the zero state
    (empty memory, no usage, no links) unless a ``state`` is passed in (to carry memory
    over segments). ``model(x, return_trace=True)`` also returns a :class:`DNCTrace`
    stacked over time: read weightings (B, T, R, N), write weighting (B, T, 1, N), usage,
    allocation, links (B, T, N, N), read modes, gates and the memory after each write.

    Shapes (B batch, T steps; with ``batch_first=False`` x and y are (T, B, ...)):

    - x: (B, T, input_size)
    - y: logits (B, T, output_size); with ``output_size=None`` the features
      H^o = [h_t; r_t], (B, T, controller_size + read_heads * memory_width)
    - state: :class:`DNCState`: controller state, memory (B, N, W), read vectors
      (B, R, W), read and write weightings, usage, precedence and links (B, N, N)

    Args:
        input_size (int): features per step of x.
        output_size (int | None): logits per step of y, from a linear layer on H^o;
            None returns H^o itself. Default: None.
        controller (str): the controller network, any name of
            ``mannlab.nn.controllers.CONTROLLERS``: "lstm", "fnn", "elman", "gru",
            "pnr-elman", "pnr-lstm". Default: "lstm".
        controller_size (int): the controller's units (h_t). Default: 128.
        memory_slots (int): N, the memory's rows; the links are N x N. Default: 128.
        memory_width (int): W, the width of a memory row and of a read vector.
            Default: 20.
        read_heads (int): R, read heads (each with its read modes: backward, content,
            forward); one write head. Default: 1.
        batch_first (bool): True: x and y are (B, T, features); False: (T, B, features).
            Default: True.
    """

    def __init__(
        self,
        input_size: int,
        output_size: Optional[int] = None,
        controller: str = "lstm",
        controller_size: int = 128,
        memory_slots: int = 128,
        memory_width: int = 20,
        read_heads: int = 1,
        batch_first: bool = True,
    ):
        check_model_size("DNC", locals())  # refuse sizes that cannot fit, before building
        check_positive(controller_size=controller_size, read_heads=read_heads, memory_width=memory_width)
        super().__init__(input_size, output_size, controller_size + read_heads * memory_width, batch_first)
        self.cell = DNCCell(input_size, controller, controller_size, memory_slots, memory_width, read_heads)

    def _run(self, x: torch.Tensor, state: Any, with_trace: bool):
        """The compiled whole-sequence path where it applies (ops/dispatch.py), else the step loop."""
        return run_sequence(self.cell, x, state, with_trace)
