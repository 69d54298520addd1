"""The NTM's whole-sequence op, the one entry point of its fast path:

    features, state, trace = ntm_sequence(x_proj, state, weights, options, backend="numba")

x_proj (B, T, G) is the controller's input projection W_x x_t + b of every step (one matrix
product before the time loop), ``state`` the model's own :class:`NTMState`, ``weights`` the
:class:`NTMWeights` the time loop multiplies by and ``options`` the :class:`NTMOptions`
(records.py). The backends compute ops/ntm/reference.py's loop, each as one autograd node:
"numba" the CPU kernels (numba_sequence.py over kernels.py), "triton" the GPU kernels
(triton_sequence.py over triton_kernels.py; on CPU tensors in Triton's interpreter),
"compiled" that loop with its step under torch.compile (ops/compiled.py), "reference" the
loop itself. What each covers: records.covers.
"""

from __future__ import annotations

import torch

from mannlab.ops.compiled import compiled_step
from mannlab.ops.ntm.records import NTMOptions, NTMResult, NTMState, NTMWeights

#: the ops package's name (mannlab.ops.ntm) and its backends, compiled ones first
NAME = "ntm"
BACKENDS = ("numba", "triton", "compiled", "reference")


def _check(x_proj: torch.Tensor, state: NTMState, weights: NTMWeights, options: NTMOptions) -> None:
    if x_proj.dim() != 3 or x_proj.shape[-1] != weights.read_weight.shape[0]:
        raise ValueError(
            f"ntm_sequence: x_proj must be (B, T, G = {weights.read_weight.shape[0]}), "
            f"got {tuple(x_proj.shape)}"
        )
    batch, (heads, width) = x_proj.shape[0], state.read_vectors.shape[1:]
    if width != options.width or state.memory.shape[0] != batch or state.read_vectors.shape[0] != batch:
        raise ValueError(
            f"ntm_sequence: the state must be for batch {batch} and width {options.width}: memory "
            f"{tuple(state.memory.shape)}, read vectors {tuple(state.read_vectors.shape)}"
        )
    if weights.read_weight.shape[1] != heads * width:
        raise ValueError(
            f"ntm_sequence: W_r must be (G, R W = {heads * width}), got {tuple(weights.read_weight.shape)}"
        )


def ntm_sequence(
    x_proj: torch.Tensor, state: NTMState, weights: NTMWeights, options: NTMOptions, backend: str = "numba"
) -> NTMResult:
    """Steps (i)-(iv) of the NTM over a whole sequence on ``backend``: (features
    (B, T, d_h + R W), final state, trace or None). The trace carries no gradient."""
    _check(x_proj, state, weights, options)
    if backend == "numba":
        from mannlab.ops.ntm.numba_sequence import numba_sequence

        return numba_sequence(x_proj, state, weights, options)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.ntm.triton_sequence import triton_sequence

        return triton_sequence(x_proj, state, weights, options)
    if backend in ("reference", "compiled"):
        from mannlab.ops.ntm.reference import ntm_sequence_reference, sequence_step

        step = sequence_step
        if backend == "compiled":
            step = compiled_step(sequence_step, options, x_proj.device.type)
        return ntm_sequence_reference(x_proj, state, weights, options, step)
    raise ValueError(
        f"ntm_sequence's backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
    )
