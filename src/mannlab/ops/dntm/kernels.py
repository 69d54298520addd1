"""Compiled CPU kernels (numba) for a whole D-NTM sequence: the forward time loop and the
backward pass through time of mannlab.models.dntm (Gulcehre et al. 2016, sections 2-4 with
corrections to the paper's text noted in that module), for the GRU and the feed-forward (tanh) controller.
Called by ops/dntm/numba_sequence.py (the op mannlab.ops.dntm.dntm_sequence, backend "numba");
tests/ops/test_dntm_ops.py checks values, samples and every gradient against ops/dntm/reference.py.

Why: at batch 1 a D-NTM addressing step is about 70 small tensor operations forward and
100 backward, each a few microseconds of dispatch and autograd bookkeeping. Here the time
loop runs in machine code; the matrix products of each step are one BLAS call over the batch.
The per-row work is in small functions (one loop nest each): written inline in the time
loop, the same loops ran 3-5x slower (LLVM did not vectorise them there).

Per time step t and addressing step j (s = t J + j), for every batch row (paper symbols;
W = d_a + d_c, K = R + H heads, read heads first):
    a = x_c + W_r φ_{s-1}     (x_c = W_x x_t + b, precomputed; φ flattened to R W)
    GRU: g = W_h h_{s-1} + b_h;  r, u = σ(a + g);  n = tanh(a_n + r g_n);
         h_s = n + u (h_{s-1} - n)                                            eq. 1
    FNN: h_s = tanh(a)                                                        eq. 2
    p = W_p h_s + b_p = [k^r | k^w | β | γ | e | α_h | c_h]   (the head layer)
    β = softplus(.) + 1 (eq. 9), γ = σ(.) (eq. 12), e = σ(.),
    α = σ(α_h + v_α^T x_t) (eq. 3), c̄ = ReLU(c_h + α W_x x_t) (eq. 4)
    per head over M_{s-1} = [A; C_{s-1}] (reads; writes over C_{s-1}, or [A; C] with memory keys):
        S_i = k . m_i / (|k| |m_i| + ε)                                       eqs. 10-11
        z_i = β S_i;  w = softmax(z - γ v_{s-1});  v_s = 0.1 v_{s-1} + 0.9 z   eqs. 12-13
        (without LRU w = softmax(z), v unchanged)
    discrete: w~ = one-hot(argmax_i p_i / E_i), E ~ Exp(1) (torch.multinomial's draw of one
    sample, with the same exponentials), or one-hot(argmax_i p_i)                section 4
    φ_s = (w ∘ access)^T M_{s-1}                                              eq. 5
    C_s[i] = C_{s-1}[i] ∘ prod_h (1 - u_h(i) e_h) + sum_h u_h(i) c̄_h  (u ∘ access)   eq. 6
    features at t (last addressing step): [h_s; φ_s]
``access`` is 0 on the NOP cell (the last one with nop) and 1 elsewhere.
Sequential writes (``fixed_writes``, one write head, not learned): the write head addresses
nothing; its cell is n for the n-th write while cells remain (never the NOP cell), then the
cell read least so far (the step's reads counted first; the first of equal counts), and its
recorded probabilities are that one-hot. The counts of writes and of reads per cell are state.

Addressing modes (``mode``): 0 soft, 1 sampled one-hots (REINFORCE training), 2 argmax,
3 straight-through Gumbel-softmax: the forward takes mode 1's sampled one-hots, the backward
the gradient of the relaxed sample y = softmax((l - log E) / τ) (l the logits of w, so that
l - log E = l + g with g ~ Gumbel(0, 1)), recomputed from the recorded draws E.
The backward returns the gradients of the precomputed input, of the controller's and the
head layer's pre-activations per step (the caller turns them into weight gradients with one
matrix product each over all steps), of the address part A and of the initial state. It also
takes the gradients of the trace outputs (probabilities, head activations, content after
each time step), the terms of DNTM.aux_loss flow through.
"""

from __future__ import annotations

import math

import numpy as np

from mannlab.ops.numba_cache import njit
from mannlab.ops.numba_math import (
    FAST,
    argmax,
    assign,
    sigmoid,
    sigmoid_array,
    softmax,
    softplus,
    softplus_grad_exp,
    tanh_array,
)

SOFT, SAMPLE, ARGMAX, GUMBEL = 0, 1, 2, 3


@njit
def _head_layout(R, H, W, dc, memory_keys):
    """Width of a write key and the offsets of the head blocks in the controller's head
    projection: read keys (R x W), write keys (H x Kw), β (R + H), γ (R + H), erase
    (H x d_c), α (H), then the candidate content."""
    Kw = W if memory_keys else dc
    o_kw = R * W
    o_beta = o_kw + H * Kw
    o_gamma = o_beta + R + H
    o_e = o_gamma + R + H
    o_ah = o_e + H * dc
    return Kw, o_kw, o_beta, o_gamma, o_e, o_ah, o_ah + H


@njit
def _sample(p, noise, base):
    """torch.multinomial(p, 1): argmax_i p_i / E_i with E_i = noise[base + i] ~ Exp(1), in
    the array's dtype (as torch divides), the first of equal maxima."""
    best = 0
    top = p[0] / noise[base]
    for i in range(1, p.shape[0]):
        q = p[i] / noise[base + i]
        if q > top:
            top = q
            best = i
    return best


@njit(fastmath=FAST)
def _similarity(key, with_a, address_t, content_t, norms, eps, sim, den):
    """S_i = k . m_i / (|k| |m_i| + ε) (eqs. 10-11) over [A; C] (with_a) or C, given
    transposed (d, N) with row norms |m_i| ``norms``; fills S and the denominators."""
    da, N = address_t.shape
    dc = content_t.shape[0]
    nk2 = 0.0
    for d in range(key.shape[0]):
        nk2 += key[d] * key[d]
    nk = math.sqrt(nk2)
    off = da if with_a else 0
    sim[:] = 0.0
    if with_a:
        for d in range(da):
            kd = key[d]
            for i in range(N):
                sim[i] += kd * address_t[d, i]
    for d in range(dc):
        kd = key[off + d]
        for i in range(N):
            sim[i] += kd * content_t[d, i]  # k . m_i
    for i in range(N):
        dn = nk * norms[i] + eps
        den[i] = dn
        sim[i] /= dn


@njit(fastmath=FAST)
def _weighting(sim, beta, gamma, v, lru, decay, logits, probs):
    """w = softmax(z - γ v_{s-1}) with z = β S (eqs. 10, 12), or softmax(z) without LRU;
    updates the LRU average v in place, v_s = 0.1 v_{s-1} + 0.9 z (eq. 13, no gradient)."""
    for i in range(sim.shape[0]):
        z = beta * sim[i]
        if lru:
            logits[i] = z - gamma * v[i]
            v[i] = decay * v[i] + (1.0 - decay) * z
        else:
            logits[i] = z
    softmax(logits, probs)


@njit(fastmath=FAST)
def _norms(address_norms2, content_t, with_a, out):
    """|m_i| of the cells of [A; C] (with_a; |a_i|^2 given) or of C (transposed, (d_c, N))."""
    if with_a:
        assign(out, address_norms2)
    else:
        out[:] = 0.0
    for d in range(content_t.shape[0]):
        for i in range(content_t.shape[1]):
            out[i] += content_t[d, i] * content_t[d, i]
    for i in range(out.shape[0]):
        out[i] = math.sqrt(out[i])


@njit(fastmath=FAST)
def _gru(xa, a, g, b_hh, h_prev, h_new, gates, gn_out):
    """Eq. 1 on one row (as torch.nn.GRUCell): x_c + a = W_x x + b + W_r φ (xa, a), g = W_h h;
    fills h_new, the gates [r, u, n] and g_n = W_hn h + b_hn. The sigmoids and tanhs are
    numba_math's vectorised ones (libm's, one value at a time, were most of the time)."""
    dh = h_prev.shape[0]
    for k in range(2 * dh):
        gates[k] = xa[k] + a[k] + (g[k] + b_hh[k])
    sigmoid_array(gates[: 2 * dh], gates[: 2 * dh])  # r, u
    for k in range(dh):
        gn = g[2 * dh + k] + b_hh[2 * dh + k]
        gn_out[k] = gn
        gates[2 * dh + k] = xa[2 * dh + k] + a[2 * dh + k] + gates[k] * gn
    tanh_array(gates[2 * dh :], gates[2 * dh :])  # n
    for k in range(dh):
        u = gates[dh + k]
        n = gates[2 * dh + k]
        hp = h_prev[k]
        if u < 0.5:  # torch.lerp(n, h_{s-1}, u)
            h_new[k] = n + u * (hp - n)
        else:
            h_new[k] = hp - (hp - n) * (1.0 - u)


@njit(fastmath=FAST)
def _fnn(xa, a, h_new):
    """Eq. 2 on one row: h = tanh(W_x x + b + W_r φ)."""
    for k in range(h_new.shape[0]):
        h_new[k] = xa[k] + a[k]
    tanh_array(h_new, h_new)


@njit(fastmath=FAST)
def _heads(pre, b_p, x_in, x_gate, K, H, dc, o_beta, ab, beta_pre):
    """The head layer's activations on one row: keys as they are, β = softplus + 1 (eq. 9),
    γ = σ (eq. 12), e = σ, α = σ(. + v_α^T x) (eq. 3), c̄ = ReLU(. + α W_x x) (eq. 4)."""
    o_gamma = o_beta + K
    o_e = o_gamma + K
    o_ah = o_e + H * dc
    o_c = o_ah + H
    for k in range(o_beta):
        ab[k] = pre[k] + b_p[k]
    for k in range(K):
        x = pre[o_beta + k] + b_p[o_beta + k]
        beta_pre[k] = x
        ab[o_beta + k] = softplus(x) + 1.0
        ab[o_gamma + k] = sigmoid(pre[o_gamma + k] + b_p[o_gamma + k])
    for k in range(H * dc):
        ab[o_e + k] = sigmoid(pre[o_e + k] + b_p[o_e + k])
    for hh in range(H):
        alpha = sigmoid(pre[o_ah + hh] + b_p[o_ah + hh] + x_gate[hh])
        ab[o_ah + hh] = alpha
        for d in range(dc):
            q = o_c + hh * dc + d
            c = pre[q] + b_p[q] + alpha * x_in[hh * dc + d]
            ab[q] = c if c > 0.0 else 0.0


@njit(fastmath=FAST)
def _squared_norms(rows_t, out):
    """|a_i|^2 of the columns of a transposed (d, N) array."""
    out[:] = 0.0
    for d in range(rows_t.shape[0]):
        for i in range(rows_t.shape[1]):
            out[i] += rows_t[d, i] * rows_t[d, i]


@njit(fastmath=FAST)
def _read(weights, address_t, content_t, phi, discrete, index):
    """Eq. 5 for one head: φ = sum_i w_i [a_i; c_i] (w with the NOP cell zeroed; one-hot at
    ``index`` when discrete)."""
    da, N = address_t.shape
    dc = content_t.shape[0]
    if discrete:
        wi = weights[index]
        for d in range(da):
            phi[d] = wi * address_t[d, index]
        for d in range(dc):
            phi[da + d] = wi * content_t[d, index]
        return
    for d in range(da):
        acc = 0.0
        for i in range(N):
            acc += weights[i] * address_t[d, i]
        phi[d] = acc
    for d in range(dc):
        acc = 0.0
        for i in range(N):
            acc += weights[i] * content_t[d, i]
        phi[da + d] = acc


@njit(fastmath=FAST)
def _write(content_t, weights, erase, cand, discrete, index, keep):
    """Eq. 6 on one row, in place: C[i] = C[i] ∘ prod_h (1 - u_h(i) e_h) + sum_h u_h(i) c̄_h;
    content transposed (d_c, N), weights u (H, N) with the NOP cell zeroed (one-hot at
    index[h] when discrete: the other cells stay as they are), erase and candidates
    flattened (H d_c); keep: scratch (N)."""
    H, N = weights.shape
    dc = content_t.shape[0]
    if discrete:
        for hh in range(H):
            i = index[hh]
            seen = False
            for h2 in range(hh):
                if index[h2] == i:
                    seen = True
            if seen:  # each cell once
                continue
            for d in range(dc):
                prod = 1.0
                add = 0.0
                for h2 in range(H):
                    u = weights[h2, i]
                    prod *= 1.0 - u * erase[h2 * dc + d]
                    add += u * cand[h2 * dc + d]
                content_t[d, i] = content_t[d, i] * prod + add
        return
    if H == 1:
        for d in range(dc):
            e = erase[d]
            c = cand[d]
            row = content_t[d]
            for i in range(N):
                u = weights[0, i]
                row[i] = row[i] * (1.0 - u * e) + u * c
        return
    for d in range(dc):
        keep[:] = 1.0
        for hh in range(H):
            e = erase[hh * dc + d]
            for i in range(N):
                keep[i] *= 1.0 - weights[hh, i] * e
        row = content_t[d]
        for i in range(N):
            add = 0.0
            for hh in range(H):
                add += weights[hh, i] * cand[hh * dc + d]
            row[i] = row[i] * keep[i] + add


@njit(fastmath=FAST)
def _step_weights(probs, index, discrete, nop, weights):
    """The weightings a step used (K, N): w, or one-hot at index when discrete; 0 on the NOP
    cell (access)."""
    K, N = weights.shape
    for k in range(K):
        if discrete:
            weights[k] = 0.0
            weights[k, index[k]] = 1.0
        else:
            assign(weights[k], probs[k])
        if nop:
            weights[k, N - 1] = 0.0


@njit(fastmath=FAST, nogil=True)
def sequence_forward(
    xp,
    noise,
    h0,
    phi0,
    c0,
    vr0,
    vw0,
    w_rT,
    w_hT,
    b_hh,
    w_pT,
    b_p,
    address,
    written0,
    reads0,
    R,
    H,
    J,
    gru,
    lru,
    nop,
    memory_keys,
    fixed_writes,
    mode,
    eps,
    decay,
    keep,
    trace,
    every,
):
    """xp (B, T, P) = [x_c (Pc) | W_x x (H d_c) | v_α^T x (H)], noise (T J, B K N) Exp(1)
    draws (mode 1: per step the read heads' rows, then the write heads'), h0 (B, d_h) (GRU),
    φ0 (B, R W), C0 (B, N, d_c), v0 (B, R, N) and (B, H, N), the counts of writes (B,) and of
    reads per cell (B, N) (read with ``fixed_writes`` only); weights transposed (in, out).

    Returns (features (B, T, d_h + R W), h, φ, C, v^r, v^w, writes, reads), the records (h_s, head
    activations, β pre-activations, probabilities, chosen cells; (B, T J, ...) when ``keep``
    or ``trace``; and with ``trace`` the memory [A; C_t] after each time step) and what only
    the backward reads (with ``keep``): φ_{s-1}, the GRU gates, and C_{s-1} and v_{s-1} at every
    ``every``-th step only (the backward recomputes the others from them and the records: the
    memory per step was most of the saved bytes, and allocating them cost more than
    recomputing)."""
    B, T = xp.shape[0], xp.shape[1]
    N, da = address.shape
    dc = c0.shape[2]
    W = da + dc
    dh = w_pT.shape[0]
    P = w_pT.shape[1]
    Pc = w_rT.shape[1]
    K = R + H
    S = T * J
    Kw, o_kw, o_beta, o_gamma, o_e, o_ah, o_c = _head_layout(R, H, W, dc, memory_keys)
    x_in = Pc  # W_x x in xp
    x_gate = Pc + H * dc  # v_α^T x in xp
    full = keep or trace
    Sr = S if full else 1
    Sk = S if keep else 1
    dtype = xp.dtype
    out = np.empty((B, T, dh + R * W), dtype)
    hnew_all = np.empty((B, Sr, dh), dtype)
    act = np.empty((B, Sr, P), dtype)
    beta_pre = np.empty((B, Sr, K), dtype)
    probs = np.empty((B, Sr, K, N), dtype)
    index = np.zeros((B, Sr, K), np.int64)
    mtrace = np.empty((B, T if trace else 1, N, W), dtype)  # M_t = [A; C_t] (trace)
    if trace:  # A never changes: once
        for b in range(B):
            for t in range(T):
                assign(mtrace[b, t, :, :da], address)
    phiprev = np.empty((B, Sk, R * W), dtype)
    gates = np.empty((B, Sk if gru else 1, 3 * dh), dtype)  # r, u, n
    gn_all = np.empty((B, Sk if gru else 1, dh), dtype)  # W_hn h + b_hn
    checkpoints = (S + every - 1) // every if keep else 1
    c_saved = np.empty((B, checkpoints, dc, N), dtype)  # C_{s-1}, transposed
    v_saved = np.empty((B, checkpoints if lru else 1, K, N), dtype)
    h = h0.copy()
    hcur = np.empty((B, dh), dtype)
    phi = phi0.copy()
    # the memory is kept transposed, (d, N): the loops over the N cells are the inner ones
    address_t = np.ascontiguousarray(address.T)
    content = np.empty((B, dc, N), dtype)
    for b in range(B):
        assign(content[b], c0[b].T)
    v = np.empty((B, K, N), dtype)
    assign(v[:, :R], vr0)
    assign(v[:, R:], vw0)
    anorm2 = np.empty(N, dtype)
    _squared_norms(address_t, anorm2)
    norm_m = np.empty(N, dtype)  # |[a_i; c_i]|
    norm_c = np.empty(N, dtype)  # |c_i|
    sim = np.empty(N, dtype)
    den = np.empty(N, dtype)
    logits = np.empty(N, dtype)
    weights = np.empty((K, N), dtype)
    chosen = np.zeros(K, np.int64)
    keepbuf = np.empty(N, dtype)
    discrete = mode != SOFT
    written = written0.copy()
    reads = reads0.copy()
    cells = N - 1 if nop else N  # what sequential writes may pick
    for t in range(T):
        for j in range(J):
            s = t * J + j
            sr = s if full else 0
            sk = s if keep else 0
            a = np.dot(phi, w_rT)  # W_r φ_{s-1}
            if gru:
                g = np.dot(h, w_hT)  # W_h h_{s-1}
            else:
                g = a
            for b in range(B):  # the controller, eqs. 1-2
                if keep:
                    assign(phiprev[b, sk], phi[b])
                if gru:
                    _gru(xp[b, t], a[b], g[b], b_hh, h[b], hcur[b], gates[b, sk], gn_all[b, sk])
                else:
                    _fnn(xp[b, t], a[b], hcur[b])
                assign(hnew_all[b, sr], hcur[b])
            pre = np.dot(hcur, w_pT)  # the head layer
            for b in range(B):
                ab = act[b, sr]
                _heads(
                    pre[b],
                    b_p,
                    xp[b, t, x_in:x_gate],
                    xp[b, t, x_gate:],
                    K,
                    H,
                    dc,
                    o_beta,
                    ab,
                    beta_pre[b, sr],
                )
                cb = content[b]
                if keep and s % every == 0:
                    assign(c_saved[b, s // every], cb)
                    if lru:
                        assign(v_saved[b, s // every], v[b])
                _norms(anorm2, cb, True, norm_m)
                if not memory_keys:
                    _norms(anorm2, cb, False, norm_c)
                for k in range(K):  # eqs. 10-13
                    if k < R:
                        key = ab[k * W : (k + 1) * W]
                        with_a = True
                    elif fixed_writes:
                        continue  # below, once the reads are counted
                    else:
                        key = ab[o_kw + (k - R) * Kw : o_kw + (k - R + 1) * Kw]
                        with_a = memory_keys
                    p = probs[b, sr, k]
                    _similarity(key, with_a, address_t, cb, norm_m if with_a else norm_c, eps, sim, den)
                    _weighting(sim, ab[o_beta + k], ab[o_gamma + k], v[b, k], lru, decay, logits, p)
                    if discrete:  # section 4
                        if mode == SAMPLE or mode == GUMBEL:
                            base = (b * R + k) * N if k < R else B * R * N + (b * H + k - R) * N
                            chosen[k] = _sample(p, noise[s], base)
                        else:
                            chosen[k] = argmax(p)
                        index[b, sr, k] = chosen[k]
                if fixed_writes:
                    row = probs[b, sr]
                    chosen[R] = _sequential_cell(row, chosen, R, discrete, cells, written[b], reads[b])
                    written[b] += 1.0
                    index[b, sr, R] = chosen[R]
                _step_weights(probs[b, sr], chosen, discrete, nop, weights)
                for k in range(R):  # eq. 5, on M_{s-1}
                    _read(weights[k], address_t, cb, phi[b, k * W : (k + 1) * W], discrete, chosen[k])
                _write(
                    cb, weights[R:], ab[o_e:o_ah], ab[o_c : o_c + H * dc], discrete, chosen[R:], keepbuf
                )  # eq. 6
                if j == J - 1:
                    assign(out[b, t, :dh], hcur[b])
                    assign(out[b, t, dh:], phi[b])
                    if trace:
                        assign(mtrace[b, t, :, da:], cb.T)
            assign(h, hcur)
    records = (hnew_all, act, beta_pre, probs, index, mtrace)
    saved = (phiprev, gates, gn_all, c_saved, v_saved)
    final = np.empty((B, N, dc), dtype)
    for b in range(B):
        assign(final[b], content[b].T)
    return out, h, phi, final, v[:, :R].copy(), v[:, R:].copy(), written, reads, records, saved


@njit(fastmath=FAST)
def _sequential_cell(probs, chosen, R, discrete, cells, written, reads):
    """Sequential writes on one row: adds the step's read weightings to the counts ``reads``
    (N), then the cell of the write (cell ``written`` while cells remain, else the least read
    of the first ``cells``), whose one-hot becomes the write head's probabilities probs[R]."""
    N = reads.shape[0]
    for k in range(R):
        if discrete:
            reads[chosen[k]] += 1.0
        else:
            for i in range(N):
                reads[i] += probs[k, i]
    if written < cells:
        cell = int(written)
    else:
        cell = 0
        for i in range(1, cells):
            if reads[i] < reads[cell]:
                cell = i
    probs[R] = 0.0
    probs[R, cell] = 1.0
    return cell


@njit(fastmath=FAST)
def _address_backward(
    dl_all,
    sim,
    den,
    vprev,
    key,
    with_a,
    address_t,
    content_t,
    norms,
    beta,
    gamma,
    lru,
    dkey,
    d_address_t,
    d_content_t,
    dv,
    ddot,
    scale,
):
    """Backward of one head's weighting (eqs. 10-13) given dL/dl, l = z - γ v_{s-1} the logits
    of w (``dl_all``): returns (dβ, dγ), adds to the key's, A's and C's gradients (transposed,
    (d, N); |m| and |k| have gradient 0 at 0, as torch's norm). With LRU, dv holds decay *
    dL/dv_s on entry (v_s = 0.1 v_{s-1} + 0.9 z with z detached) and dL/dv_{s-1} on exit.
    ddot, scale: scratch (N)."""
    da, N = address_t.shape
    dc = content_t.shape[0]
    nk2 = 0.0
    for d in range(key.shape[0]):
        nk2 += key[d] * key[d]
    nk = math.sqrt(nk2)
    d_beta = 0.0
    d_gamma = 0.0
    dnk = 0.0
    for i in range(N):
        dl = dl_all[i]
        if lru:
            d_gamma -= dl * vprev[i]
            dv[i] -= gamma * dl
        sm = sim[i]
        dn = den[i]
        d_beta += dl * sm
        dS = beta * dl
        ddot[i] = dS / dn
        dden = -dS * sm / dn
        nm = norms[i]
        dnk += dden * nm
        scale[i] = dden * nk / nm if nm > 0.0 else 0.0
    off = da if with_a else 0
    if with_a:
        for d in range(da):
            kd = key[d]
            acc = 0.0
            row = address_t[d]
            grow = d_address_t[d]
            for i in range(N):
                acc += ddot[i] * row[i]
                grow[i] += ddot[i] * kd + scale[i] * row[i]
            dkey[d] += acc
    for d in range(dc):
        kd = key[off + d]
        acc = 0.0
        row = content_t[d]
        grow = d_content_t[d]
        for i in range(N):
            acc += ddot[i] * row[i]
            grow[i] += ddot[i] * kd + scale[i] * row[i]
        dkey[off + d] += acc
    if nk > 0.0:
        f = dnk / nk
        for d in range(key.shape[0]):
            dkey[d] += f * key[d]
    return d_beta, d_gamma


@njit(fastmath=FAST)
def _softmax_backward(probs, grad, scale, out, accumulate):
    """out_i (+)= scale p_i (g_i - sum_j p_j g_j): dL/dl of p = softmax(l) given g = dL/dp."""
    mean = 0.0
    for i in range(probs.shape[0]):
        mean += probs[i] * grad[i]
    for i in range(probs.shape[0]):
        d = scale * probs[i] * (grad[i] - mean)
        if accumulate:
            out[i] += d
        else:
            out[i] = d


@njit(fastmath=FAST)
def _relaxed_sample(sim, beta, gamma, vprev, lru, noise, base, inverse_temperature, out):
    """y = softmax((l - log E) / τ), l = β S - γ v_{s-1} (β S without LRU): the relaxed
    Gumbel-softmax sample whose gradient straight-through takes, from the draws E at base."""
    for i in range(sim.shape[0]):
        logit = beta * sim[i]
        if lru:
            logit -= gamma * vprev[i]
        out[i] = (logit - math.log(noise[base + i])) * inverse_temperature
    softmax(out, out)


@njit(fastmath=FAST)
def _write_backward(g_new, g_old, content_t, weights, erase, cand, dw, d_erase, d_cand, grad_w, index):
    """Backward of eq. 6 on one row (content and gradients transposed, (d_c, N)): g_new =
    dL/dC_s -> g_old = dL/dC_{s-1} (set), and adds dL/du (dw, when ``grad_w``: any weights,
    one-hot ones included), dL/de and dL/dc̄ (flattened H d_c). Without grad_w: one-hot
    weights at index[h], only their cells visited."""
    H, N = weights.shape
    dc = content_t.shape[0]
    if not grad_w:
        assign(g_old, g_new)
        for hh in range(H):
            i = index[hh]
            seen = False
            for h2 in range(hh):
                if index[h2] == i:
                    seen = True
            if seen:
                continue
            for d in range(dc):
                g = g_new[d, i]
                c_prev = content_t[d, i]
                keep = 1.0
                for h2 in range(H):
                    keep *= 1.0 - weights[h2, i] * erase[h2 * dc + d]
                g_old[d, i] = g * keep
                for h2 in range(H):
                    u = weights[h2, i]
                    if u == 0.0:
                        continue
                    others = 1.0
                    for h3 in range(H):
                        if h3 != h2:
                            others *= 1.0 - weights[h3, i] * erase[h3 * dc + d]
                    d_erase[h2 * dc + d] -= g * c_prev * u * others
                    d_cand[h2 * dc + d] += g * u
        return
    if H == 1:
        dw0 = dw[0]
        w0 = weights[0]
        for d in range(dc):
            e = erase[d]
            c = cand[d]
            gn = g_new[d]
            go = g_old[d]
            cp = content_t[d]
            acc_e = 0.0
            acc_c = 0.0
            for i in range(N):
                g = gn[i]
                u = w0[i]
                go[i] = g * (1.0 - u * e)
                dw0[i] += g * (c - cp[i] * e)
                acc_e += g * cp[i] * u
                acc_c += g * u
            d_erase[d] -= acc_e
            d_cand[d] += acc_c
        return
    for d in range(dc):
        for i in range(N):
            g = g_new[d, i]
            c_prev = content_t[d, i]
            keep = 1.0
            for hh in range(H):
                keep *= 1.0 - weights[hh, i] * erase[hh * dc + d]
            g_old[d, i] = g * keep
            for hh in range(H):
                others = 1.0
                for h2 in range(H):
                    if h2 != hh:
                        others *= 1.0 - weights[h2, i] * erase[h2 * dc + d]
                u = weights[hh, i]
                dw[hh, i] += g * (cand[hh * dc + d] - c_prev * erase[hh * dc + d] * others)
                d_erase[hh * dc + d] -= g * c_prev * u * others
                d_cand[hh * dc + d] += g * u


@njit(fastmath=FAST)
def _read_backward(dphi, weights, address_t, content_t, dw, d_address_t, d_content_t, grad_w, index):
    """Backward of eq. 5 for one head (transposed (d, N) arrays): adds dL/dw (when ``grad_w``;
    any weights) and w_i dφ to A's and C's gradients (without grad_w: the one cell at ``index``)."""
    da, N = address_t.shape
    dc = content_t.shape[0]
    if not grad_w:
        wi = weights[index]
        for d in range(da):
            d_address_t[d, index] += wi * dphi[d]
        for d in range(dc):
            d_content_t[d, index] += wi * dphi[da + d]
        return
    for d in range(da):
        f = dphi[d]
        row = address_t[d]
        grow = d_address_t[d]
        for i in range(N):
            dw[i] += f * row[i]
            grow[i] += weights[i] * f
    for d in range(dc):
        f = dphi[da + d]
        row = content_t[d]
        grow = d_content_t[d]
        for i in range(N):
            dw[i] += f * row[i]
            grow[i] += weights[i] * f


@njit(fastmath=FAST)
def _heads_backward(dact, ab, beta_pre, x_in, x_gate, K, H, dc, o_beta, dp, d_x_in, d_x_gate):
    """Backward of _heads on one row: dL/d activations -> dL/d pre-activations (dp) and adds
    to the gradients of W_x x and v_α^T x."""
    o_gamma = o_beta + K
    o_e = o_gamma + K
    o_ah = o_e + H * dc
    o_c = o_ah + H
    for k in range(o_beta):
        dp[k] = dact[k]
    for k in range(K):
        dp[o_beta + k] = dact[o_beta + k] * softplus_grad_exp(beta_pre[k])
        gm = ab[o_gamma + k]
        dp[o_gamma + k] = dact[o_gamma + k] * gm * (1.0 - gm)
    for k in range(H * dc):
        e = ab[o_e + k]
        dp[o_e + k] = dact[o_e + k] * e * (1.0 - e)
    for hh in range(H):
        alpha = ab[o_ah + hh]
        d_alpha = dact[o_ah + hh]
        for d in range(dc):
            q = o_c + hh * dc + d
            dq = dact[q] if ab[q] > 0.0 else 0.0  # ReLU, eq. 4
            dp[q] = dq
            d_alpha += dq * x_in[hh * dc + d]
            d_x_in[hh * dc + d] += dq * alpha
        dz = d_alpha * alpha * (1.0 - alpha)  # eq. 3
        dp[o_ah + hh] = dz
        d_x_gate[hh] += dz


@njit(fastmath=FAST)
def _gru_backward(dh_out, dh_heads, gates, gn, h_prev, da, dg, dh_keep):
    """Backward of eq. 1 on one row: dL/dh_s (two parts) -> dL/da (input side, = dL/dx_c),
    dL/dg (recurrent side) and the direct part u dL/dh_s of dL/dh_{s-1}."""
    dh = h_prev.shape[0]
    for k in range(dh):
        dtot = dh_out[k] + dh_heads[k]
        r = gates[k]
        u = gates[dh + k]
        n = gates[2 * dh + k]
        dpn = dtot * (1.0 - u) * (1.0 - n * n)
        dpu = dtot * (h_prev[k] - n) * u * (1.0 - u)
        dpr = dpn * gn[k] * r * (1.0 - r)
        dh_keep[k] = dtot * u
        da[k] = dpr
        da[dh + k] = dpu
        da[2 * dh + k] = dpn
        dg[k] = dpr
        dg[dh + k] = dpu
        dg[2 * dh + k] = dpn * r


@njit(fastmath=FAST)
def _fnn_backward(dh_out, dh_heads, h_new, da):
    for k in range(h_new.shape[0]):
        da[k] = (dh_out[k] + dh_heads[k]) * (1.0 - h_new[k] * h_new[k])


@njit(fastmath=FAST, nogil=True)
def sequence_backward(
    xp,
    h0,
    records,
    saved,
    w_r,
    w_h,
    w_p,
    address,
    R,
    H,
    J,
    gru,
    lru,
    nop,
    memory_keys,
    fixed_writes,
    mode,
    eps,
    decay,
    every,
    d_out,
    d_hT,
    d_phiT,
    d_cT,
    d_vrT,
    d_vwT,
    d_probs,
    has_probs,
    d_act,
    has_act,
    d_mtrace,
    has_mtrace,
    noise,
    inverse_temperature,
):
    """Backpropagation through time of sequence_forward. Weights as stored (out, in). The
    d_* of the records are read only when their has_* flag is set; ``noise`` (the forward's
    Exp(1) draws) and 1/τ only in mode 3 (straight-through Gumbel). Returns the gradients of
    xp (B, T, P), of the controller's pre-activations a (B, T J, Pc) and g (B, T J, 3 d_h)
    (GRU), of the head layer's pre-activations (B, T J, P_heads), of A, and of the initial
    h, φ, C, v^r, v^w.

    The time steps are taken in segments of ``every``, last segment first: each starts by
    recomputing its steps' memory C_{s-1}, similarities and LRU averages v_{s-1} from the
    checkpoint at its first step and the recorded weightings and head activations (eqs. 6,
    10-11, 13 again: no controller), then backpropagates through them in reverse."""
    hnew_all, act, beta_pre, probs, index, mtrace = records
    phiprev, gates, gn_all, c_saved, v_saved = saved
    B, T = xp.shape[0], xp.shape[1]
    N, da = address.shape
    dc = c_saved.shape[2]
    W = da + dc
    dh = w_p.shape[1]
    P = w_p.shape[0]
    Pc = w_r.shape[0]
    K = R + H
    S = T * J
    Kw, o_kw, o_beta, o_gamma, o_e, o_ah, o_c = _head_layout(R, H, W, dc, memory_keys)
    x_in = Pc
    x_gate = Pc + H * dc
    dtype = xp.dtype
    soft = mode == SOFT
    gumbel = mode == GUMBEL
    grad_w = soft or gumbel  # a gradient to the weightings w (straight-through: to y)
    d_xp = np.zeros(xp.shape, dtype)
    d_a_all = np.empty((B, S, Pc), dtype)
    d_g_all = np.empty((B, S if gru else 1, 3 * dh), dtype)
    d_p_all = np.empty((B, S, P), dtype)
    address_t = np.ascontiguousarray(address.T)  # transposed, as the forward's
    d_address_t = np.zeros((da, N), dtype)
    dhs = d_hT.copy()
    dphi = d_phiT.copy()
    dc_new = np.empty((B, dc, N), dtype)
    for b in range(B):
        assign(dc_new[b], d_cT[b].T)
    dc_old = np.empty((B, dc, N), dtype)
    dv = np.empty((B, K, N), dtype)
    assign(dv[:, :R], d_vrT)
    assign(dv[:, R:], d_vwT)
    anorm2 = np.empty(N, dtype)
    _squared_norms(address_t, anorm2)
    # one segment's recomputed memory: C_{s-1}, S, |k||m| + ε and v_{s-1} of each step
    c_seg = np.empty((B, every, dc, N), dtype)
    sim_seg = np.empty((B, every, K, N), dtype)
    den_seg = np.empty((B, every, K, N), dtype)
    v_seg = np.empty((B, every if lru else 1, K, N), dtype)
    c_work = np.empty((dc, N), dtype)
    v_work = np.empty((K, N), dtype)
    norm_m = np.empty(N, dtype)
    norm_c = np.empty(N, dtype)
    ddot = np.empty(N, dtype)
    scale = np.empty(N, dtype)
    keepbuf = np.empty(N, dtype)
    weights = np.empty((K, N), dtype)
    dw = np.empty((K, N), dtype)
    dl = np.empty(N, dtype)
    relaxed = np.empty(N, dtype)
    dact = np.empty(P, dtype)
    dpre = np.empty((B, P), dtype)
    da_s = np.empty((B, Pc), dtype)
    dg_s = np.empty((B, 3 * dh), dtype)
    dh_keep = np.empty((B, dh), dtype)
    discrete = not soft
    for seg in range((S + every - 1) // every - 1, -1, -1):
        s0 = seg * every
        s1 = min(S, s0 + every)
        for b in range(B):  # recompute the segment
            assign(c_work, c_saved[b, seg])
            if lru:
                assign(v_work, v_saved[b, seg])
            for s in range(s0, s1):
                q = s - s0
                ab = act[b, s]
                assign(c_seg[b, q], c_work)
                _norms(anorm2, c_work, True, norm_m)
                if not memory_keys:
                    _norms(anorm2, c_work, False, norm_c)
                for k in range(K):
                    if k < R:
                        key = ab[k * W : (k + 1) * W]
                        with_a = True
                    elif fixed_writes:
                        continue  # no addressing, no LRU average
                    else:
                        key = ab[o_kw + (k - R) * Kw : o_kw + (k - R + 1) * Kw]
                        with_a = memory_keys
                    _similarity(
                        key,
                        with_a,
                        address_t,
                        c_work,
                        norm_m if with_a else norm_c,
                        eps,
                        sim_seg[b, q, k],
                        den_seg[b, q, k],
                    )
                    if lru:
                        assign(v_seg[b, q, k], v_work[k])
                        beta = ab[o_beta + k]
                        for i in range(N):
                            v_work[k, i] = decay * v_work[k, i] + (1.0 - decay) * (beta * sim_seg[b, q, k, i])
                _step_weights(probs[b, s], index[b, s], discrete, nop, weights)
                _write(
                    c_work,
                    weights[R:],
                    ab[o_e:o_ah],
                    ab[o_c : o_c + H * dc],
                    discrete,
                    index[b, s, R:],
                    keepbuf,
                )
        for s in range(s1 - 1, s0 - 1, -1):
            q = s - s0
            t = s // J
            j = s - t * J
            for b in range(B):
                if j == J - 1:  # the features [h; φ]
                    # in place through views: no slice assignment (numba_math.assign says why)
                    grad_h, grad_phi = dhs[b], dphi[b]
                    grad_h += d_out[b, t, :dh]
                    grad_phi += d_out[b, t, dh:]
                    if has_mtrace:
                        grad_content = dc_new[b]
                        grad_content += d_mtrace[b, t, :, da:].T
                cb = c_seg[b, q]
                ab = act[b, s]
                _norms(anorm2, cb, True, norm_m)
                if not memory_keys:
                    _norms(anorm2, cb, False, norm_c)
                _step_weights(probs[b, s], index[b, s], discrete, nop, weights)
                if has_act:
                    assign(dact, d_act[b, s])
                else:
                    dact[:] = 0.0
                dw[:, :] = 0.0
                _write_backward(
                    dc_new[b],
                    dc_old[b],
                    cb,
                    weights[R:],
                    ab[o_e:o_ah],
                    ab[o_c : o_c + H * dc],
                    dw[R:],
                    dact[o_e:o_ah],
                    dact[o_c : o_c + H * dc],
                    grad_w,
                    index[b, s, R:],
                )  # eq. 6
                for k in range(R):  # eq. 5
                    _read_backward(
                        dphi[b, k * W : (k + 1) * W],
                        weights[k],
                        address_t,
                        cb,
                        dw[k],
                        d_address_t,
                        dc_old[b],
                        grad_w,
                        index[b, s, k],
                    )
                if nop:  # access: no gradient to w
                    for k in range(K):
                        dw[k, N - 1] = 0.0
                for k in range(K):  # eqs. 10-13
                    if fixed_writes and k >= R:
                        continue  # a fixed one-hot: no parameters, v unchanged
                    if lru:
                        for i in range(N):
                            dv[b, k, i] *= decay
                    if not (grad_w or has_probs):
                        continue  # one-hot: no path to w
                    if gumbel:  # straight-through: dL/dw reaches l through y
                        base = (b * R + k) * N if k < R else B * R * N + (b * H + k - R) * N
                        _relaxed_sample(
                            sim_seg[b, q, k],
                            act[b, s, o_beta + k],
                            act[b, s, o_gamma + k],
                            v_seg[b, q if lru else 0, k],
                            lru,
                            noise[s],
                            base,
                            inverse_temperature,
                            relaxed,
                        )
                        _softmax_backward(relaxed, dw[k], inverse_temperature, dl, False)
                        if has_probs:  # trace terms (aux_loss) on w itself
                            _softmax_backward(probs[b, s, k], d_probs[b, s, k], 1.0, dl, True)
                    else:
                        if has_probs:  # trace terms (aux_loss)
                            for i in range(N):
                                dw[k, i] += d_probs[b, s, k, i]
                        _softmax_backward(probs[b, s, k], dw[k], 1.0, dl, False)
                    if k < R:
                        o_key = k * W
                        width = W
                        with_a = True
                    else:
                        o_key = o_kw + (k - R) * Kw
                        width = Kw
                        with_a = memory_keys
                    d_beta, d_gamma = _address_backward(
                        dl,
                        sim_seg[b, q, k],
                        den_seg[b, q, k],
                        v_seg[b, q if lru else 0, k],
                        ab[o_key : o_key + width],
                        with_a,
                        address_t,
                        cb,
                        norm_m if with_a else norm_c,
                        ab[o_beta + k],
                        ab[o_gamma + k],
                        lru,
                        dact[o_key : o_key + width],
                        d_address_t,
                        dc_old[b],
                        dv[b, k],
                        ddot,
                        scale,
                    )
                    dact[o_beta + k] += d_beta
                    dact[o_gamma + k] += d_gamma
                _heads_backward(
                    dact,
                    ab,
                    beta_pre[b, s],
                    xp[b, t, x_in:x_gate],
                    xp[b, t, x_gate:],
                    K,
                    H,
                    dc,
                    o_beta,
                    dpre[b],
                    d_xp[b, t, x_in:x_gate],
                    d_xp[b, t, x_gate:],
                )
                assign(d_p_all[b, s], dpre[b])
            dh_heads = np.dot(dpre, w_p)  # (B, d_h)
            for b in range(B):  # the controller
                if gru:
                    h_prev = hnew_all[b, s - 1] if s > 0 else h0[b]
                    _gru_backward(
                        dhs[b], dh_heads[b], gates[b, s], gn_all[b, s], h_prev, da_s[b], dg_s[b], dh_keep[b]
                    )
                    assign(d_g_all[b, s], dg_s[b])
                else:
                    _fnn_backward(dhs[b], dh_heads[b], hnew_all[b, s], da_s[b])
                assign(d_a_all[b, s], da_s[b])
                grad_xp = d_xp[b, t, :Pc]
                grad_xp += da_s[b]
            dphi = np.dot(da_s, w_r)  # dL/dφ_{s-1}
            if gru:
                dhs = dh_keep + np.dot(dg_s, w_h)  # dL/dh_{s-1}
            else:
                dhs[:, :] = 0.0
            dc_new, dc_old = dc_old, dc_new
    if has_mtrace:  # the trace's copies of A
        for b in range(B):
            for t in range(T):
                d_address_t += d_mtrace[b, t, :, :da].T
    d_c0 = np.empty((B, N, dc), dtype)
    for b in range(B):
        assign(d_c0[b], dc_new[b].T)
    return (
        d_xp,
        d_a_all,
        d_g_all,
        d_p_all,
        np.ascontiguousarray(d_address_t.T),
        dhs,
        dphi,
        d_c0,
        dv[:, :R].copy(),
        dv[:, R:].copy(),
    )
