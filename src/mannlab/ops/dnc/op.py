"""The DNC's whole-sequence op, the one entry point of its fast path:

    features, state, trace = dnc_sequence(x_proj, state, weights, options, backend="numba")

x_proj (B, T, G) is the controller's input projection W_x x_t + b of every step (one matrix
product before the time loop), ``state`` the model's own :class:`DNCState`, ``weights`` the
:class:`DNCWeights` the time loop multiplies by and ``options`` the :class:`DNCOptions`
(records.py). The backends compute ops/dnc/reference.py's loop: "numba" as one autograd node
over the CPU kernels (numba_sequence.py over kernels.py), "triton" as one over the GPU kernels
(triton_sequence.py over triton_kernels.py; on CPU tensors in Triton's interpreter), "compiled"
that loop with its step under torch.compile (ops/compiled.py), "reference" the loop itself.
What each covers: records.covers (else a ValueError).
"""

from __future__ import annotations

import torch

from mannlab.ops.compiled import compiled_step
from mannlab.ops.dnc.records import DNCOptions, DNCResult, DNCState, DNCWeights, covers

#: the ops package's name (mannlab.ops.dnc) and its backends, compiled ones first
NAME = "dnc"
BACKENDS = ("numba", "triton", "compiled", "reference")


def _check(
    x_proj: torch.Tensor, state: DNCState, weights: DNCWeights, options: DNCOptions, backend: str
) -> None:
    if backend not in BACKENDS:
        raise ValueError(
            f"dnc_sequence's backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
        )
    if not covers(options, weights, backend):
        raise ValueError(
            f"dnc_sequence: the {backend} backend implements the controller kinds FNN, ELMAN, LSTM "
            f"(pnr for the recurrent two) and the activations TANH, SIGMOID, RELU, the trace only the "
            f"reference; got {options}"
        )
    G, RW = weights.read_weight.shape
    if x_proj.dim() != 3 or x_proj.shape[-1] != G:
        raise ValueError(f"dnc_sequence: x_proj must be (B, T, G = {G}), got {tuple(x_proj.shape)}")
    batch, (heads, width) = x_proj.shape[0], state.read_vectors.shape[1:]
    if (
        state.memory.shape[0] != batch
        or state.read_vectors.shape[0] != batch
        or state.memory.shape[2] != width
    ):
        raise ValueError(
            f"dnc_sequence: the state must be for batch {batch} and width {width}: memory "
            f"{tuple(state.memory.shape)}, read vectors {tuple(state.read_vectors.shape)}"
        )
    if RW != heads * width:
        raise ValueError(f"dnc_sequence: W_r must be (G, R W = {heads * width}), got {(G, RW)}")


def dnc_sequence(
    x_proj: torch.Tensor, state: DNCState, weights: DNCWeights, options: DNCOptions, backend: str = "numba"
) -> DNCResult:
    """Steps (i)-(iv) of the DNC over a whole sequence on ``backend``: (features
    (B, T, H + R W), final state, trace or None). Differentiable in x_proj, the initial state
    and the weights; the trace carries no gradient."""
    _check(x_proj, state, weights, options, backend)
    if backend == "numba":
        from mannlab.ops.dnc.numba_sequence import numba_sequence

        return numba_sequence(x_proj, state, weights, options)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.dnc.triton_sequence import triton_sequence

        return triton_sequence(x_proj, state, weights, options)
    from mannlab.ops.dnc.reference import dnc_sequence_reference, sequence_step

    if backend == "compiled":
        step = compiled_step(sequence_step, options, x_proj.device.type)
        return dnc_sequence_reference(x_proj, state, weights, options, step)
    return dnc_sequence_reference(x_proj, state, weights, options)
