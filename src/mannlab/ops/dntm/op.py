"""``dntm_sequence(inputs, state, weights, options, backend="numba") -> (steps, state)``: a whole
D-NTM sequence over the typed records of records.py, the only way in to the D-NTM's kernels.
The backend "numba" runs numba_sequence.py's autograd Function over kernels.py (CPU),
"triton" triton_sequence.py's over triton_kernels.py (GPU; on CPU tensors in Triton's
interpreter; the options records.triton_covers, else a ValueError), "reference"
reference.py's tensor loop. The records are checked here, once, for every
backend; a caller fills them by name and never sees the kernels' argument order or the
offsets of their outputs.
"""

from __future__ import annotations

from mannlab.ops.dntm.records import (
    BACKENDS,
    MODES,
    NOISY_MODES,
    WRITE_KEYS,
    WRITES,
    DNTMCarry,
    DNTMInputs,
    DNTMOptions,
    DNTMResult,
    DNTMWeights,
)


def _expect_size(name: str, value, shape: tuple) -> None:
    if value is not None and tuple(value.shape) != shape:
        raise ValueError(f"{name} must be {shape}, got {tuple(value.shape)}")


def _check(
    inputs: DNTMInputs, state: DNTMCarry, weights: DNTMWeights, options: DNTMOptions, backend: str
) -> None:
    for name, value, allowed in (
        ("mode", options.mode, MODES),
        ("write_keys", options.write_keys, WRITE_KEYS),
        ("writes", options.writes, WRITES),
    ):
        if value not in allowed:
            raise ValueError(f"DNTMOptions.{name} must be one of {allowed}, got {value!r}")
    if backend not in BACKENDS:
        raise ValueError(f"dntm_sequence's backend must be one of {BACKENDS}, got {backend!r}")
    B, T = inputs.projected.shape[:2]
    R, H = state.read_lru.shape[1], state.write_lru.shape[1]
    N = state.content.shape[1]
    gru = weights.recurrent_weight is not None
    if (state.hidden is not None) != gru:
        raise ValueError(
            "DNTMCarry.hidden: the GRU's h (B, d_h) with DNTMWeights.recurrent_weight, None for the "
            f"feed-forward controller; got {'h' if state.hidden is not None else 'none'} with "
            f"{'a' if gru else 'no'} recurrent weight"
        )
    sequential = options.writes == "sequential"
    if sequential and H != 1:
        raise ValueError(f"DNTMOptions.writes='sequential' needs one write head, got {H}")
    if (state.written is not None, state.reads is not None) != (sequential, sequential):
        raise ValueError(
            "DNTMCarry.written and .reads: the counts (B,) and (B, N') with writes='sequential', "
            f"else None; got writes={options.writes!r}"
        )
    _expect_size("DNTMCarry.written", state.written, (B,))
    _expect_size("DNTMCarry.reads", state.reads, (B, N))
    noisy = options.mode in NOISY_MODES
    if (inputs.draws is not None) != noisy:
        raise ValueError(
            f"DNTMInputs.draws: the Exp(1) draws (T J, B K' N') in the modes {NOISY_MODES}, else None; "
            f"got {'none' if inputs.draws is None else 'draws'} for mode {options.mode!r}"
        )
    sampled = R + (0 if sequential else H)
    _expect_size("DNTMInputs.draws", inputs.draws, (T * options.addressing_steps, B * sampled * N))


def dntm_sequence(
    inputs: DNTMInputs,
    state: DNTMCarry,
    weights: DNTMWeights,
    options: DNTMOptions = DNTMOptions(),
    backend: str = "numba",
) -> DNTMResult:
    """A whole sequence of D-NTM steps (eqs. 1-13, section 4's discrete weightings): the
    per-step features [h_t; φ_t] and, with ``options.trace``, the weightings, head activations
    and memory (:class:`DNTMSteps`), and the final state. Differentiable in the input
    projections, h_0, C_0, φ_0, the LRU averages v_0 and every weight (not in the draws or the
    counts of sequential writes)."""
    _check(inputs, state, weights, options, backend)
    if backend == "reference":
        from mannlab.ops.dntm.reference import dntm_reference

        return dntm_reference(inputs, state, weights, options)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.dntm.triton_sequence import triton_sequence

        return triton_sequence(inputs, state, weights, options)
    from mannlab.ops.dntm.numba_sequence import numba_sequence

    return numba_sequence(inputs, state, weights, options)


__all__ = ["dntm_sequence"]
