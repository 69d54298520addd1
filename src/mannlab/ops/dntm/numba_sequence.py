"""The D-NTM's numba path: a whole sequence (eqs. 1-13, section 4's discrete weightings) as one
autograd node over the kernels of ops/dntm/kernels.py. Reached through
mannlab.ops.dntm.dntm_sequence (backend "numba"); tests/ops/test_dntm_ops.py checks it against
reference.py, tests/models/test_dntm.py the model on it against the cell's step loop.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.dntm.records import (
    MODES,
    DNTMInputs,
    DNTMOptions,
    DNTMResult,
    DNTMState,
    DNTMStateRows,
    DNTMWeights,
    head_sizes,
    model_state,
    state_rows,
    step_trace,
)
from mannlab.ops.fields import split_records
from mannlab.ops.threads import KEEP, SUM, Blocks, Rows

GUMBEL = MODES.index("gumbel")
#: the op's differentiable arguments after the options, in the order DNTMSequence.apply takes them
ARGUMENTS = DNTMInputs._fields + DNTMStateRows._fields + DNTMWeights._fields


def numba_sequence(
    inputs: DNTMInputs, state: DNTMState, weights: DNTMWeights, options: DNTMOptions
) -> DNTMResult:
    """The whole-sequence op on the numba kernels (CPU float32/float64 tensors): the state in
    and out as the kernels' rows (records.state_rows, records.model_state)."""
    B, T = inputs.projected.shape[:2]
    R, H = state.read_lru.shape[1], state.write_lru.shape[1]
    N, dc = state.content.shape[1:]
    W, J, K = state.read_vectors.shape[-1], options.addressing_steps, R + H
    out = SequenceOutputs(*DNTMSequence.apply(options, *inputs, *state_rows(state), *weights))
    gru, sequential = weights.recurrent_weight is not None, options.writes == "sequential"
    rows = DNTMStateRows(
        hidden=out.hidden if gru else None,
        content=out.content,
        read_vectors=out.read_vectors,
        read_lru=out.read_lru,
        write_lru=out.write_lru,
        written=out.written if sequential else None,
        reads=out.reads if sequential else None,
    )
    final = model_state(rows, state)
    if not options.trace:
        return DNTMResult(out.features, final, None)
    probs = out.probs.view(B, T, J, K, N)
    read_p = probs[:, :, :, :R].reshape(B, T, J * R, N)
    write_p = probs[:, :, :, R:].reshape(B, T, J * H, N)
    if sequential:  # the chosen cells' one-hots, fixed
        write_p = write_p.detach()
    if options.mode != "soft":
        one_hot = torch.zeros_like(probs).scatter_(-1, out.chosen.view(B, T, J, K, 1), 1.0)
        read_w = one_hot[:, :, :, :R].reshape(B, T, J * R, N)
        write_w = one_hot[:, :, :, R:].reshape(B, T, J * H, N)
    else:
        read_w, write_w = read_p, write_p
    write_key_size = W if options.write_keys == "memory" else dc
    _, _, strengths, gates, erase, alpha, candidates = out.activations.view(B, T, J, -1).split(
        head_sizes(R, H, W, write_key_size, dc), -1
    )
    trace = step_trace(
        out.features,
        state,
        options,
        read_weights=read_w,
        write_weights=write_w,
        read_probs=read_p,
        write_probs=write_p,
        erase_vectors=erase.reshape(B, T, J * H, dc),
        candidates=candidates.reshape(B, T, J * H, dc),
        input_gates=alpha.reshape(B, T, J * H),
        key_strengths=strengths.reshape(B, T, J * K),
        lru_gates=gates.reshape(B, T, J * K),
        memory=out.memory,
    )
    return DNTMResult(out.features, final, trace)


def checkpoint_interval(steps: int) -> int:
    """The forward keeps the memory for the backward every ceil(sqrt(T J)) steps (the backward
    recomputes the others)."""
    return math.isqrt(steps - 1) + 1


class SequenceOutputs(NamedTuple):
    """What DNTMSequence returns: the features (B, T, d_h + R W); the final h, φ (B, R W), C,
    v^r, v^w and counts of writes and reads (whatever the configuration; the caller keeps
    what applies); and the kernels' records: probabilities (B, T J, K, N'), head
    activations (B, T J, P), the memory [A; C_t] after each time step (B, T, N', W; with
    the trace) and the chosen cells (B, T J, K; no gradient)."""

    features: torch.Tensor
    hidden: torch.Tensor
    read_vectors: torch.Tensor
    content: torch.Tensor
    read_lru: torch.Tensor
    write_lru: torch.Tensor
    written: torch.Tensor
    reads: torch.Tensor
    probs: torch.Tensor
    activations: torch.Tensor
    memory: torch.Tensor
    chosen: torch.Tensor


class KernelOptions(NamedTuple):
    """The kernels' configuration arguments, in the order both kernels take them (after the
    arrays): heads, J, GRU, LRU, NOP, write keys over [A; C], sequential writes, mode (its
    integer code), ε, the LRU decay."""

    read_heads: int
    write_heads: int
    addressing_steps: int
    gru: bool
    lru: bool
    nop: bool
    memory_keys: bool
    fixed_writes: bool
    mode: int
    similarity_eps: float
    lru_decay: float


def kernel_options(options: DNTMOptions, read_heads: int, write_heads: int, gru: bool) -> KernelOptions:
    return KernelOptions(
        read_heads,
        write_heads,
        options.addressing_steps,
        gru,
        options.lru,
        options.nop,
        options.write_keys == "memory",
        options.writes == "sequential",
        MODES.index(options.mode),
        options.similarity_eps,
        options.lru_decay,
    )


class NumbaRecords(NamedTuple):
    """The per-step records kernels.sequence_forward returns, in its order (see kernels.py),
    as tensors over its arrays."""

    hnew: torch.Tensor
    activations: torch.Tensor
    beta_pre: torch.Tensor
    probs: torch.Tensor
    chosen: torch.Tensor  # the chosen cells
    memory: torch.Tensor


class SavedTensors(NamedTuple):
    """The tensors the forward keeps for its backward beside the kernels' records and per-block
    checkpoints (through save_for_backward: a tensor kept on ctx would make a reference
    cycle). ``draws`` in the kernels' layout, with the write columns of sequential writes."""

    projected: torch.Tensor
    hidden: Optional[torch.Tensor]
    read_weight: torch.Tensor
    recurrent_weight: Optional[torch.Tensor]
    head_weight: torch.Tensor
    address: torch.Tensor
    draws: torch.Tensor


def _noise_rows(B, R, H, N):
    """Cuts the Exp(1) draws (T J, B K N) to rows [start, stop): each step's row holds the
    read heads' draws (B, R, N), then the write heads' (B, H, N)."""

    def cut(noise, start, stop):
        S = noise.shape[0]
        reads = noise[:, : B * R * N].reshape(S, B, R * N)[:, start:stop]
        writes = noise[:, B * R * N :].reshape(S, B, H * N)[:, start:stop]
        return np.concatenate([reads.reshape(S, -1), writes.reshape(S, -1)], 1)

    return cut


def _kernel_draws(draws, xp, B, H, N, sequential):
    """The draws as the kernels read them: (T J, B (R + H) N), the write heads' columns
    (unread) added for sequential writes; a placeholder without draws."""
    if draws is None:
        return xp.new_zeros(1, 1)
    if sequential:
        return torch.cat([draws, draws.new_ones(draws.shape[0], B * H * N)], 1)
    return draws


def _rows_if(grad, placeholder):
    """A gradient of the records as a kernel argument: its rows, or (not given) a placeholder."""
    return placeholder if grad is None else Rows(as_array(grad))


class DNTMSequence(torch.autograd.Function):
    """A whole D-NTM sequence (eqs. 1-13, section 4's discrete weightings) as one autograd node
    whose forward and backward are single calls of ops/dntm/kernels.py. Called by
    :func:`numba_sequence` with the options and the fields of the records in order (the
    DNTMInputs, the state's :class:`DNTMStateRows`, the DNTMWeights); returns the
    :class:`SequenceOutputs`. The weight gradients are one matrix product each over all
    B T J steps."""

    @staticmethod
    def forward(ctx, options: DNTMOptions, *tensors):
        named = dict(zip(ARGUMENTS, tensors))
        xp, draws = named["projected"], named["draws"]
        h0, c0, phi0 = named["hidden"], named["content"], named["read_vectors"]
        w = DNTMWeights(*(named[name] for name in DNTMWeights._fields))
        gru, sequential = w.recurrent_weight is not None, options.writes == "sequential"
        a = as_array
        dummy = np.zeros((1, 1), a(xp).dtype)
        B, T = xp.shape[:2]
        N = w.address.shape[0]
        R, H = named["read_lru"].shape[1], named["write_lru"].shape[1]
        every = checkpoint_interval(T * options.addressing_steps)
        config = kernel_options(options, R, H, gru)
        noise = _kernel_draws(draws, xp, B, H, N, sequential)
        if sequential:
            written0, reads0 = named["written"], named["reads"]
        else:
            written0, reads0 = xp.new_zeros(B), xp.new_zeros(B, N)
        hidden0 = h0 if gru else xp.new_zeros(B, w.head_weight.shape[1])
        kernels = dispatch.load("dntm")
        assert kernels is not None  # dispatch chose this path: they loaded
        out, h, phi, c, vr, vw, written, reads, records, saved = threads.call(
            kernels.sequence_forward,
            (
                Rows(a(xp)),
                Rows(a(noise), _noise_rows(B, R, H, N)) if draws is not None else a(noise),
                Rows(a(hidden0)),
                Rows(a(phi0)),
                Rows(a(c0)),
                Rows(a(named["read_lru"])),
                Rows(a(named["write_lru"])),
                a(w.read_weight.t()),
                a(w.recurrent_weight.t()) if w.recurrent_weight is not None else dummy,
                a(w.recurrent_bias) if w.recurrent_bias is not None else dummy[0],
                a(w.head_weight.t()),
                a(w.head_bias),
                a(w.address),
                Rows(a(written0)),
                Rows(a(reads0)),
                *config,
                options.keep,
                options.trace,
                every,
            ),
            # (B, ...) results; what only the backward reads stays in its row blocks (never copied)
            (0,) * 8 + ((0,) * 6, KEEP),
            B,
        )
        records = NumbaRecords(*(torch.from_numpy(r) for r in records))
        if options.keep:
            kept = SavedTensors(
                projected=xp,
                hidden=h0 if gru else None,
                read_weight=w.read_weight,
                recurrent_weight=w.recurrent_weight,
                head_weight=w.head_weight,
                address=w.address,
                draws=noise,
            )
            ctx.save_for_backward(
                *kept, *records, *(torch.from_numpy(v) for block in saved.values for v in block)
            )
        ctx.config, ctx.every, ctx.parts = config, every, saved.parts
        ctx.inverse_temperature = float(options.inverse_temperature)
        written, reads = torch.from_numpy(written), torch.from_numpy(reads)
        ctx.mark_non_differentiable(records.chosen, written, reads)
        ctx.set_materialize_grads(False)
        finals = (torch.from_numpy(v) for v in (out, h, phi, c, vr, vw))
        return (*finals, written, reads, records.probs, records.activations, records.memory, records.chosen)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        d = SequenceOutputs(*grads)
        config = ctx.config
        # then the per-block checkpoints, block after block
        kept, records, flat = split_records(ctx.saved_tensors, SavedTensors, NumbaRecords)
        n = len(flat) // len(ctx.parts)
        blocks = [flat[i * n : (i + 1) * n] for i in range(len(ctx.parts))]  # the forward's, per block
        a = as_array
        xp, w_r, w_h, w_p = kept.projected, kept.read_weight, kept.recurrent_weight, kept.head_weight
        B, T = xp.shape[:2]
        N, dc = kept.address.shape[0], blocks[0][3].shape[2]  # checkpoints of C: (B, ., d_c, N)
        R, H, gru = config.read_heads, config.write_heads, config.gru
        dtype = a(xp).dtype

        def given(grad, *shape):  # a gradient autograd did not materialise: zeros
            return a(grad) if grad is not None else np.zeros(shape, dtype)

        dummy = np.zeros((1, 1), dtype)
        h0 = kept.hidden if gru else xp.new_zeros(B, w_p.shape[1])
        grads = threads.call(
            dispatch.load("dntm").sequence_backward,
            (
                Rows(a(xp)),
                Rows(a(h0)),
                tuple(Rows(a(v)) for v in records),
                Blocks([tuple(a(v) for v in block) for block in blocks], ctx.parts),
                a(w_r),
                a(w_h) if gru else dummy,
                a(w_p),
                a(kept.address),
                *config,
                ctx.every,
                Rows(given(d.features, B, T, w_p.shape[1] + w_r.shape[1])),
                Rows(given(d.hidden, B, w_p.shape[1])),
                Rows(given(d.read_vectors, B, w_r.shape[1])),
                Rows(given(d.content, B, N, dc)),
                Rows(given(d.read_lru, B, R, N)),
                Rows(given(d.write_lru, B, H, N)),
                _rows_if(d.probs, np.zeros((1, 1, 1, 1), dtype)),
                d.probs is not None,
                _rows_if(d.activations, np.zeros((1, 1, 1), dtype)),
                d.activations is not None,
                _rows_if(d.memory, np.zeros((1, 1, 1, 1), dtype)),
                d.memory is not None,
                Rows(a(kept.draws), _noise_rows(B, R, H, N)) if config.mode == GUMBEL else dummy,
                ctx.inverse_temperature,
            ),
            (0,) * 4 + (SUM,) + (0,) * 5,  # per row, but the gradient of A
            B,
        )
        d_xp, d_a, d_g, d_p, d_address, d_h0, d_phi0, d_c0, d_vr0, d_vw0 = (
            torch.from_numpy(g) for g in grads
        )
        need = dict(zip(ARGUMENTS, ctx.needs_input_grad[1:]))  # after the options
        phiprev = blocks[0][0] if len(blocks) == 1 else torch.cat([block[0] for block in blocks])
        hnew = records.hnew
        hprev = (
            torch.cat([h0.unsqueeze(1), hnew[:, :-1]], 1)  # h_{s-1}
            if gru and need["recurrent_weight"]
            else None
        )

        def outer(grad, value):  # sum over batch and steps of grad ⊗ value
            return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])

        inputs = DNTMInputs(d_xp, None)
        state = DNTMStateRows(d_h0 if gru else None, d_c0, d_phi0, d_vr0, d_vw0, None, None)
        weights = DNTMWeights(
            read_weight=outer(d_a, phiprev) if need["read_weight"] else None,
            recurrent_weight=outer(d_g, hprev) if gru and need["recurrent_weight"] else None,
            recurrent_bias=d_g.sum((0, 1)) if gru and need["recurrent_bias"] else None,
            head_weight=outer(d_p, hnew) if need["head_weight"] else None,
            head_bias=d_p.sum((0, 1)) if need["head_bias"] else None,
            address=d_address,
        )
        return None, *inputs, *state, *weights
