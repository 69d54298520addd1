"""The plain tensor time loop of exactly what the D-NTM's kernels compute, to read beside the paper
(Gulcehre, Chandar, Cho, Bengio, "Dynamic Neural Turing Machine with Continuous and Discrete
Addressing Schemes", 2016): eqs. 1-2 (the GRU or feed-forward controller), 3-4 (α, c̄), 5 (read),
6 (write), 8-13 (addressing, LRU) and section 4's discrete weightings, with the corrections
listed in mannlab.models.dntm. The per-step pieces (similarity, weighting, head activations,
samples, sequential writes, read, write) are the ones DNTMCell.step calls; ``dntm_reference``
is the whole-sequence op (mannlab.ops.dntm.dntm_sequence, backend "reference") over the records
of records.py. Autograd differentiates it; the numba kernels are tested against it
(tests/ops/test_dntm_ops.py).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F

from mannlab.nn import addressing as ntm_addressing
from mannlab.nn import sampling
from mannlab.ops.dntm.records import (
    LRU_DECAY,
    SIMILARITY_EPS,
    DNTMInputs,
    DNTMOptions,
    DNTMResult,
    DNTMState,
    DNTMWeights,
    DNTMWriteCounts,
    head_sizes,
    step_trace,
)

# ---------------------------------------------------------------- one addressing step


def similarity(keys: torch.Tensor, memory: torch.Tensor, eps: float = SIMILARITY_EPS) -> torch.Tensor:
    """S(k, m_i) = k . m_i / (|k| |m_i| + ε) for every head and cell (eqs. 10-11).

    keys (B, K, W), memory (B, N, W) -> (B, K, N) in [-1, 1]; an all-zero key or
    cell (the empty content part at the start of an episode) gives 0, not NaN.
    """
    dots = keys @ memory.transpose(1, 2)
    norms = torch.linalg.vector_norm(keys, dim=-1).unsqueeze(-1) * torch.linalg.vector_norm(
        memory, dim=-1
    ).unsqueeze(-2)
    return dots / (norms + eps)


def lru_address(logits: torch.Tensor, gate: torch.Tensor, average: torch.Tensor, decay: float = LRU_DECAY):
    """Dynamic LRU addressing (section 3.3, eqs. 12-13 with the errata).

    logits z_t (B, K, N), gate γ_t (B, K) in (0, 1), average v_{t-1} (B, K, N) ->
    (w_t = softmax(z_t - γ_t v_{t-1}), v_t = 0.1 v_{t-1} + 0.9 z_t). v_t carries
    no gradient (z_t is detached in it).
    """
    weights = torch.softmax(lru_logits(logits, gate, average), dim=-1)
    return weights, decay * average + (1 - decay) * logits.detach()


def lru_logits(logits: torch.Tensor, gate: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
    """The logits of eq. 12's softmax, z_t - γ_t v_{t-1}: (B, K, N), (B, K), (B, K, N) -> (B, K, N)."""
    return logits - gate.unsqueeze(-1) * average


def weighting(keys, strengths, gates, memory, average, lru: bool, eps=SIMILARITY_EPS, decay=LRU_DECAY):
    """Eqs. 10-13 for keys (B, K, K_w) with strengths β and LRU gates γ (B, K) over the rows of
    ``memory`` (B, N', K_w), LRU averages v_{t-1} (B, K, N'): (probs w (B, K, N'), new LRU
    average v (B, K, N'), the logits of w's softmax (B, K, N'))."""
    logits = strengths.unsqueeze(-1) * similarity(keys, memory, eps)  # eq. 10
    if lru:
        probs, new_average = lru_address(logits, gates, average, decay)  # eqs. 12-13
        return probs, new_average, lru_logits(logits, gates, average)
    return torch.softmax(logits, dim=-1), average, logits  # eq. 11


class DNTMHeads(NamedTuple):
    """Activated head parameters of one addressing step."""

    read_keys: torch.Tensor  # (B, R, W)
    write_keys: torch.Tensor  # (B, H, K_w)
    strengths: torch.Tensor  # (B, R + H)  β
    gates: torch.Tensor  # (B, R + H)  γ
    erase: torch.Tensor  # (B, H, d_c)  e
    input_gate: torch.Tensor  # (B, H)  α
    candidate: torch.Tensor  # (B, H, d_c)  c̄


def activate_heads(groups, x_write: torch.Tensor, width: int) -> DNTMHeads:
    """The head layer's blocks on h_t (the seven of records.head_sizes, each (B, .)) and the
    precomputed [W_x x_t | v_α^T x_t] (B, H (d_c + 1)) -> the activated heads: keys as they
    are, β = softplus(.) + 1 >= 1 (eq. 9), γ = σ(.) (eq. 12), e = σ(.),
    α = σ(α_h + v_α^T x_t) (eq. 3), c̄ = ReLU(W_m h_t + b_m + α W_x x_t) (eq. 4)."""
    read_keys, write_keys, strengths, gates, erase, gate_h, content_h = groups
    B, H = gate_h.shape
    dc = erase.shape[-1] // H
    input_x, gate_x = x_write.split([H * dc, H], dim=-1)
    alpha = torch.sigmoid(gate_h + gate_x)  # eq. 3
    candidate = torch.relu(content_h + (alpha.unsqueeze(-1) * input_x.view(B, H, dc)).flatten(1))  # eq. 4
    return DNTMHeads(
        read_keys.view(B, -1, width),
        write_keys.view(B, H, -1),
        F.softplus(strengths) + 1,  # eq. 9: β >= 1
        torch.sigmoid(gates),  # eq. 12: γ
        torch.sigmoid(erase).view(B, H, dc),
        alpha,
        candidate.view(B, H, dc),
    )


def sample_from_draws(probs: torch.Tensor, exp: torch.Tensor) -> torch.Tensor:
    """The one-hot of argmax_i p_i / E_i (section 4's sample, no gradient): the cell
    torch.multinomial(p, 1) draws from the same Exp(1) draws E; probs and E (..., N')."""
    return torch.zeros_like(probs).scatter_(-1, (probs.detach() / exp).argmax(-1, keepdim=True), 1.0)


def straight_through(logits, probs, exp, inverse_temperature) -> torch.Tensor:
    """Straight-through Gumbel-softmax (Jang et al. 2016) from Exp(1) draws E (g = -log E):
    the one-hot of argmax_i p_i / E_i = argmax_i (l_i + g_i) forward (a sample of w, the
    cell torch.multinomial would draw from the same E), the gradient of the relaxed sample
    softmax((l + g) / τ) backward; l the logits of w."""
    hard = sample_from_draws(probs, exp)
    soft = torch.softmax((logits - torch.log(exp)) * inverse_temperature, dim=-1)
    return sampling.straight_through(hard, soft)


def sequential_write(written: torch.Tensor, reads: torch.Tensor, nop: bool) -> torch.Tensor:
    """Sequential writes: the one-hot u (B, 1, N') of cell n for the n-th write while cells
    remain unwritten (as TARDIS fills its memory), then of the cell read least so far (the
    reads ``reads`` (B, N') include this step's; the first of equal counts). Never the NOP
    cell. ``written`` (B,) counts the writes made so far."""
    slots = reads.shape[-1]
    cells = slots - int(nop)
    filling = written < cells
    least_read = reads[:, :cells].argmin(-1)
    index = torch.where(filling, written.clamp(max=cells - 1).long(), least_read)
    return F.one_hot(index, slots).to(reads.dtype).unsqueeze(1)


def read(memory: torch.Tensor, weights: torch.Tensor, access: torch.Tensor) -> torch.Tensor:
    """φ = w^T M (eq. 5) with the NOP cell ignored (``access`` 0 there, else 1): memory
    (B, N', W), weights (B, R, N') -> (B, R, W), in the memory's dtype (φ is state;
    autocast's product is lower)."""
    return ((weights * access) @ memory).to(memory.dtype)


def write(content, weights, access, erase, candidate) -> torch.Tensor:
    """C_t[j] = (1 - e u_j) ∘ C_{t-1}[j] + u_j c̄ (eq. 6) with the NOP cell ignored.

    content (B, N', d_c), weights u (B, H, N'), erase e (B, H, d_c), candidate c̄
    (B, H, d_c) -> (B, N', d_c); several write heads multiply their erasures and
    add their candidates.
    """
    return ntm_addressing.write(content, weights * access, erase, candidate)


# ---------------------------------------------------------------- the whole sequence


def controller_step(x: torch.Tensor, phi: torch.Tensor, h, weights: DNTMWeights) -> torch.Tensor:
    """h_t from the precomputed W x_t + b (B, P_c), φ_{t-1} (B, R W) and h_{t-1}: the GRU of
    eq. 1 as torch.nn.GRUCell (gates r, u, n), or the feed-forward h_t = tanh(.) of eq. 2."""
    a = torch.addmm(x, phi, weights.read_weight.t())
    if weights.recurrent_weight is None:
        return torch.tanh(a)  # eq. 2
    assert weights.recurrent_bias is not None  # the GRU's, beside its recurrent weight
    d = h.shape[-1]
    g = torch.addmm(weights.recurrent_bias, h, weights.recurrent_weight.t())
    reset, update = torch.sigmoid(a[:, : 2 * d] + g[:, : 2 * d]).chunk(2, dim=-1)
    n = torch.tanh(a[:, 2 * d :] + reset * g[:, 2 * d :])
    return torch.lerp(n, h, update)  # eq. 1: (1 - u) n + u h_{t-1}


def used_weights(probs, logits, exp, inverse_temperature, options: DNTMOptions) -> torch.Tensor:
    """The weighting a head uses (section 4): w itself, the one-hot of its sample from the
    draws E, of its argmax, or the straight-through one-hot (at 1/τ: a number or a 0-dim
    tensor)."""
    if options.mode == "soft":
        return probs
    if options.mode == "argmax":
        return sampling.argmax_one_hot(probs)
    if options.mode == "sample":
        return sample_from_draws(probs, exp)
    return straight_through(logits, probs, exp, inverse_temperature)


def sequence_step(inputs_t, inverse_temperature, row: DNTMState, fixed, weights: DNTMWeights, options):
    """One time step, its J addressing steps (eqs. 1-13, section 4's weightings), from the step's
    slices of the projected input and its draws (``inputs_t``: W x_t + b (B, P_c), the write
    heads' [W_x x_t | v_α^T x_t] (B, H (d_c + 1)), the Exp(1) draws (J, B K' N') or None), 1/τ
    (a number, or a 0-dim tensor), the state ``row`` before the step and ``fixed``: the
    addresses A (B, N', a) and the access mask (N',) (0 at the NOP cell) -> ([h_t; φ_t]
    (B, d_h + R W), the state after the step, and with ``options.trace`` the J addressing
    steps' (w^r, w^w, probs of each, heads) and M_t, else None). The reference loop runs it as
    it is; the "compiled" backend runs it under torch.compile (ops/compiled.py)."""
    x_ctrl, x_write, draws = inputs_t
    address, access = fixed
    h = row.controller[0] if row.controller else None
    _, content, reads, read_v, write_v, _, counts = row
    written, read_counts = counts if counts else (None, None)
    B, R, H = content.shape[0], read_v.shape[1], write_v.shape[1]
    N, dc = content.shape[1:]
    W = reads.shape[-1]
    sizes = head_sizes(R, H, W, W if options.write_keys == "memory" else dc, dc)
    eps, decay = options.similarity_eps, options.lru_decay
    per_step = []
    for j in range(options.addressing_steps):
        h = controller_step(x_ctrl, reads.flatten(1), h, weights)  # eqs. 1-2
        raw = F.linear(h, weights.head_weight, weights.head_bias)
        heads = activate_heads(raw.split(sizes, dim=-1), x_write, W)
        memory = torch.cat([address, content], dim=-1)  # M_{s-1} = [A; C]
        read_p, read_v, read_l = weighting(
            heads.read_keys,
            heads.strengths[:, :R],
            heads.gates[:, :R],
            memory,
            read_v,
            options.lru,
            eps,
            decay,
        )
        exp = None if draws is None else draws[j]  # (B K' N')
        read_exp = None if exp is None else exp[: B * R * N].view(B, R, N)
        read_w = used_weights(read_p, read_l, read_exp, inverse_temperature, options)
        if options.writes == "sequential":
            assert written is not None and read_counts is not None  # carried with these writes
            read_counts = read_counts + read_w.detach().sum(1)
            write_w = write_p = sequential_write(written, read_counts, options.nop)
            written = written + 1
        else:
            write_p, write_v, write_l = weighting(
                heads.write_keys,
                heads.strengths[:, R:],
                heads.gates[:, R:],
                memory if options.write_keys == "memory" else content,
                write_v,
                options.lru,
                eps,
                decay,
            )
            write_exp = None if exp is None else exp[B * R * N :].view(B, H, N)
            write_w = used_weights(write_p, write_l, write_exp, inverse_temperature, options)
        reads = read(memory, read_w, access)  # eq. 5
        content = write(content, write_w, access, heads.erase, heads.candidate)  # eq. 6
        if options.mode == "gumbel":  # the one-hots as values (their gradient is the step's)
            read_w, write_w = read_w.detach(), write_w.detach()
        per_step.append((read_w, write_w, read_p, write_p, heads))
    assert h is not None  # set by the addressing steps (J >= 1)
    controller = (h,) if weights.recurrent_weight is not None else ()
    if options.writes == "sequential":
        assert written is not None and read_counts is not None  # carried with these writes
        counts = DNTMWriteCounts(written, read_counts)
    row = DNTMState(controller, content, reads, read_v, write_v, (), counts)
    trace = (tuple(per_step), torch.cat([address, content], dim=-1)) if options.trace else None  # M_t
    return torch.cat([h, reads.flatten(1)], dim=-1), row, trace


def dntm_reference(
    inputs: DNTMInputs,
    state: DNTMState,
    weights: DNTMWeights,
    options: DNTMOptions,
    step_function: Callable = sequence_step,
    inverse_temperature: Optional[torch.Tensor] = None,
) -> DNTMResult:
    """The features [h_t; φ_t], the final state and the trace (if asked) of a whole sequence.
    ``step_function``: :func:`sequence_step`, or the same under torch.compile, which takes 1/τ
    as ``inverse_temperature`` (a 0-dim tensor; else ``options``' number)."""
    content = state.content
    B, T = inputs.projected.shape[:2]
    R, H = state.read_lru.shape[1], state.write_lru.shape[1]
    N, dc = content.shape[1:]
    J = options.addressing_steps
    access = torch.ones(N, dtype=content.dtype, device=content.device)
    if options.nop:
        access[-1] = 0.0  # the NOP cell
    x_ctrl, x_write = inputs.projected.split([weights.read_weight.shape[0], H * (dc + 1)], dim=-1)
    fixed = (weights.address.to(content.dtype).expand(B, -1, -1), access)
    draws = (None,) * T if inputs.draws is None else inputs.draws.unflatten(0, (T, J)).unbind(0)
    temperature = options.inverse_temperature if inverse_temperature is None else inverse_temperature
    row, features, per_step, memories = state, [], [], []
    for inputs_t in zip(x_ctrl.unbind(1), x_write.unbind(1), draws):
        features_t, row, trace_t = step_function(inputs_t, temperature, row, fixed, weights, options=options)
        features.append(features_t)
        if trace_t is not None:
            per_step.extend(trace_t[0])
            memories.append(trace_t[1])  # M_t after the step's writes
    out = torch.stack(features, 1)
    if not options.trace:
        return DNTMResult(out, row, None)

    def stacked(values, *shape):  # the T J steps' values (B, ...) -> (B, T, *shape)
        return torch.stack(values, 1).reshape(B, T, *shape)

    read_ws, write_ws, read_ps, write_ps, step_heads = zip(*per_step)
    trace = step_trace(
        out,
        state,
        options,
        read_weights=stacked(read_ws, J * R, N),
        write_weights=stacked(write_ws, J * H, N),
        read_probs=stacked(read_ps, J * R, N),
        write_probs=stacked(write_ps, J * H, N),
        erase_vectors=stacked([hd.erase for hd in step_heads], J * H, dc),
        candidates=stacked([hd.candidate for hd in step_heads], J * H, dc),
        input_gates=stacked([hd.input_gate for hd in step_heads], J * H),
        key_strengths=stacked([hd.strengths for hd in step_heads], J * (R + H)),
        lru_gates=stacked([hd.gates for hd in step_heads], J * (R + H)),
        memory=torch.stack(memories, 1),
    )
    return DNTMResult(out, row, trace)
