"""The D-NTM's whole-sequence op, the only way in to its kernels:

    features, state, trace = dntm_sequence(inputs, state, weights, options, backend="numba")

over the typed records of records.py: ``state`` is the model's own :class:`DNTMState`, the
trace its :class:`DNTMStepTrace`. The backend "numba" runs numba_sequence.py's autograd
Function over kernels.py (CPU), "triton" triton_sequence.py's over triton_kernels.py (GPU; on
CPU tensors in Triton's interpreter; the options records.covers, else a ValueError),
"compiled" reference.py's tensor loop with its step under torch.compile (ops/compiled.py),
"reference" that loop as it is. What each covers: records.covers. The records are
checked here, once, for every backend; a caller fills them by name and never sees the kernels'
argument order or the offsets of their outputs.
"""

from __future__ import annotations

from mannlab.ops.compiled import compiled_scheduled_step
from mannlab.ops.controller_codes import TANH
from mannlab.ops.dntm.records import (
    MODES,
    NOISY_MODES,
    WRITE_KEYS,
    WRITES,
    DNTMInputs,
    DNTMOptions,
    DNTMResult,
    DNTMState,
    DNTMWeights,
)
from mannlab.ops.fields import expect_shape

#: the ops package's name (mannlab.ops.dntm) and its backends, compiled ones first: the numba
#: kernels (CPU), the Triton kernels (GPU; on CPU tensors in Triton's interpreter), the plain
#: tensor loop of reference.py with its step compiled, and as it is
NAME = "dntm"
BACKENDS = ("numba", "triton", "compiled", "reference")


def _check(
    inputs: DNTMInputs, state: DNTMState, weights: DNTMWeights, options: DNTMOptions, backend: str
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
    if options.activation != TANH:
        raise ValueError(
            f"DNTMOptions.activation: the op implements the tanh feed-forward controller (code {TANH}), "
            f"got code {options.activation!r}"
        )
    if inputs.projected.dim() != 3:
        raise ValueError(f"DNTMInputs.projected must be (B, T, .), got {tuple(inputs.projected.shape)}")
    B, T = inputs.projected.shape[:2]
    R, H = state.read_lru.shape[1], state.write_lru.shape[1]
    N, dc = state.content.shape[1:]
    gru = weights.recurrent_weight is not None
    if len(state.controller) != int(gru):
        raise ValueError(
            "DNTMState.controller: (h,) of the GRU with DNTMWeights.recurrent_weight, () for the "
            f"feed-forward controller; got {len(state.controller)} tensors with "
            f"{'a' if gru else 'no'} recurrent weight"
        )
    if state.location:
        raise ValueError("DNTMState.location: the op has no location-based addressing, give ()")
    sequential = options.writes == "sequential"
    if sequential and H != 1:
        raise ValueError(f"DNTMOptions.writes='sequential' needs one write head, got {H}")
    if bool(state.counts) != sequential:
        raise ValueError(
            "DNTMState.counts: the DNTMWriteCounts (B,) and (B, N') with writes='sequential', "
            f"else (); got writes={options.writes!r}"
        )
    if sequential:
        expect_shape("DNTMState.counts.written", state.counts.written, (B,))
        expect_shape("DNTMState.counts.reads", state.counts.reads, (B, N))
    W = weights.address.shape[1] + dc
    for field, tensor, shape in (
        ("DNTMState.content", state.content, (B, N, dc)),
        ("DNTMState.read_vectors", state.read_vectors, (B, R, W)),
        ("DNTMState.read_lru", state.read_lru, (B, R, N)),
        ("DNTMState.write_lru", state.write_lru, (B, H, N)),
        ("DNTMWeights.read_weight", weights.read_weight, (weights.read_weight.shape[0], R * W)),
        ("DNTMWeights.address", weights.address, (N, W - dc)),
    ):
        expect_shape(field, tensor, shape)
    if gru:
        expect_shape("DNTMState.controller[0]", state.controller[0], (B, weights.head_weight.shape[1]))
    noisy = options.mode in NOISY_MODES
    if (inputs.draws is not None) != noisy:
        raise ValueError(
            f"DNTMInputs.draws: the Exp(1) draws (T J, B K' N') in the modes {NOISY_MODES}, else None; "
            f"got {'none' if inputs.draws is None else 'draws'} for mode {options.mode!r}"
        )
    sampled = R + (0 if sequential else H)
    expect_shape("DNTMInputs.draws", inputs.draws, (T * options.addressing_steps, B * sampled * N))


def dntm_sequence(
    inputs: DNTMInputs,
    state: DNTMState,
    weights: DNTMWeights,
    options: DNTMOptions = DNTMOptions(),
    backend: str = "numba",
) -> DNTMResult:
    """A whole sequence of D-NTM steps (eqs. 1-13, section 4's discrete weightings): the
    per-step features [h_t; φ_t], the final state and, with ``options.trace``, the per-step
    internals (:class:`DNTMStepTrace`). Differentiable in the input
    projections, h_0, C_0, φ_0, the LRU averages v_0 and every weight (not in the draws or the
    counts of sequential writes)."""
    _check(inputs, state, weights, options, backend)
    if backend == "reference":
        from mannlab.ops.dntm.reference import dntm_reference

        return dntm_reference(inputs, state, weights, options)
    if backend == "compiled":  # 1/τ a tensor: one compile for every 1/τ a schedule sets
        from mannlab.ops.dntm.reference import dntm_reference, sequence_step

        step, temperature = compiled_scheduled_step(sequence_step, options, inputs.projected)
        return dntm_reference(inputs, state, weights, options, step, temperature)
    if backend == "triton":  # imports Triton: only when asked for
        from mannlab.ops.dntm.triton_sequence import triton_sequence

        return triton_sequence(inputs, state, weights, options)
    from mannlab.ops.dntm.numba_sequence import numba_sequence

    return numba_sequence(inputs, state, weights, options)


__all__ = ["BACKENDS", "NAME", "dntm_sequence"]
