"""ARMIN's whole-sequence op, the one entry to its kernels: ``armin_sequence(inputs, state,
weights, options) -> (outputs, state)`` over typed records (records.py). The backend named in
the options runs it: the numba autograd Function (numba_sequence.py, CPU), the Triton one
(triton_sequence.py, GPU or Triton's interpreter) or the plain tensor loop (reference.py);
callers build the records by name and never see a kernel's argument order.
"""

from __future__ import annotations

import torch

from mannlab.ops.armin.records import (
    BACKENDS,
    MODES,
    NOISY_MODES,
    ARMINCarry,
    ARMINInputs,
    ARMINOptions,
    ARMINWeights,
)


def _check(inputs: ARMINInputs, state: ARMINCarry, weights: ARMINWeights, options: ARMINOptions) -> None:
    if options.mode not in MODES:
        raise ValueError(f"ARMINOptions.mode must be one of {MODES}, got {options.mode!r}")
    if options.backend not in BACKENDS:
        raise ValueError(f"ARMINOptions.backend must be one of {BACKENDS}, got {options.backend!r}")
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
    inputs: ARMINInputs, state: ARMINCarry, weights: ARMINWeights, options: ARMINOptions = ARMINOptions()
) -> tuple[torch.Tensor, ARMINCarry]:
    """A whole sequence of ARMIN steps (eqs. 3-10, the write of section 3.3; auto-addressing
    read, tied write, control gates, layer norm, optional zoneout): o (B, T, d_h + d_r) and the
    final state (h_T, M_T, steps + T). Differentiable in the projected input, h_0, M_0 and
    every weight (not in the noise or zoneout weights, which are drawn, not learned)."""
    _check(inputs, state, weights, options)
    options = options._replace(inverse_temperature=float(options.inverse_temperature))
    if options.backend == "reference":
        from mannlab.ops.armin.reference import armin_reference

        return armin_reference(inputs, state, weights, options)
    function: type[torch.autograd.Function]
    if options.backend == "triton":
        from mannlab.ops.armin.triton_sequence import ARMINTritonSequence

        function = ARMINTritonSequence
    else:
        from mannlab.ops.armin.numba_sequence import ARMINSequence

        function = ARMINSequence
    out, h, memory = function.apply(options, *inputs, *state, *weights)
    return out, ARMINCarry(h, memory, state.steps + inputs.projected.shape[1])
