"""ARMIN's whole-sequence op, the one entry to its kernels:

    features, state, trace = armin_sequence(inputs, state, weights, options, backend="numba")

over typed records (records.py): ``inputs`` the :class:`ARMINInputs` (the projected input, the
draws), ``state`` the model's own :class:`ARMINState`, ``weights`` the :class:`ARMINWeights`,
``options`` the :class:`ARMINOptions`. ``backend`` runs it: "numba" the autograd Function over
the CPU kernels (numba_sequence.py), "triton" the one over the GPU kernels (triton_sequence.py;
GPU or Triton's interpreter), "compiled" the plain tensor loop of reference.py with its step
under torch.compile (ops/compiled.py), "reference" that loop as it is. What each covers:
records.covers (else a ValueError). Callers build the records by name and never see a kernel's
argument order.
"""

from __future__ import annotations

import torch

from mannlab.ops.armin.records import (
    MODES,
    NOISY_MODES,
    ARMINInputs,
    ARMINOptions,
    ARMINResult,
    ARMINState,
    ARMINWeights,
    covers,
)
from mannlab.ops.compiled import compiled_scheduled_step

#: the ops package's name (mannlab.ops.armin) and its backends, compiled ones first
NAME = "armin"
BACKENDS = ("numba", "triton", "compiled", "reference")


def _check(
    inputs: ARMINInputs, state: ARMINState, weights: ARMINWeights, options: ARMINOptions, backend: str
) -> None:
    if options.mode not in MODES:
        raise ValueError(f"ARMINOptions.mode must be one of {MODES}, got {options.mode!r}")
    if backend not in BACKENDS:
        raise ValueError(f"armin_sequence's backend must be one of {BACKENDS}, got {backend!r}")
    if not covers(options, weights, backend):
        raise ValueError(
            f"armin_sequence: the {backend} backend does not cover {options} at these sizes (the "
            "trace: the reference and compiled only; Triton: d_h, d_r, n_mem up to "
            "records.TRITON_MAX_SIZE)"
        )
    B, T = inputs.projected.shape[:2]
    n = state.memory.shape[1]
    if (inputs.noise is not None) != (options.mode in NOISY_MODES):
        raise ValueError(
            f"ARMINInputs.noise: Gumbel draws (T, B, n_mem) for the modes {NOISY_MODES} and None "
            f"otherwise; got {'none' if inputs.noise is None else 'noise'} for mode {options.mode!r}"
        )
    if inputs.noise is not None and tuple(inputs.noise.shape) != (T, B, n):
        raise ValueError(
            f"ARMINInputs.noise must be (T, B, n_mem) = {(T, B, n)}, got {tuple(inputs.noise.shape)}"
        )
    dh = state.hidden.shape[-1]
    if inputs.zoneout is not None and tuple(inputs.zoneout.shape) != (T, B, dh):
        raise ValueError(
            f"ARMINInputs.zoneout must be (T, B, d_h) = {(T, B, dh)}, got {tuple(inputs.zoneout.shape)}"
        )


def armin_sequence(
    inputs: ARMINInputs,
    state: ARMINState,
    weights: ARMINWeights,
    options: ARMINOptions = ARMINOptions(),
    backend: str = "numba",
) -> ARMINResult:
    """A whole sequence of ARMIN steps (eqs. 3-10, the write of section 3.3; auto-addressing
    read, tied write, control gates, layer norm, optional zoneout): o (B, T, d_h + d_r), the
    final state (h_T, M_T, steps + T; the read counts and last read passed through) and the trace
    or None. Differentiable in the projected input, h_0, M_0 and every weight (not in the noise
    or zoneout weights, which are drawn, not learned); the trace carries no gradient."""
    _check(inputs, state, weights, options, backend)
    options = options._replace(inverse_temperature=float(options.inverse_temperature))
    if backend == "reference":
        from mannlab.ops.armin.reference import armin_reference

        return armin_reference(inputs, state, weights, options)
    if backend == "compiled":  # 1/τ a tensor: one compile for every 1/τ a schedule sets
        from mannlab.ops.armin.reference import armin_reference, sequence_step

        step, temperature = compiled_scheduled_step(sequence_step, options, inputs.projected)
        return armin_reference(inputs, state, weights, options, step, temperature)
    function: type[torch.autograd.Function]
    if backend == "triton":
        from mannlab.ops.armin.triton_sequence import ARMINTritonSequence

        function = ARMINTritonSequence
    else:
        from mannlab.ops.armin.numba_sequence import ARMINSequence

        function = ARMINSequence
    features, hidden, memory = function.apply(
        options,
        inputs.projected,
        inputs.noise,
        inputs.zoneout,
        state.hidden,
        state.memory,
        state.steps,
        *weights,
    )
    final = state._replace(hidden=hidden, memory=memory, steps=state.steps + inputs.projected.shape[1])
    return ARMINResult(features, final, None)
