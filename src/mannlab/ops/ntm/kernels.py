"""Compiled CPU kernels for the NTM memory step (numba): the same equations as
ops/ntm/function.py, in loops that numba compiles to machine code.

Why: on a CPU a small tensor operation costs a few microseconds of dispatch, and
the memory step is about 70 of them forward and 100 backward, so at batch 1 the
step's cost is dispatch, not arithmetic. Here the whole step is one call each
way. The results equal the tensor version (ops/ntm/function.py's torch path)
to rounding; the tests compare both with the composition of mannlab.nn.addressing
primitives and run gradcheck in float64.

Layout of the raw head parameters of one batch element (P,), as NTMCell's head
layer emits them: (H + R) blocks of A = W + 3 + S, write heads first,
[k (W), beta, g, s (S), gamma], then H blocks of 2W, [e (W), a (W)].

Per head (paper symbols, Graves et al. 2014 as stated by Taguchi & Tsuruoka):
    K(i)  = k . M(i) / (max(|k|, eps) max(|M(i)|, eps))        cosine, eps-guarded
    w^c   = softmax(beta K)                                       eq. 8
    w^g   = w_{t-1} + g (w^c - w_{t-1})                           interpolation
    w~(i) = sum_m w^g((i - k_m) mod N) s(m),  k_m = m - S // 2    circular shift
    w     = softmax(gamma log(w~ + eps))                          sharpening
The step: write heads address M_{t-1}, then M_t = M_{t-1} o prod_h (1 - w_h e_h^T)
+ sum_h w_h a_h^T; read heads address M_t, and r = w M_t.

The forward returns, besides its outputs, the per-head intermediates (K, w^c, w^g,
w~, the key and slot norms) that the backward reads.
"""

from __future__ import annotations

import math

import numpy as np

from mannlab.ops.numba_cache import njit
from mannlab.ops.numba_math import EPS, dot, row_norms, sigmoid, softmax_into, softplus, softplus_grad


@njit
def _activate(params, head, width, num_shifts, shift_out):
    """Head ``head``'s raw block -> (key offset, beta, g, gamma); s is written to shift_out."""
    base = head * (width + 3 + num_shifts)
    beta = softplus(params[base + width])
    gate = sigmoid(params[base + width + 1])
    softmax_into(params[base + width + 2 : base + width + 2 + num_shifts], shift_out)
    gamma = 1.0 + softplus(params[base + width + 2 + num_shifts])
    return base, beta, gate, gamma


@njit
def _address(
    key, memory, norms, previous, beta, gate, shift, gamma, similarity, content, gated, shifted, weights
):
    """One head's chain (module docstring); fills the intermediates, returns max(|k|, eps)."""
    slots, num_shifts = memory.shape[0], shift.shape[0]
    reach = num_shifts // 2
    key_norm = max(math.sqrt(dot(key, key)), EPS)
    for i in range(slots):
        similarity[i] = dot(key, memory[i]) / (key_norm * norms[i])
    softmax_into(beta * similarity, content)
    for i in range(slots):
        gated[i] = previous[i] + gate * (content[i] - previous[i])
    for i in range(slots):
        total = 0.0
        for m in range(num_shifts):
            total += gated[(i - (m - reach)) % slots] * shift[m]
        shifted[i] = total
    softmax_into(gamma * np.log(shifted + EPS), weights)
    return key_norm


@njit
def _address_backward(
    grad_w,
    key,
    key_norm,
    memory,
    norms,
    previous,
    beta,
    gate,
    shift,
    gamma,
    similarity,
    content,
    gated,
    shifted,
    weights,
    grad_key,
    grad_memory,
    grad_previous,
    grad_shift,
):
    """Backward of ``_address``: writes grad_key, grad_previous, grad_shift, adds into
    grad_memory; returns (grad_beta, grad_gate, grad_gamma)."""
    slots, num_shifts = memory.shape[0], shift.shape[0]
    reach = num_shifts // 2
    # sharpening
    grad_z = weights * (grad_w - (weights * grad_w).sum())
    grad_gamma = (grad_z * np.log(shifted + EPS)).sum()
    grad_shifted = gamma * grad_z / (shifted + EPS)
    # circular shift
    grad_gated = np.zeros_like(gated)
    for m in range(num_shifts):
        total = 0.0
        for i in range(slots):
            j = (i - (m - reach)) % slots
            total += grad_shifted[i] * gated[j]
            grad_gated[j] += grad_shifted[i] * shift[m]
        grad_shift[m] = total
    # interpolation
    grad_gate = ((content - previous) * grad_gated).sum()
    grad_content = gate * grad_gated
    grad_previous[:] = grad_gated - grad_content
    # content weights and the cosine similarity
    grad_logits = content * (grad_content - (content * grad_content).sum())
    grad_beta = (grad_logits * similarity).sum()
    unit_key = key / key_norm
    grad_unit_key = np.zeros_like(key)
    for i in range(slots):
        grad_sim = beta * grad_logits[i]
        if grad_sim != 0.0:
            scale = grad_sim / norms[i]
            for j in range(key.shape[0]):
                unit = memory[i, j] / norms[i]
                grad_unit_key[j] += grad_sim * unit
                grad_memory[i, j] += scale * (unit_key[j] - unit * similarity[i])
    grad_key[:] = (grad_unit_key - unit_key * (unit_key * grad_unit_key).sum()) / key_norm
    return grad_beta, grad_gate, grad_gamma


@njit
def _element_forward(
    params,
    memory,
    read_prev,
    write_prev,
    width,
    num_shifts,
    new_memory,
    reads,
    read_w,
    write_w,
    erase,
    add,
    betas,
    gates,
    shifts,
    gammas,
    similarity,
    content,
    gated,
    shifted,
    key_norms,
    norms_before,
    norms_after,
):
    """Forward of one batch element; all outputs and intermediates are written in place:
    per head (H + R) similarity K, content w^c, gated w^g, shifted w~ (N,) and key_norms;
    norms_before, norms_after: the slot norms of M_{t-1} and M_t (N,)."""
    write_heads, read_heads = write_prev.shape[0], read_prev.shape[0]
    offset = (write_heads + read_heads) * (width + 3 + num_shifts)
    row_norms(memory, norms_before)
    for h in range(write_heads):  # (ii) address M_{t-1}
        base, betas[h], gates[h], gammas[h] = _activate(params, h, width, num_shifts, shifts[h])
        key_norms[h] = _address(
            params[base : base + width],
            memory,
            norms_before,
            write_prev[h],
            betas[h],
            gates[h],
            shifts[h],
            gammas[h],
            similarity[h],
            content[h],
            gated[h],
            shifted[h],
            write_w[h],
        )
        start = offset + h * 2 * width
        for j in range(width):
            erase[h, j] = sigmoid(params[start + j])
            add[h, j] = params[start + width + j]
    for i in range(memory.shape[0]):  # erase, then add
        for j in range(width):
            value = memory[i, j]
            for h in range(write_heads):
                value *= 1.0 - write_w[h, i] * erase[h, j]
            for h in range(write_heads):
                value += write_w[h, i] * add[h, j]
            new_memory[i, j] = value
    row_norms(new_memory, norms_after)
    for r in range(read_heads):  # (iii) address M_t, read
        h = write_heads + r
        base, betas[h], gates[h], gammas[h] = _activate(params, h, width, num_shifts, shifts[h])
        key_norms[h] = _address(
            params[base : base + width],
            new_memory,
            norms_after,
            read_prev[r],
            betas[h],
            gates[h],
            shifts[h],
            gammas[h],
            similarity[h],
            content[h],
            gated[h],
            shifted[h],
            read_w[r],
        )
        for j in range(width):
            total = 0.0
            for i in range(memory.shape[0]):
                total += read_w[r, i] * new_memory[i, j]
            reads[r, j] = total


@njit
def memory_step_forward(params, memory, read_prev, write_prev, width, num_shifts):
    """params (B, P), memory (B, N, W), read_prev (B, R, N), write_prev (B, H, N) ->
    outputs: reads (B, R, W), new memory (B, N, W), read_w (B, R, N), write_w (B, H, N),
             erase, add (B, H, W), beta, g (B, H + R), s (B, H + R, S), gamma (B, H + R);
    saved for the backward: paths (B, 4, H + R, N) (K, w^c, w^g, w~ of every head),
             key_norms (B, H + R), slot_norms (B, 2, N) (of M_{t-1} and M_t)."""
    batch, slots = memory.shape[0], memory.shape[1]
    write_heads, read_heads = write_prev.shape[1], read_prev.shape[1]
    heads, dtype = write_heads + read_heads, memory.dtype
    new_memory = np.empty_like(memory)
    reads = np.empty((batch, read_heads, width), dtype)
    read_w = np.empty((batch, read_heads, slots), dtype)
    write_w = np.empty((batch, write_heads, slots), dtype)
    erase = np.empty((batch, write_heads, width), dtype)
    add = np.empty((batch, write_heads, width), dtype)
    betas, gates, gammas = (
        np.empty((batch, heads), dtype),
        np.empty((batch, heads), dtype),
        np.empty((batch, heads), dtype),
    )
    shifts = np.empty((batch, heads, num_shifts), dtype)
    paths = np.empty((batch, 4, heads, slots))
    key_norms, slot_norms = np.empty((batch, heads)), np.empty((batch, 2, slots))
    for b in range(batch):
        _element_forward(
            params[b],
            memory[b],
            read_prev[b],
            write_prev[b],
            width,
            num_shifts,
            new_memory[b],
            reads[b],
            read_w[b],
            write_w[b],
            erase[b],
            add[b],
            betas[b],
            gates[b],
            shifts[b],
            gammas[b],
            paths[b, 0],
            paths[b, 1],
            paths[b, 2],
            paths[b, 3],
            key_norms[b],
            slot_norms[b, 0],
            slot_norms[b, 1],
        )
    outputs = (reads, new_memory, read_w, write_w, erase, add, betas, gates, shifts, gammas)
    return outputs, (paths, key_norms, slot_norms)


@njit
def _write_backward(grad_new, memory, write_w, erase, add, grad_memory, grad_write_w, grad_erase, grad_add):
    """Backward of the erase/add write: fills grad_memory (M_{t-1}), adds into grad_write_w,
    fills grad_erase and grad_add."""
    write_heads, slots, width = write_w.shape[0], memory.shape[0], memory.shape[1]
    grad_erase[:] = 0.0
    grad_add[:] = 0.0
    for i in range(slots):
        for j in range(width):
            keep = 1.0
            for h in range(write_heads):
                keep *= 1.0 - write_w[h, i] * erase[h, j]
            grad_memory[i, j] = grad_new[i, j] * keep
            grad_keep = grad_new[i, j] * memory[i, j]
            for h in range(write_heads):
                others = 1.0  # prod over the other heads, no division
                for o in range(write_heads):
                    if o != h:
                        others *= 1.0 - write_w[o, i] * erase[o, j]
                grad_factor = grad_keep * others
                grad_write_w[h, i] += add[h, j] * grad_new[i, j] - grad_factor * erase[h, j]
                grad_erase[h, j] -= grad_factor * write_w[h, i]
                grad_add[h, j] += write_w[h, i] * grad_new[i, j]


@njit
def _params_backward(
    grad_params,
    params,
    head,
    width,
    num_shifts,
    grad_key,
    grad_beta,
    grad_gate,
    grad_shift,
    grad_gamma,
    gate,
    shift,
):
    """Gradients of one head's activated values -> its raw block of grad_params."""
    base = head * (width + 3 + num_shifts)
    grad_params[base : base + width] = grad_key
    grad_params[base + width] = grad_beta * softplus_grad(params[base + width])
    grad_params[base + width + 1] = grad_gate * gate * (1.0 - gate)
    start = base + width + 2
    grad_params[start : start + num_shifts] = shift * (grad_shift - (shift * grad_shift).sum())
    grad_params[start + num_shifts] = grad_gamma * softplus_grad(params[start + num_shifts])


@njit
def memory_step_backward(
    params,
    memory,
    read_prev,
    write_prev,
    width,
    num_shifts,
    outputs,
    saved,
    grad_reads,
    grad_memory_out,
    grad_read_w,
    grad_write_w,
):
    """Gradients of the step with respect to (params, memory, read_prev, write_prev),
    given those of (reads, new memory, read_w, write_w) and the forward's outputs and
    saved intermediates."""
    _, new_memory, read_w, write_w, erase, add, betas, gates, shifts, gammas = outputs
    paths, key_norms, slot_norms = saved
    slots = memory.shape[1]
    write_heads, read_heads = write_prev.shape[1], read_prev.shape[1]
    heads = write_heads + read_heads
    grad_params = np.zeros_like(params)
    grad_memory = np.empty_like(memory)
    grad_read_prev = np.empty_like(read_prev)
    grad_write_prev = np.empty_like(write_prev)
    # gradients of one element
    grad_new = np.empty((slots, width))
    grad_rw = np.empty(slots)
    grad_key, grad_shift = np.empty(width), np.empty(num_shifts)
    grad_ww = np.empty((write_heads, slots))
    grad_erase, grad_add = np.empty((write_heads, width)), np.empty((write_heads, width))
    for b in range(memory.shape[0]):
        p = params[b]
        similarity, content, gated, shifted = paths[b, 0], paths[b, 1], paths[b, 2], paths[b, 3]
        # (iii) r = w^r M_t, then the read addressing on M_t
        grad_new[:] = grad_memory_out[b]
        for r in range(read_heads):
            h = write_heads + r
            for i in range(slots):
                grad_rw[i] = grad_read_w[b, r, i] + dot(new_memory[b, i], grad_reads[b, r])
                for j in range(width):
                    grad_new[i, j] += read_w[b, r, i] * grad_reads[b, r, j]
            base = h * (width + 3 + num_shifts)
            grad_beta, grad_gate, grad_gamma = _address_backward(
                grad_rw,
                p[base : base + width],
                key_norms[b, h],
                new_memory[b],
                slot_norms[b, 1],
                read_prev[b, r],
                betas[b, h],
                gates[b, h],
                shifts[b, h],
                gammas[b, h],
                similarity[h],
                content[h],
                gated[h],
                shifted[h],
                read_w[b, r],
                grad_key,
                grad_new,
                grad_read_prev[b, r],
                grad_shift,
            )
            _params_backward(
                grad_params[b],
                p,
                h,
                width,
                num_shifts,
                grad_key,
                grad_beta,
                grad_gate,
                grad_shift,
                grad_gamma,
                gates[b, h],
                shifts[b, h],
            )
        # (ii) the erase/add write, then the write addressing on M_{t-1}
        grad_ww[:] = grad_write_w[b]
        _write_backward(
            grad_new, memory[b], write_w[b], erase[b], add[b], grad_memory[b], grad_ww, grad_erase, grad_add
        )
        offset = heads * (width + 3 + num_shifts)
        for h in range(write_heads):
            base = h * (width + 3 + num_shifts)
            grad_beta, grad_gate, grad_gamma = _address_backward(
                grad_ww[h],
                p[base : base + width],
                key_norms[b, h],
                memory[b],
                slot_norms[b, 0],
                write_prev[b, h],
                betas[b, h],
                gates[b, h],
                shifts[b, h],
                gammas[b, h],
                similarity[h],
                content[h],
                gated[h],
                shifted[h],
                write_w[b, h],
                grad_key,
                grad_memory[b],
                grad_write_prev[b, h],
                grad_shift,
            )
            _params_backward(
                grad_params[b],
                p,
                h,
                width,
                num_shifts,
                grad_key,
                grad_beta,
                grad_gate,
                grad_shift,
                grad_gamma,
                gates[b, h],
                shifts[b, h],
            )
            start = offset + h * 2 * width
            grad_params[b, start : start + width] = grad_erase[h] * erase[b, h] * (1.0 - erase[b, h])
            grad_params[b, start + width : start + 2 * width] = grad_add[h]
    return grad_params, grad_memory, grad_read_prev, grad_write_prev
