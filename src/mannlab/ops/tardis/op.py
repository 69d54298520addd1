"""TARDIS's whole-sequence op, the one entry to its kernels:

    steps, state = tardis_sequence(inputs, state, weights, options, backend="numba")

over the typed records of records.py. ``backend`` picks the implementation: "numba" the autograd
Function over the CPU kernels (numba_sequence.py), "triton" the one over the Triton kernels
(triton_sequence.py; GPU, or CPU tensors in Triton's interpreter; sizes records.triton_covers,
else a ValueError), "reference" the plain tensor loop (reference.py); callers build the records
by name and never see a kernel's argument order.
"""

from __future__ import annotations

from mannlab.ops.tardis.records import (
    BACKENDS,
    MODES,
    NOISY_MODES,
    TARDISCarry,
    TARDISInputs,
    TARDISOptions,
    TARDISResult,
    TARDISWeights,
)


def _expect_shape(name: str, value, shape: tuple) -> None:
    if value is not None and tuple(value.shape) != shape:
        raise ValueError(f"TARDISInputs.{name} must be {shape}, got {tuple(value.shape)}")


def _check(inputs: TARDISInputs, state: TARDISCarry, options: TARDISOptions, backend: str) -> None:
    if options.mode not in MODES:
        raise ValueError(f"TARDISOptions.mode must be one of {MODES}, got {options.mode!r}")
    if backend not in BACKENDS:
        raise ValueError(f"tardis_sequence's backend must be one of {BACKENDS}, got {backend!r}")
    B, T = inputs.gates.shape[:2]
    d, k = state.hidden.shape[-1], state.content.shape[1]
    noisy = inputs.logistic is not None and options.mode in NOISY_MODES
    if (inputs.gumbel is not None) != noisy:
        raise ValueError(
            f"TARDISInputs.gumbel: the reads' Gumbel noise (T, B, k) in training (logistic noise "
            f"given) in the modes {NOISY_MODES}, else None; got "
            f"{'none' if inputs.gumbel is None else 'noise'} for mode {options.mode!r} "
            f"{'in training' if inputs.logistic is not None else 'at evaluation'}"
        )
    _expect_shape("gumbel", inputs.gumbel, (T, B, k))
    _expect_shape("logistic", inputs.logistic, (T, B, 2))
    _expect_shape("dropout", inputs.dropout, (T, B, d))
    _expect_shape("gates", inputs.gates, (B, T, 4 * d + 2))


def tardis_sequence(
    inputs: TARDISInputs,
    state: TARDISCarry,
    weights: TARDISWeights,
    options: TARDISOptions = TARDISOptions(),
    backend: str = "numba",
) -> TARDISResult:
    """A whole sequence of TARDIS steps (eqs. 1-10, 18-19, the writes of algorithm 1): the
    per-step h_t, r_t and trace values (:class:`TARDISSteps`) and the final state.
    Differentiable in the input projections, h_0, c_0, C_0 and every weight (not in the noise,
    the masks, the counts or the addresses). ``backend``: one of :data:`BACKENDS`, "numba"
    (CPU), "triton" (GPU, or Triton's interpreter) or "reference"."""
    _check(inputs, state, options, backend)
    if backend == "reference":
        from mannlab.ops.tardis.reference import tardis_reference

        return tardis_reference(inputs, state, weights, options)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.tardis.triton_sequence import triton_sequence

        return triton_sequence(inputs, state, weights, options)
    from mannlab.ops.tardis.numba_sequence import numba_sequence

    return numba_sequence(inputs, state, weights, options)


__all__ = ["tardis_sequence"]
