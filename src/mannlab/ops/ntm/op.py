"""The NTM's whole-sequence op, the one entry point of its fast path:

    features, state, trace = ntm_sequence(x_proj, state, weights, options, backend="numba")

x_proj (B, T, G) is the controller's input projection W_x x_t + b of every step (one matrix
product before the time loop), ``state`` an :class:`NTMSequenceState`, ``weights`` the
:class:`NTMWeights` the time loop multiplies by and ``options`` the :class:`NTMOptions`
(records.py). The backends compute ops/ntm/reference.py's loop, each as one autograd node:
"numba" the CPU kernels (numba_sequence.py over kernels.py), "triton" the GPU kernels
(triton_sequence.py over triton_kernels.py; on CPU tensors in Triton's interpreter),
"reference" the loop itself.
"""

from __future__ import annotations

from mannlab.ops.ntm.records import NTMOptions, NTMResult, NTMSequenceState, NTMWeights

BACKENDS = ("numba", "triton", "reference")


def ntm_sequence(
    x_proj, state: NTMSequenceState, weights: NTMWeights, options: NTMOptions, backend: str = "numba"
) -> NTMResult:
    """Steps (i)-(iv) of the NTM over a whole sequence on ``backend``: (features
    (B, T, d_h + R W), final state, trace or None). The trace carries no gradient."""
    if backend == "numba":
        from mannlab.ops.ntm.numba_sequence import numba_sequence

        return numba_sequence(x_proj, state, weights, options)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.ntm.triton_sequence import triton_sequence

        return triton_sequence(x_proj, state, weights, options)
    if backend == "reference":
        from mannlab.ops.ntm.reference import ntm_sequence_reference

        return ntm_sequence_reference(x_proj, state, weights, options)
    raise ValueError(
        f"ntm_sequence's backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
    )
