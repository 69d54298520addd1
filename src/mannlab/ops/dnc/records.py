"""The typed records of the DNC's whole-sequence op (``mannlab.ops.dnc.dnc_sequence``): what goes
in (the state, the weights, the options) and what comes out (features, final state, trace). The
state and trace are the model's own (mannlab.models.dnc re-exports them); every backend (numba,
Triton, the reference loop) reads and returns these by field name; no caller sees a kernel's
argument order.

Sizes: B batch, T steps, H controller size, G its pre-activation width (4 H for the LSTM, H
otherwise), R read heads, N slots, W width, P the interface vector's width.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from mannlab.ops.controller_codes import (
    ELMAN,
    FNN,
    LSTM,
    RELU,
    SIGMOID,
    TANH,
    controller_state,
    controller_tensors,
)

__all__ = [
    "ELMAN",
    "FNN",
    "LSTM",
    "RELU",
    "SIGMOID",
    "TANH",
    "DNCStepResult",
    "DNCStepTrace",
    "DNCOptions",
    "DNCResult",
    "DNCState",
    "DNCStates",
    "DNCTrace",
    "DNCWeights",
    "covers",
    "pays",
]


class DNCState(NamedTuple):
    """The recurrent state between steps and segments, as the model returns it and the op and
    every backend read it: the controller's state (``()`` for the feed-forward controller,
    ``(h,)`` for Elman, ``(h, c)`` for the LSTM, each (B, H)), the memory M (B, N, W), read
    vectors r (B, R, W), read weightings w^r (B, R, N), write weighting w^w (B, 1, N), usage
    u (B, N), precedence p (B, N) and links L (B, N, N) of the last step."""

    controller: Any
    memory: torch.Tensor
    read_vectors: torch.Tensor
    read_weights: torch.Tensor
    write_weights: torch.Tensor
    usage: torch.Tensor
    precedence: torch.Tensor
    links: torch.Tensor


class DNCTrace(NamedTuple):
    """Per-step internals (B, T, ...), stacked over time; they carry no gradient."""

    read_weights: torch.Tensor  # (B, T, R, N)  w^r_t
    write_weights: torch.Tensor  # (B, T, 1, N)  w^w_t
    read_vectors: torch.Tensor  # (B, T, R, W)  r_t
    usage: torch.Tensor  # (B, T, N)     u_t
    allocation: torch.Tensor  # (B, T, N)     a_t
    precedence: torch.Tensor  # (B, T, N)     p_t
    links: torch.Tensor  # (B, T, N, N)  L_t
    read_modes: torch.Tensor  # (B, T, R, 3)  pi_t over (backward, content, forward)
    free_gates: torch.Tensor  # (B, T, R)     f_t
    allocation_gate: torch.Tensor  # (B, T)        g^a_t
    write_gate: torch.Tensor  # (B, T)        g^w_t
    memory: torch.Tensor  # (B, T, N, W)  M_t after the write


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
    whether a backward follows (``backward``: keep what it reads) and whether the trace is
    returned (the reference backend's only: :func:`covers`)."""

    kind: int
    activation: int
    pnr: bool
    backward: bool
    trace: bool = False


class DNCResult(NamedTuple):
    """``features, state, trace = dnc_sequence(...)``: H^o_t = [h_out; r_t] (B, T, H + R W), the
    final :class:`DNCState`, and the :class:`DNCTrace` where ``options.trace``, else None."""

    features: torch.Tensor
    state: DNCState
    trace: Optional[DNCTrace]


class DNCStates(NamedTuple):
    """The state as the kernels step it, one row (B, ...) at each backend's autograd boundary:
    the controller's h and c (B, H) (zeros where it keeps none; they pass through unchanged
    there), the reads side by side (B, R W), the write weighting without its head axis (B, N)."""

    hidden: torch.Tensor
    cell: torch.Tensor
    reads: torch.Tensor
    memory: torch.Tensor
    read_weights: torch.Tensor
    write_weights: torch.Tensor
    usage: torch.Tensor
    precedence: torch.Tensor
    links: torch.Tensor


class DNCStepTrace(NamedTuple):
    """The trace values of one memory step, for inspection only (no gradient): a_t (B, N),
    pi_t (B, R, 3), f_t (B, R), g^a_t (B,), g^w_t (B,)."""

    allocation: torch.Tensor
    read_modes: torch.Tensor
    free_gates: torch.Tensor
    allocation_gate: torch.Tensor
    write_gate: torch.Tensor


class DNCStepResult(NamedTuple):
    """What one memory step, (ii)-(iii), returns (ops/dnc/memory_step.py, reference.memory_step):
    r_t (B, R, W), M_t (B, N, W), w^r_t (B, R, N), w^w_t (B, 1, N), u_t, p_t (B, N),
    L_t (B, N, N), and the :class:`DNCStepTrace` where asked for (else None)."""

    read_vectors: torch.Tensor
    memory: torch.Tensor
    read_weights: torch.Tensor
    write_weights: torch.Tensor
    usage: torch.Tensor
    precedence: torch.Tensor
    links: torch.Tensor
    trace: Optional[DNCStepTrace] = None


def step_state(controller: Any, step: DNCStepResult) -> DNCState:
    """The state after a step: the controller's, and the memory step's."""
    return DNCState(
        controller=controller,
        memory=step.memory,
        read_vectors=step.read_vectors,
        read_weights=step.read_weights,
        write_weights=step.write_weights,
        usage=step.usage,
        precedence=step.precedence,
        links=step.links,
    )


def step_trace(step: DNCStepResult) -> DNCTrace:
    """One step's row (B, ...) of the :class:`DNCTrace`, from a memory step with its trace."""
    assert step.trace is not None  # asked for with the trace
    return DNCTrace(
        read_weights=step.read_weights,
        write_weights=step.write_weights,
        read_vectors=step.read_vectors,
        usage=step.usage,
        allocation=step.trace.allocation,
        precedence=step.precedence,
        links=step.links,
        read_modes=step.trace.read_modes,
        free_gates=step.trace.free_gates,
        allocation_gate=step.trace.allocation_gate,
        write_gate=step.trace.write_gate,
        memory=step.memory,
    )


def kernel_rows(state: DNCState, options: DNCOptions, hidden_size: int) -> DNCStates:
    """The :class:`DNCState` as the kernels' :class:`DNCStates`."""
    hidden, cell = controller_tensors(state.controller, options.kind, state.memory, hidden_size)
    return DNCStates(
        hidden=hidden,
        cell=cell,
        reads=state.read_vectors.flatten(1),
        memory=state.memory,
        read_weights=state.read_weights,
        write_weights=state.write_weights.squeeze(1),
        usage=state.usage,
        precedence=state.precedence,
        links=state.links,
    )


def model_state(rows: DNCStates, options: DNCOptions, width: int) -> DNCState:
    """The kernels' final :class:`DNCStates` as the model's :class:`DNCState`."""
    return DNCState(
        controller=controller_state(options.kind, rows.hidden, rows.cell),
        memory=rows.memory,
        read_vectors=rows.reads.unflatten(1, (-1, width)),
        read_weights=rows.read_weights,
        write_weights=rows.write_weights.unsqueeze(1),
        usage=rows.usage,
        precedence=rows.precedence,
        links=rows.links,
    )


def covers(options: DNCOptions, weights: DNCWeights, backend: str) -> bool:
    """Every backend implements the fnn (tanh, sigmoid, relu), Elman and LSTM controllers, each
    partially non-recurrent or not, any read heads; the trace only the reference and compiled
    backends (the model's step loop returns it otherwise). An unknown controller or activation
    code is refused."""
    known = options.kind in (FNN, ELMAN, LSTM) and options.activation in (TANH, SIGMOID, RELU)
    return known and (backend in ("reference", "compiled") or not options.trace)


def pays(options: DNCOptions, weights: DNCWeights, batch: int) -> bool:
    """The numba kernels beat the step loop at every batch measured (benchmarks/README.md)."""
    return True


def apply_sequence(
    function: Any, x_proj: torch.Tensor, state: DNCState, weights: DNCWeights, options: DNCOptions
) -> DNCResult:
    """Calls a backend's autograd Function (numba_sequence.DNCSequence, the Triton one): the
    :class:`DNCState` in as the kernels' :class:`DNCStates`, the final rows back as a
    :class:`DNCState`. The kernels return no trace."""
    rows = kernel_rows(state, options, weights.interface_weight.shape[1])
    features, *final = function.apply(x_proj, *rows, *weights, options)
    return DNCResult(features, model_state(DNCStates(*final), options, state.read_vectors.shape[2]), None)
