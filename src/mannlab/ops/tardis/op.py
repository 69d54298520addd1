"""TARDIS's whole-sequence op, the one entry to its kernels:

    features, state, trace = tardis_sequence(inputs, state, weights, options, backend="numba")

over the typed records of records.py: ``state`` is the model's own :class:`TARDISState`, the
trace its :class:`TARDISStepTrace`. ``backend`` picks the implementation: "numba" the autograd
Function over the CPU kernels (numba_sequence.py), "triton" the one over the Triton kernels
(triton_sequence.py; GPU, or CPU tensors in Triton's interpreter; sizes records.covers, else a
ValueError), "compiled" the plain tensor loop of reference.py with its step under torch.compile
(ops/compiled.py), "reference" that loop as it is; callers build the records by name and never
see a kernel's argument order. What each backend covers: records.covers.
"""

from __future__ import annotations

from mannlab.ops.compiled import compiled_scheduled_step
from mannlab.ops.fields import expect_shape
from mannlab.ops.tardis.records import (
    MODES,
    NOISY_MODES,
    TARDISInputs,
    TARDISOptions,
    TARDISResult,
    TARDISState,
    TARDISWeights,
    sizes,
)

#: the ops package's name (mannlab.ops.tardis) and its backends, compiled ones first: the numba
#: kernels (CPU), the Triton kernels (GPU; on CPU tensors in Triton's interpreter), the plain
#: tensor loop of reference.py with its step compiled, and as it is
NAME = "tardis"
BACKENDS = ("numba", "triton", "compiled", "reference")


def _check(
    inputs: TARDISInputs, state: TARDISState, weights: TARDISWeights, options: TARDISOptions, backend: str
) -> None:
    if options.mode not in MODES:
        raise ValueError(f"TARDISOptions.mode must be one of {MODES}, got {options.mode!r}")
    if backend not in BACKENDS:
        raise ValueError(f"tardis_sequence's backend must be one of {BACKENDS}, got {backend!r}")
    if inputs.gates.dim() != 3:
        raise ValueError(f"TARDISInputs.gates must be (B, T, G), got {tuple(inputs.gates.shape)}")
    B, T = inputs.gates.shape[:2]
    d, k, q, m = sizes(weights)
    c = state.content.shape[-1]
    noisy = inputs.logistic is not None and options.mode in NOISY_MODES
    if (inputs.gumbel is not None) != noisy:
        raise ValueError(
            f"TARDISInputs.gumbel: the reads' Gumbel noise (T, B, k) in training (logistic noise "
            f"given) in the modes {NOISY_MODES}, else None; got "
            f"{'none' if inputs.gumbel is None else 'noise'} for mode {options.mode!r} "
            f"{'in training' if inputs.logistic is not None else 'at evaluation'}"
        )
    expect_shape("TARDISInputs.gumbel", inputs.gumbel, (T, B, k))
    expect_shape("TARDISInputs.logistic", inputs.logistic, (T, B, 2))
    expect_shape("TARDISInputs.dropout", inputs.dropout, (T, B, d))
    expect_shape("TARDISInputs.gates", inputs.gates, (B, T, 4 * d + 2))
    expect_shape("TARDISInputs.read", inputs.read, (B, T, m))
    expect_shape("TARDISState.hidden", state.hidden, (B, d))
    expect_shape("TARDISState.cell", state.cell, (B, d))
    expect_shape("TARDISState.content", state.content, (B, k, c))
    expect_shape("TARDISState.read_counts", state.read_counts, (B, k))
    expect_shape("TARDISState.last_read", state.last_read, (B, k))
    expect_shape("TARDISState.steps", state.steps, (B,))
    expect_shape("TARDISWeights.address", weights.address, (k, q - c))
    expect_shape("TARDISWeights.read_gates", weights.read_gates, (4 * d + 2, q))
    expect_shape("TARDISWeights.micro_state", weights.micro_state, (c, d))


def tardis_sequence(
    inputs: TARDISInputs,
    state: TARDISState,
    weights: TARDISWeights,
    options: TARDISOptions = TARDISOptions(),
    backend: str = "numba",
) -> TARDISResult:
    """A whole sequence of TARDIS steps (eqs. 1-10, 18-19, the writes of algorithm 1): the
    features [h_t; r_t] (B, T, d + q) the fusion g of eq. 11 reads, the final state and, with
    ``options.trace``, the per-step internals (:class:`TARDISStepTrace`). Differentiable in the
    input projections, h_0, c_0, C_0 and every weight (not in the noise, the masks, the counts
    or the addresses). ``backend``: one of :data:`BACKENDS`, "numba" (CPU), "triton" (GPU, or
    Triton's interpreter), "compiled" or "reference"."""
    _check(inputs, state, weights, options, backend)
    if backend in ("reference", "compiled"):
        from mannlab.ops.tardis.reference import sequence_step, tardis_reference

        step = sequence_step
        if backend == "compiled":  # the step reads a scheduled 1/τ as a tensor: one compile for all
            step, _ = compiled_scheduled_step(sequence_step, options, inputs.gates)
        return tardis_reference(inputs, state, weights, options, step)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.tardis.triton_sequence import triton_sequence

        return triton_sequence(inputs, state, weights, options)
    from mannlab.ops.tardis.numba_sequence import numba_sequence

    return numba_sequence(inputs, state, weights, options)


__all__ = ["BACKENDS", "NAME", "tardis_sequence"]
