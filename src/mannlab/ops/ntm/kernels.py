"""Compiled CPU kernels for the NTM memory step (numba): the same equations as
ops/ntm/memory_step.py, in loops that numba compiles to machine code; and, at the end of this
file, whole sequences (run by ops/ntm/numba_sequence.py).

Why: on a CPU a small tensor operation costs a few microseconds of dispatch, and
the memory step is about 70 of them forward and 100 backward, so at batch 1 the
step's cost is dispatch, not arithmetic. Here the whole step is one call each
way. The results equal the tensor version (ops/ntm/memory_step.py's tensor path)
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
from mannlab.ops.numba_math import (
    EPS,
    FAST,
    assign,
    log_array,
    scaled_softmax_into,
    sigmoid,
    softmax_into,
    softplus,
    softplus_grad,
)


@njit
def _activate(params, head, width, num_shifts, shift_out):
    """Head ``head``'s raw block -> (key offset, beta, g, gamma); s is written to shift_out."""
    base = head * (width + 3 + num_shifts)
    beta = softplus(params[base + width])
    gate = sigmoid(params[base + width + 1])
    softmax_into(params[base + width + 2 : base + width + 2 + num_shifts], shift_out)
    gamma = 1.0 + softplus(params[base + width + 2 + num_shifts])
    return base, beta, gate, gamma


@njit(fastmath=FAST)
def _dot(a, b):
    """a . b, its sum reordered so that it vectorises (the memory step's hot loops)."""
    total = 0.0
    for j in range(a.shape[0]):
        total += a[j] * b[j]
    return total


@njit(fastmath=FAST)
def _slot_norms(memory, out):
    """max(|M(i)|, eps) for every slot."""
    for i in range(memory.shape[0]):
        out[i] = max(math.sqrt(_dot(memory[i], memory[i])), EPS)


@njit(fastmath=FAST)
def _address(
    key, memory, norms, previous, beta, gate, shift, gamma, similarity, content, gated, shifted, weights
):
    """One head's chain (module docstring); fills the intermediates, returns max(|k|, eps)."""
    slots, num_shifts = memory.shape[0], shift.shape[0]
    reach = num_shifts // 2
    key_norm = max(math.sqrt(_dot(key, key)), EPS)
    for i in range(slots):
        similarity[i] = _dot(key, memory[i]) / (key_norm * norms[i])
    scaled_softmax_into(beta, similarity, content)
    for i in range(slots):
        gated[i] = previous[i] + gate * (content[i] - previous[i])
    shifted[:] = 0.0
    for m in range(num_shifts):
        _shift_add(gated, m - reach, shift[m], shifted)
    logs = np.empty(slots)  # in double precision, for float32 weightings too
    log_array(shifted, EPS, logs)
    scaled_softmax_into(gamma, logs, weights)  # w = softmax(gamma log(w~ + eps))
    return key_norm


@njit(fastmath=FAST)
def _shift_add(values, offset, scale, out):
    """out(i) += scale values((i - offset) mod N) for |offset| < N, in two straight runs
    (no division per element)."""
    slots = values.shape[0]
    cut = offset % slots
    for i in range(cut, slots):
        out[i] += scale * values[i - cut]
    for i in range(cut):
        out[i] += scale * values[i - cut + slots]


@njit(fastmath=FAST)
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
    log_shifted = np.empty_like(shifted)
    log_array(shifted, EPS, log_shifted)
    grad_gamma = (grad_z * log_shifted).sum()
    grad_shifted = gamma * grad_z / (shifted + EPS)
    # circular shift: w~(i) = sum_m w^g((i - k_m) mod N) s(m)
    grad_gated = np.zeros_like(gated)
    for m in range(num_shifts):
        cut = (m - reach) % slots
        total = 0.0
        for i in range(slots):
            j = i - cut if i >= cut else i - cut + slots
            total += grad_shifted[i] * gated[j]
        grad_shift[m] = total
        _shift_add(grad_shifted, -(m - reach), shift[m], grad_gated)
    # interpolation
    grad_gate = ((content - previous) * grad_gated).sum()
    grad_content = gate * grad_gated
    assign(grad_previous, grad_gated - grad_content)
    # content weights and the cosine similarity
    grad_logits = content * (grad_content - (content * grad_content).sum())
    grad_beta = (grad_logits * similarity).sum()
    unit_key = key / key_norm
    grad_unit_key = np.zeros_like(key)
    for i in range(slots):
        grad_sim = beta * grad_logits[i]
        if grad_sim != 0.0:
            inverse = 1.0 / norms[i]
            scale = grad_sim * inverse
            for j in range(key.shape[0]):
                unit = memory[i, j] * inverse
                grad_unit_key[j] += grad_sim * unit
                grad_memory[i, j] += scale * (unit_key[j] - unit * similarity[i])
    assign(grad_key, (grad_unit_key - unit_key * (unit_key * grad_unit_key).sum()) / key_norm)
    return grad_beta, grad_gate, grad_gamma


@njit(fastmath=FAST)
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
    _slot_norms(memory, norms_before)
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
    if write_heads == 1:  # the usual case, without the loops over the heads
        for i in range(memory.shape[0]):
            weight = write_w[0, i]
            for j in range(width):
                new_memory[i, j] = memory[i, j] * (1.0 - weight * erase[0, j]) + weight * add[0, j]
    else:  # erase, then add
        for i in range(memory.shape[0]):
            for j in range(width):
                value = memory[i, j]
                for h in range(write_heads):
                    value *= 1.0 - write_w[h, i] * erase[h, j]
                for h in range(write_heads):
                    value += write_w[h, i] * add[h, j]
                new_memory[i, j] = value
    _slot_norms(new_memory, norms_after)
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
        reads[r] = 0.0
        for i in range(memory.shape[0]):  # slot by slot: contiguous rows of M_t
            weight = read_w[r, i]
            for j in range(width):
                reads[r, j] += weight * new_memory[i, j]


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


@njit(fastmath=FAST)
def _write_backward(grad_new, memory, write_w, erase, add, grad_memory, grad_write_w, grad_erase, grad_add):
    """Backward of the erase/add write: fills grad_memory (M_{t-1}), adds into grad_write_w,
    fills grad_erase and grad_add."""
    write_heads, slots, width = write_w.shape[0], memory.shape[0], memory.shape[1]
    grad_erase[:] = 0.0
    grad_add[:] = 0.0
    if write_heads == 1:  # the usual case, without the loops over the other heads
        for i in range(slots):
            weight, total = write_w[0, i], 0.0
            for j in range(width):
                grad = grad_new[i, j]
                grad_memory[i, j] = grad * (1.0 - weight * erase[0, j])
                grad_keep = grad * memory[i, j]
                total += add[0, j] * grad - grad_keep * erase[0, j]
                grad_erase[0, j] -= grad_keep * weight
                grad_add[0, j] += weight * grad
            grad_write_w[0, i] += total
        return
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
    assign(grad_params[base : base + width], grad_key)
    grad_params[base + width] = grad_beta * softplus_grad(params[base + width])
    grad_params[base + width + 1] = grad_gate * gate * (1.0 - gate)
    start = base + width + 2
    assign(grad_params[start : start + num_shifts], shift * (grad_shift - (shift * grad_shift).sum()))
    grad_params[start + num_shifts] = grad_gamma * softplus_grad(params[start + num_shifts])


@njit(fastmath=FAST)
def _element_backward(
    p,
    memory,
    read_prev,
    write_prev,
    width,
    num_shifts,
    new_memory,
    read_w,
    write_w,
    erase,
    add,
    betas,
    gates,
    shifts,
    gammas,
    paths,
    key_norms,
    norms_before,
    norms_after,
    grad_reads,
    grad_memory_out,
    grad_read_w,
    grad_write_w,
    grad_params,
    grad_memory,
    grad_read_prev,
    grad_write_prev,
):
    """Backward of ``_element_forward`` for one batch element: fills grad_params (P),
    grad_memory (M_{t-1}), grad_read_prev and grad_write_prev from the gradients of
    (reads, M_t, w^r_t, w^w_t). Every incoming gradient is read before the outgoing one of
    the same quantity is written, so grad_memory may be grad_memory_out (and likewise the
    weightings): the whole-sequence backward carries them in place."""
    slots = memory.shape[0]
    write_heads, read_heads = write_prev.shape[0], read_prev.shape[0]
    heads = write_heads + read_heads
    similarity, content, gated, shifted = paths[0], paths[1], paths[2], paths[3]
    grad_new = grad_memory_out.copy()
    grad_rw = np.empty(slots)
    grad_key, grad_shift = np.empty(width), np.empty(num_shifts)
    grad_ww = grad_write_w.copy()
    grad_erase, grad_add = np.empty((write_heads, width)), np.empty((write_heads, width))
    grad_params[:] = 0.0
    # (iii) r = w^r M_t, then the read addressing on M_t
    for r in range(read_heads):
        h = write_heads + r
        for i in range(slots):
            grad_rw[i] = grad_read_w[r, i] + _dot(new_memory[i], grad_reads[r])
            for j in range(width):
                grad_new[i, j] += read_w[r, i] * grad_reads[r, j]
        base = h * (width + 3 + num_shifts)
        grad_beta, grad_gate, grad_gamma = _address_backward(
            grad_rw,
            p[base : base + width],
            key_norms[h],
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
            grad_key,
            grad_new,
            grad_read_prev[r],
            grad_shift,
        )
        _params_backward(
            grad_params,
            p,
            h,
            width,
            num_shifts,
            grad_key,
            grad_beta,
            grad_gate,
            grad_shift,
            grad_gamma,
            gates[h],
            shifts[h],
        )
    # (ii) the erase/add write, then the write addressing on M_{t-1}
    _write_backward(grad_new, memory, write_w, erase, add, grad_memory, grad_ww, grad_erase, grad_add)
    offset = heads * (width + 3 + num_shifts)
    for h in range(write_heads):
        base = h * (width + 3 + num_shifts)
        grad_beta, grad_gate, grad_gamma = _address_backward(
            grad_ww[h],
            p[base : base + width],
            key_norms[h],
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
            grad_key,
            grad_memory,
            grad_write_prev[h],
            grad_shift,
        )
        _params_backward(
            grad_params,
            p,
            h,
            width,
            num_shifts,
            grad_key,
            grad_beta,
            grad_gate,
            grad_shift,
            grad_gamma,
            gates[h],
            shifts[h],
        )
        start = offset + h * 2 * width
        assign(grad_params[start : start + width], grad_erase[h] * erase[h] * (1.0 - erase[h]))
        assign(grad_params[start + width : start + 2 * width], grad_add[h])


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
    grad_params = np.zeros_like(params)
    grad_memory = np.empty_like(memory)
    grad_read_prev = np.empty_like(read_prev)
    grad_write_prev = np.empty_like(write_prev)
    for b in range(memory.shape[0]):
        _element_backward(
            params[b],
            memory[b],
            read_prev[b],
            write_prev[b],
            width,
            num_shifts,
            new_memory[b],
            read_w[b],
            write_w[b],
            erase[b],
            add[b],
            betas[b],
            gates[b],
            shifts[b],
            gammas[b],
            paths[b],
            key_norms[b],
            slot_norms[b, 0],
            slot_norms[b, 1],
            grad_reads[b],
            grad_memory_out[b],
            grad_read_w[b],
            grad_write_w[b],
            grad_params[b],
            grad_memory[b],
            grad_read_prev[b],
            grad_write_prev[b],
        )
    return grad_params, grad_memory, grad_read_prev, grad_write_prev


# ------------------------------------------------------------------ whole sequence
#
# The controller (mannlab.nn.controllers), the head layer and the memory step above, for
# every step of a sequence in one call each way. Per step, the controller's and the head
# layer's matrix products are one BLAS call over the batch; everything else runs element by
# element, each on its own rows of every array (no shared accumulator), so those loops may
# run in parallel. The weight gradients are left to the caller: one matrix product each
# over all T B steps of the gradients these kernels return. Arrays over time are time-major
# (T, B, ...), so that each step's rows are one contiguous block for BLAS.

#: Controller kinds of the sequence kernels (ops/controller_codes.py names them).
FNN, ELMAN, LSTM = 0, 1, 2


@njit
def _controller_forward(kind, pnr, pre, c_prev, h, c, h_out):
    """Activations of the controller from its pre-activation ``pre`` (G,), which it
    overwrites with the activated gates: tanh for FNN and Elman (eq. 1), [z; i; f; o] for
    the LSTM (eqs. 2-7). Writes h_t, c_t (LSTM) and h_out (h_t, or for the partially
    non-recurrent controllers tanh(h'bar_t), eq. 10, which the caller left in h_out)."""
    hidden = h.shape[0]
    if kind == LSTM:
        for k in range(hidden):
            pre[k] = math.tanh(pre[k])  # z, eq. 2
        for k in range(hidden, 4 * hidden):
            pre[k] = sigmoid(pre[k])  # i, f, o, eqs. 3-5
        for k in range(hidden):
            c[k] = pre[2 * hidden + k] * c_prev[k] + pre[hidden + k] * pre[k]  # eq. 6
            h[k] = pre[3 * hidden + k] * math.tanh(c[k])  # eq. 7
    else:
        for k in range(hidden):
            pre[k] = math.tanh(pre[k])
            h[k] = pre[k]
            c[k] = 0.0  # no cell state: its rows stay defined
    if pnr:
        for k in range(hidden):
            h_out[k] = math.tanh(h_out[k])
    else:
        assign(h_out, h)


@njit(nogil=True)  # row blocks run on threads at once (ops/threads.py)
def sequence_forward(
    xp,
    h0,
    c0,
    r0,
    m0,
    wr0,
    ww0,
    w_read_t,
    w_rec_t,
    w_head_t,
    b_head,
    kind,
    pnr,
    width,
    num_shifts,
    keep,
):
    """xp (B, T, G) = W_x x_t + b for every step, the initial state h0, c0 (B, d_h; zeros
    where the controller has none), r0 (B, R W), m0 (B, N, W), wr0 (B, R, N), ww0 (B, H, N);
    the controller's read and recurrent weights and the head layer, transposed (in, out).
    Returns the features (B, T, d_h + R W), the states (time-major, row 0 the initial one,
    t + 1 after step t): h, c (T + 1, B, d_h), reads (T + 1, B, R W), memory
    (T + 1, B, N, W), w^r, w^w, and the per-step records (activated gates (T, B, G), raw
    head parameters (T, B, P), e, a, beta, g, s, gamma, the addressing paths, key and slot
    norms). With ``keep`` False (no backward and no trace) the states have two rows, used
    in turn, and the records one."""
    B, T, G = xp.shape[0], xp.shape[1], xp.shape[2]
    hidden, P = h0.shape[1], b_head.shape[0]
    R, H, N = wr0.shape[1], ww0.shape[1], m0.shape[1]
    K, dtype = R + H, xp.dtype
    S = T + 1 if keep else 2
    Ts = T if keep else 1
    out = np.empty((B, T, hidden + R * width), dtype)
    hs, cs = np.empty((S, B, hidden), dtype), np.empty((S, B, hidden), dtype)
    reads = np.empty((S, B, R * width), dtype)
    memory = np.empty((S, B, N, width), dtype)
    read_w, write_w = np.empty((S, B, R, N), dtype), np.empty((S, B, H, N), dtype)
    acts, params = np.empty((Ts, B, G), dtype), np.empty((Ts, B, P), dtype)
    erase, add = np.empty((Ts, B, H, width), dtype), np.empty((Ts, B, H, width), dtype)
    betas, gates, gammas = (
        np.empty((Ts, B, K), dtype),
        np.empty((Ts, B, K), dtype),
        np.empty((Ts, B, K), dtype),
    )
    shifts = np.empty((Ts, B, K, num_shifts), dtype)
    paths = np.empty((Ts, B, 4, K, N))
    key_norms, slot_norms = np.empty((Ts, B, K)), np.empty((Ts, B, 2, N))
    assign(hs[0], h0)
    assign(cs[0], c0)
    assign(reads[0], r0)
    assign(memory[0], m0)
    assign(read_w[0], wr0)
    assign(write_w[0], ww0)
    for t in range(T):
        now, nxt = (t, t + 1) if keep else (t % 2, (t + 1) % 2)
        ts = t if keep else 0
        pre = acts[ts]
        assign(pre, xp[:, t] + np.dot(reads[now], w_read_t))  # W_x x_t + W_r r_{t-1} + b
        if pnr:
            assign(out[:, t, :hidden], pre[:, :hidden])  # h'bar_t, eqs. 9 and 12
        if kind != FNN:
            pre += np.dot(hs[now], w_rec_t)  # + W_h h_{t-1}
        for b in range(B):  # (i)
            _controller_forward(kind, pnr, pre[b], cs[now, b], hs[nxt, b], cs[nxt, b], out[b, t, :hidden])
        assign(params[ts], np.dot(hs[nxt], w_head_t) + b_head)
        for b in range(B):  # (ii) and (iii)
            _element_forward(
                params[ts, b],
                memory[now, b],
                read_w[now, b],
                write_w[now, b],
                width,
                num_shifts,
                memory[nxt, b],
                reads[nxt, b].reshape((R, width)),
                read_w[nxt, b],
                write_w[nxt, b],
                erase[ts, b],
                add[ts, b],
                betas[ts, b],
                gates[ts, b],
                shifts[ts, b],
                gammas[ts, b],
                paths[ts, b, 0],
                paths[ts, b, 1],
                paths[ts, b, 2],
                paths[ts, b, 3],
                key_norms[ts, b],
                slot_norms[ts, b, 0],
                slot_norms[ts, b, 1],
            )
            assign(out[b, t, hidden:], reads[nxt, b])  # (iv)
    states = (hs, cs, reads, memory, read_w, write_w)
    records = (acts, params, erase, add, betas, gates, shifts, gammas, paths, key_norms, slot_norms)
    return out, states, records


@njit
def _controller_backward(kind, gate, c_prev, c, grad_h, grad_c, grad_pre):
    """Gradient of the controller's pre-activation from that of h_t (and, for the LSTM, of
    c_t in grad_c, which becomes that of c_{t-1}); ``gate`` the activated gates."""
    hidden = grad_h.shape[0]
    if kind == LSTM:
        for k in range(hidden):
            z, i, f, o = gate[k], gate[hidden + k], gate[2 * hidden + k], gate[3 * hidden + k]
            tanh_c = math.tanh(c[k])
            dc = grad_c[k] + grad_h[k] * o * (1.0 - tanh_c * tanh_c)
            grad_pre[k] = dc * i * (1.0 - z * z)
            grad_pre[hidden + k] = dc * z * i * (1.0 - i)
            grad_pre[2 * hidden + k] = dc * c_prev[k] * f * (1.0 - f)
            grad_pre[3 * hidden + k] = grad_h[k] * tanh_c * o * (1.0 - o)
            grad_c[k] = dc * f
    else:
        for k in range(hidden):
            grad_pre[k] = grad_h[k] * (1.0 - gate[k] * gate[k])


@njit(nogil=True)
def sequence_backward(
    out,
    states,
    records,
    w_read,
    w_rec,
    w_head,
    kind,
    pnr,
    width,
    num_shifts,
    d_out,
    d_h,
    d_c,
    d_r,
    d_m,
    d_wr,
    d_ww,
):
    """Backward through time of ``sequence_forward`` (its outputs, states and records),
    given the gradients of the features (B, T, F) and of the final state; the weights
    untransposed (out, in). Returns the gradients (time-major) of xp (T, B, G), of the
    recurrent pre-activation W_h h_{t-1} (T, B, G; differs from xp's only for the partially
    non-recurrent controllers, whose h_out also reads h'bar_t), of the raw head parameters
    (T, B, P) and of the initial state (h0, c0, r0, m0, wr0, ww0)."""
    hs, cs, reads, memory, read_w, write_w = states
    acts, params, erase, add, betas, gates, shifts, gammas, paths, key_norms, slot_norms = records
    T, B, G = acts.shape[0], acts.shape[1], acts.shape[2]
    hidden, P = hs.shape[2], params.shape[2]
    R = read_w.shape[2]
    dtype = acts.dtype
    d_xp = np.empty((T, B, G), dtype)
    d_rec = np.empty((T, B, G), dtype) if pnr else d_xp
    d_params = np.empty((T, B, P), dtype)
    g_h, g_c, g_r = d_h.copy(), d_c.copy(), d_r.copy()
    g_m, g_wr, g_ww = d_m.copy(), d_wr.copy(), d_ww.copy()
    grad_reads = np.empty((B, R, width), dtype)
    for t in range(T - 1, -1, -1):
        for b in range(B):  # (iii) and (ii)
            for j in range(R * width):
                grad_reads[b, j // width, j % width] = d_out[b, t, hidden + j] + g_r[b, j]
            _element_backward(
                params[t, b],
                memory[t, b],
                read_w[t, b],
                write_w[t, b],
                width,
                num_shifts,
                memory[t + 1, b],
                read_w[t + 1, b],
                write_w[t + 1, b],
                erase[t, b],
                add[t, b],
                betas[t, b],
                gates[t, b],
                shifts[t, b],
                gammas[t, b],
                paths[t, b],
                key_norms[t, b],
                slot_norms[t, b, 0],
                slot_norms[t, b, 1],
                grad_reads[b],
                g_m[b],
                g_wr[b],
                g_ww[b],
                d_params[t, b],
                g_m[b],
                g_wr[b],
                g_ww[b],
            )
        # the head layer: d h_t = d params W_p (+ d h_out for the standard controllers)
        grad_h = g_h + np.dot(d_params[t], w_head)
        if not pnr:
            grad_h += d_out[:, t, :hidden]
        for b in range(B):  # (i) the controller, eqs. 1-7
            _controller_backward(kind, acts[t, b], cs[t, b], cs[t + 1, b], grad_h[b], g_c[b], d_rec[t, b])
            if pnr:  # h_out = tanh(h'bar_t) also reads the z block of the input pre-activation
                assign(d_xp[t, b], d_rec[t, b])
                for k in range(hidden):
                    h_out = out[b, t, k]
                    d_xp[t, b, k] += d_out[b, t, k] * (1.0 - h_out * h_out)
        if kind != FNN:
            g_h = np.dot(d_rec[t], w_rec)  # d h_{t-1}
        g_r = np.dot(d_xp[t], w_read)  # d r_{t-1}
    return d_xp, d_rec, d_params, (g_h, g_c, g_r, g_m, g_wr, g_ww)
