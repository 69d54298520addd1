"""The DNC's whole-sequence op, the one entry point of its fast path:

    features, state = dnc_sequence(x_proj, state, weights, options, backend="numba")

x_proj (B, T, G) is the controller's input projection W_x x_t + b of every step (one matrix
product before the time loop), ``state`` a :class:`DNCSequenceState`, ``weights`` the
:class:`DNCWeights` the time loop multiplies by and ``options`` the :class:`DNCOptions`
(records.py). The backends compute ops/dnc/reference.py's loop: "numba" as one autograd node
over the CPU kernels (numba_sequence.py over kernels.py), "triton" as one over the GPU kernels
(triton_sequence.py over triton_kernels.py; on CPU tensors in Triton's interpreter; the options
records.triton_covers, else a ValueError), "reference" the loop itself.
"""

from __future__ import annotations

from mannlab.ops.dnc.records import BACKENDS, DNCOptions, DNCResult, DNCSequenceState, DNCWeights


def dnc_sequence(
    x_proj, state: DNCSequenceState, weights: DNCWeights, options: DNCOptions, backend: str = "numba"
) -> DNCResult:
    """Steps (i)-(iv) of the DNC over a whole sequence on ``backend``: (features
    (B, T, H + R W), final state). Differentiable in x_proj, the initial state and the
    weights."""
    if backend == "numba":
        from mannlab.ops.dnc.numba_sequence import numba_sequence

        return numba_sequence(x_proj, state, weights, options)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.dnc.triton_sequence import triton_sequence

        return triton_sequence(x_proj, state, weights, options)
    if backend == "reference":
        from mannlab.ops.dnc.reference import dnc_sequence_reference

        return dnc_sequence_reference(x_proj, state, weights, options)
    raise ValueError(
        f"dnc_sequence's backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
    )
