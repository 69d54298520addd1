"""Compiled CPU kernels (numba) for a whole TARDIS sequence: the forward time loop and the
backward pass through time of mannlab.models.tardis (eqs. 1-10, 18-19 and the writes of
algorithm 1), for every configuration of TARDISCell (gumbel straight-through, REINFORCE
samples or argmax reads; learned or scheduled 1/τ; layer norm and recurrent dropout on or
off). Run by ops/tardis/numba_sequence.py, the numba backend of the op ``tardis_sequence``
(ops/tardis/op.py); tests/ops/test_tardis_ops.py checks values and every gradient against
ops/tardis/reference.py, and tests/models/test_tardis.py the model on them against its per-step
tensor path.

Why: a TARDIS step is about 60 small tensor operations forward and 90 backward, each a few
microseconds of dispatch and autograd bookkeeping at batch 1. Here the time loop runs in
machine code and the matrix products of a step are one BLAS call each over the batch.

Per time step, for every batch row (0-based n = steps since the memory was empty; d = d_h,
k cells, a + c = q features per cell, m the read-MLP width, G = 4 d + 2):
    u = norm(counts)                                                               eq. 6
    P[i] = W_m^γ M_{t-1}[i]   (k x m, kept up to date: one row per write, see below)
    π[i] = a^T tanh(x_r + W_h^γ h_{t-1} + W_u^γ u + P[i]) - 100 [i read at t-1]     eq. 4
    p = softmax(π)                                                                 eq. 5
    τ = softplus(w^τ h_{t-1} + b^τ) + 1   (learned, eq. 18) or the scheduled 1/τ
    j = argmax softmax((π + g) τ)   gumbel straight-through (eq. 19; gradient of y)
      | argmax (π + g)              REINFORCE: a sample of p (Gumbel-max), no gradient
      | argmax π                    argmax / evaluation
    r = M_{t-1}[j] = [A[j]; C[j]]                                                  eq. 1
    [f, i, o | ĉ | α, β] pre-activations  x_g + W_h h_{t-1} + W_r r   (ĉ: β W^g_h h_{t-1} +
        W^g_x x_t + α W^g_r r)
    α, β = σ((z + l) / 0.3)   l logistic noise in training, 0 at evaluation        eq. 8
    f, i, o = σ(LN(.)), c̃ = tanh(LN(ĉ)) (LN only with layer norm)                 eqs. 7, 9
    c_t = f c_{t-1} + i (m ∘ c̃)   m the recurrent-dropout mask (scaled), else 1    eq. 9
    h_t = o tanh(LN(c_t))                                                          eq. 10
    v = W_m h_t; write row n while n < k, else row j: C[row] = v and
        P[row] = W_m^γ[:, :a] A[row] + W_m^γ[:, a:] v                              eq. 2
The fusion g(h_t, r_t) (eq. 11) and the output layer do not feed back into the recurrence:
the caller applies them to all steps at once.

Keeping P: the tensor path computes W_m^γ M_{t-1} (k x q times q x m) at every step; here
P starts as W_m^γ M_0 and only the written row changes (every write replaces one whole row:
the weights are exact one-hots). The backward carries the gradient of P alongside that of
C, and the weight gradient of W_m^γ is the sum over the values written (and M_0) instead
of over every row at every step: the same sum, grouped by where each row came from.
Since a write replaces one row, the backward walks the memory back in time from M_T with
the overwritten rows kept by the forward, instead of keeping M at every step.
"""

from __future__ import annotations

import math

import numpy as np

from mannlab.ops.numba_cache import njit
from mannlab.ops.numba_math import (
    FAST,
    argmax,
    assign,
    branchless_sigmoid,
    layer_norm,
    layer_norm_backward,
    sigmoid_array,
    softmax,
    softplus,
    softplus_grad,
    tanh_array,
)

GUMBEL, REINFORCE, ARGMAX = 0, 1, 2


@njit(fastmath=FAST, error_model="numpy", nogil=True)
def sequence_forward(
    xg,
    xr,
    gumbel,
    logistic,
    mask,
    use_mask,
    h0,
    c0,
    C0,
    mp0,
    aproj,
    address,
    counts0,
    last0,
    steps0,
    w_hT,
    w_rgT,
    w_cT,
    w_quT,
    score,
    b_tau,
    learned,
    inv_tau,
    use_ln,
    lng_w,
    lng_b,
    lnc_w,
    lnc_b,
    lnm_w,
    lnm_b,
    eps,
    penalty,
    reset_temp,
    usage_eps,
    mode,
    train,
    keep,
):
    """All T steps. xg (B, T, G) the input's gate pre-activations (with bias), xr (B, T, m)
    W_x^γ x + b; gumbel (T, B, k) Gumbel noise (modes GUMBEL, REINFORCE), logistic (T, B, 2)
    (train), mask (T, B, d) scaled dropout masks (use_mask); h0, c0 (B, d), C0 (B, k, c),
    mp0 = W_m^γ M_0 (B, k, m), aproj = W_m^γ[:, :a] A (k, m), address A (k, a), counts0 and
    last0 (B, k), steps0 (B,); weights transposed (in, out) except score a (m,) and b_tau
    (1,); w_hT = [W_m; W_h; W_h^γ; w^τ]^T (d, c + G + m + 1), everything h_t multiplies: one
    matrix product per step gives v_t and step t + 1's h-terms. Returns the per-step outputs h_t, r_t,
    p_t, read and write one-hots, [α, β], 1/τ, u_t (B, T, .), the final c, C, counts, last read,
    and what the backward reads (one step's scratch only when ``keep`` is False: no backward to
    come)."""
    B, T, G = xg.shape
    d = h0.shape[1]
    k, cw = C0.shape[1], C0.shape[2]
    m = mp0.shape[2]
    aw = address.shape[1]
    q = aw + cw
    dtype = xg.dtype
    Ts = T if keep else 1
    o_g, o_q = cw, cw + G  # column blocks of h W_hT: v | W_h h | W_h^γ h | w^τ h
    o_t = o_q + m
    # outputs
    h_all = np.empty((B, T, d), dtype)
    r_all = np.empty((B, T, q), dtype)
    probs = np.empty((B, T, k), dtype)
    readw = np.zeros((B, T, k), dtype)
    writew = np.zeros((B, T, k), dtype)
    resets = np.empty((B, T, 2), dtype)
    tau_all = np.empty((B, T), dtype)
    u_all = np.empty((B, T, k), dtype)
    # kept for the backward
    hprev = np.empty((B, Ts, d), dtype)
    cprev = np.empty((B, Ts, d), dtype)
    pre_all = np.empty((B, Ts, k * m), dtype)
    pg_all = np.zeros((B, Ts, k), dtype)
    y_all = np.zeros((B, Ts, k), dtype)
    sig_tau = np.zeros((B, Ts), dtype)
    jr = np.empty((B, Ts), np.int64)
    jw = np.empty((B, Ts), np.int64)
    act = np.empty((B, Ts, 3 * d), dtype)
    cand = np.empty((B, Ts, d), dtype)
    th_all = np.empty((B, Ts, d), dtype)
    xhat_g = np.zeros((B, Ts, 3 * d), dtype)
    xhat_c = np.zeros((B, Ts, d), dtype)
    xhat_m = np.zeros((B, Ts, d), dtype)
    rstd = np.zeros((B, Ts, 3), dtype)
    hpc = np.empty((B, Ts, d), dtype)
    rpc = np.empty((B, Ts, d), dtype)
    v_all = np.empty((B, Ts, cw), dtype)
    vm_all = np.empty((B, Ts, m), dtype)
    oldC = np.empty((B, Ts, cw), dtype)
    oldmp = np.empty((B, Ts, m), dtype)
    # state and scratch
    h = h0.copy()
    c = c0.copy()
    C = C0.copy()
    mp = mp0.copy()
    counts = counts0.copy()
    last = last0.copy()
    u = np.empty((B, k), dtype)
    r = np.empty((B, q), dtype)
    query = np.empty(m, dtype)
    pi = np.empty(k, dtype)
    z = np.empty(k, dtype)
    gates = np.empty(3 * d, dtype)
    gates_n = np.empty(3 * d, dtype)
    candp = np.empty(d, dtype)
    cand_n = np.empty(d, dtype)
    c_out = np.empty(d, dtype)
    hh = np.dot(h, w_hT)
    for t in range(T):
        ts = t if keep else 0
        assign(hprev[:, ts], h)
        assign(cprev[:, ts], c)
        for b in range(B):  # eq. 6: normalised usage
            mean = 0.0
            for i in range(k):
                mean += counts[b, i]
            mean /= k
            var = 0.0
            for i in range(k):
                e = counts[b, i] - mean
                var += e * e
            scale = 1.0 / math.sqrt(var / k + usage_eps)
            for i in range(k):
                u[b, i] = (counts[b, i] - mean) * scale
                u_all[b, t, i] = u[b, i]
        uq = np.dot(u, w_quT)  # (B, m)  W_u^γ u_t
        for b in range(B):
            if learned:  # eq. 18
                s = b_tau[0] + hh[b, o_t]
                tau = softplus(s) + 1.0
                sig_tau[b, ts] = softplus_grad(s)
            else:
                tau = inv_tau
            tau_all[b, t] = tau
            for e in range(m):  # eq. 4
                query[e] = xr[b, t, e] + hh[b, o_q + e] + uq[b, e]
            pre = pre_all[b, ts]
            for i in range(k):
                for e in range(m):
                    pre[i * m + e] = query[e] + mp[b, i, e]
            tanh_array(pre, pre)
            for i in range(k):
                acc = 0.0
                for e in range(m):
                    acc += score[e] * pre[i * m + e]
                pi[i] = acc - penalty * last[b, i]
            softmax(pi, probs[b, t])  # eq. 5
            if mode == GUMBEL and train:  # eq. 19, straight-through
                for i in range(k):
                    pg = pi[i] + gumbel[t, b, i]
                    pg_all[b, ts, i] = pg
                    z[i] = pg * tau
                softmax(z, y_all[b, ts])
                j = argmax(y_all[b, ts])
            elif mode == REINFORCE and train:  # a sample of p (Gumbel-max)
                for i in range(k):
                    z[i] = pi[i] + gumbel[t, b, i]
                j = argmax(z)
            else:
                j = argmax(pi)
            jr[b, ts] = j
            readw[b, t, j] = 1.0
            for e in range(aw):  # eq. 1: r = M_{t-1}[j]
                r[b, e] = address[j, e]
            for e in range(cw):
                r[b, aw + e] = C[b, j, e]
            assign(r_all[b, t], r[b])
            counts[b, j] += 1.0
            for i in range(k):
                last[b, i] = 0.0
            last[b, j] = 1.0
        rp = np.dot(r, w_rgT)  # (B, G)
        for b in range(B):
            for e in range(2):  # eq. 8: RESET gates
                zr = xg[b, t, 4 * d + e] + hh[b, o_g + 4 * d + e] + rp[b, 4 * d + e]
                if train:
                    zr += logistic[t, b, e]
                resets[b, t, e] = branchless_sigmoid(zr / reset_temp)
            alpha = resets[b, t, 0]
            beta = resets[b, t, 1]
            for e in range(3 * d):  # eq. 7 pre-activations
                gates[e] = xg[b, t, e] + hh[b, o_g + e] + rp[b, e]
            for e in range(d):  # eq. 9 pre-activation
                hp_c = hh[b, o_g + 3 * d + e]
                hpc[b, ts, e] = hp_c
                rpc[b, ts, e] = rp[b, 3 * d + e]
                candp[e] = beta * hp_c + xg[b, t, 3 * d + e] + alpha * rp[b, 3 * d + e]
            if use_ln:
                rstd[b, ts, 0] = layer_norm(gates, lng_w, lng_b, eps, xhat_g[b, ts], gates_n)
                rstd[b, ts, 1] = layer_norm(candp, lnc_w, lnc_b, eps, xhat_c[b, ts], cand_n)
            else:
                assign(gates_n, gates)
                assign(cand_n, candp)
            sigmoid_array(gates_n, act[b, ts])  # f, i, o (eq. 7)
            tanh_array(cand_n, cand[b, ts])
            for e in range(d):  # eq. 9
                cd = cand[b, ts, e]
                if use_mask:
                    cd = cd * mask[t, b, e]
                c[b, e] = act[b, ts, e] * c[b, e] + act[b, ts, d + e] * cd
            if use_ln:
                rstd[b, ts, 2] = layer_norm(c[b], lnm_w, lnm_b, eps, xhat_m[b, ts], c_out)
            else:
                assign(c_out, c[b])
            tanh_array(c_out, th_all[b, ts])
            for e in range(d):  # eq. 10
                hn = act[b, ts, 2 * d + e] * th_all[b, ts, e]
                h_all[b, t, e] = hn
                h[b, e] = hn
        hh = np.dot(h, w_hT)  # h_t's products (next step's too)
        v = np.ascontiguousarray(hh[:, :cw])  # (B, c)  eq. 2: W_m h_t
        vm = np.dot(v, w_cT)  # (B, m)  its share of P
        for b in range(B):  # algorithm 1: the write
            step = steps0[b] + t
            j = step if step < k else jr[b, ts]
            jw[b, ts] = j
            writew[b, t, j] = 1.0
            assign(oldC[b, ts], C[b, j])
            assign(oldmp[b, ts], mp[b, j])
            assign(C[b, j], v[b])
            for e in range(m):
                mp[b, j, e] = aproj[j, e] + vm[b, e]
            assign(v_all[b, ts], v[b])
            assign(vm_all[b, ts], vm[b])
    saved = (
        hprev,
        cprev,
        pre_all,
        pg_all,
        y_all,
        sig_tau,
        jr,
        jw,
        act,
        cand,
        th_all,
        xhat_g,
        xhat_c,
        xhat_m,
        rstd,
        hpc,
        rpc,
        v_all,
        vm_all,
        oldC,
        oldmp,
        mp,
    )
    return h_all, r_all, probs, readw, writew, resets, tau_all, u_all, c, C, counts, last, saved


@njit(fastmath=FAST, error_model="numpy", nogil=True)
def sequence_backward(
    saved,
    h_all,
    r_all,
    probs,
    resets,
    tau_all,
    C_T,
    mask,
    use_mask,
    address,
    aproj,
    steps0,
    w_h,
    w_rg,
    w_c,
    score,
    learned,
    use_ln,
    lng_w,
    lnc_w,
    lnm_w,
    reset_temp,
    mode,
    read_grad,
    d_h_all,
    d_r_all,
    d_probs,
    use_dprobs,
    d_readw,
    d_writew,
    d_resets,
    d_tau_all,
    d_cT,
    d_CT,
):
    """Backpropagation through time of sequence_forward (a training pass: ``mode`` GUMBEL
    means straight-through gradients to the read logits). Weights as stored (out, in); w_h =
    [W_m; W_h; W_h^γ; w^τ] (c + G + m + 1, d): the gradient of h_t is one product of it with
    [dv_t | the gradients of step t + 1's h-terms].
    ``read_grad``: whether any gradient reaches the read logits (gumbel, or d_probs given);
    without it the read MLP's backward is skipped. Returns the gradients of xg, xr, h0, c0,
    C0, mp0, aproj, of v = W_m h_t and vm = W_m^γ[:, a:] v at every step (B, T, .), of the
    pre-activation of 1/τ (B, T), and the sums for a (m) and the layer norms' gains and
    biases."""
    (
        hprev,
        cprev,
        pre_all,
        pg_all,
        y_all,
        sig_tau,
        jr,
        jw,
        act,
        cand,
        th_all,
        xhat_g,
        xhat_c,
        xhat_m,
        rstd,
        hpc,
        rpc,
        v_all,
        vm_all,
        oldC,
        oldmp,
        mp_T,
    ) = saved
    B, T, d = hprev.shape
    k, cw = C_T.shape[1], C_T.shape[2]
    m = mp_T.shape[2]
    aw = address.shape[1]
    q = aw + cw
    G = 4 * d + 2
    o_g, o_q = cw, cw + G
    o_t = o_q + m
    dtype = hprev.dtype
    d_xg = np.empty((B, T, G), dtype)
    d_xr = np.zeros((B, T, m), dtype)
    dv_all = np.empty((B, T, cw), dtype)
    dvm_all = np.empty((B, T, m), dtype)
    dtaupre = np.zeros((B, T), dtype)
    d_aproj = np.zeros((k, m), dtype)
    d_score = np.zeros(m, dtype)
    d_lng_w = np.zeros(3 * d, dtype)
    d_lng_b = np.zeros(3 * d, dtype)
    d_lnc_w = np.zeros(d, dtype)
    d_lnc_b = np.zeros(d, dtype)
    d_lnm_w = np.zeros(d, dtype)
    d_lnm_b = np.zeros(d, dtype)
    dcar = np.zeros((B, o_t + 1), dtype)  # [dv_t | d(W_h h_t) | d(W_h^γ h_t) | d(w^τ h_t)]
    dc = d_cT.copy()
    dC = d_CT.copy()
    dmp = np.zeros((B, k, m), dtype)
    C = C_T.copy()  # walked back to M_{t-1} step by step
    mp = mp_T.copy()
    dv = np.empty((B, cw), dtype)
    dvm = np.empty((B, m), dtype)
    dw = np.zeros((B, k), dtype)
    drp = np.empty((B, G), dtype)
    dq = np.zeros((B, m), dtype)
    dgo = np.empty(d, dtype)
    dcout = np.empty(d, dtype)
    dcn = np.empty(d, dtype)
    dgy = np.empty(3 * d, dtype)
    dgp = np.empty(3 * d, dtype)
    dcy = np.empty(d, dtype)
    dcp = np.empty(d, dtype)
    ds = np.empty(k, dtype)
    dpi = np.empty(k, dtype)
    for t in range(T - 1, -1, -1):
        for b in range(B):  # the write (algorithm 1, eq. 2)
            j = jw[b, t]
            if mode == GUMBEL and steps0[b] + t >= k:  # the written slot is the read one
                for i in range(k):
                    acc = d_writew[b, t, i]
                    if i == j:
                        for e in range(cw):
                            acc += dC[b, i, e] * (v_all[b, t, e] - oldC[b, t, e])
                        for e in range(m):
                            acc += dmp[b, i, e] * (aproj[i, e] + vm_all[b, t, e] - oldmp[b, t, e])
                    else:
                        for e in range(cw):
                            acc += dC[b, i, e] * (v_all[b, t, e] - C[b, i, e])
                        for e in range(m):
                            acc += dmp[b, i, e] * (aproj[i, e] + vm_all[b, t, e] - mp[b, i, e])
                    dw[b, i] = acc
            for e in range(cw):
                dv[b, e] = dC[b, j, e]
                dC[b, j, e] = 0.0
                C[b, j, e] = oldC[b, t, e]
            for e in range(m):
                g = dmp[b, j, e]
                dvm[b, e] = g
                d_aproj[j, e] += g
                dmp[b, j, e] = 0.0
                mp[b, j, e] = oldmp[b, t, e]
        dv += np.dot(dvm, w_c)  # (B, c)
        assign(dv_all[:, t], dv)
        assign(dvm_all[:, t], dvm)
        assign(dcar[:, :cw], dv)
        dh = np.dot(dcar, w_h)  # (B, d): the gradient of h_t
        for b in range(B):
            for e in range(d):
                dh[b, e] += d_h_all[b, t, e]
        for b in range(B):  # eqs. 10, 9, 7, 8
            for e in range(d):
                th = th_all[b, t, e]
                o = act[b, t, 2 * d + e]
                dgo[e] = dh[b, e] * th * o * (1.0 - o)
                dcout[e] = dh[b, e] * o * (1.0 - th * th)
            if use_ln:
                layer_norm_backward(dcout, lnm_w, xhat_m[b, t], rstd[b, t, 2], dcn)
                for e in range(d):
                    d_lnm_w[e] += dcout[e] * xhat_m[b, t, e]
                    d_lnm_b[e] += dcout[e]
            else:
                assign(dcn, dcout)
            for e in range(d):
                dct = dc[b, e] + dcn[e]
                f = act[b, t, e]
                i_g = act[b, t, d + e]
                cd = cand[b, t, e]
                mk = mask[t, b, e] if use_mask else 1.0
                dgy[e] = dct * cprev[b, t, e] * f * (1.0 - f)
                dgy[d + e] = dct * cd * mk * i_g * (1.0 - i_g)
                dgy[2 * d + e] = dgo[e]
                dcy[e] = dct * i_g * mk * (1.0 - cd * cd)
                dc[b, e] = dct * f
            if use_ln:
                layer_norm_backward(dgy, lng_w, xhat_g[b, t], rstd[b, t, 0], dgp)
                layer_norm_backward(dcy, lnc_w, xhat_c[b, t], rstd[b, t, 1], dcp)
                for e in range(3 * d):
                    d_lng_w[e] += dgy[e] * xhat_g[b, t, e]
                    d_lng_b[e] += dgy[e]
                for e in range(d):
                    d_lnc_w[e] += dcy[e] * xhat_c[b, t, e]
                    d_lnc_b[e] += dcy[e]
            else:
                assign(dgp, dgy)
                assign(dcp, dcy)
            alpha = resets[b, t, 0]
            beta = resets[b, t, 1]
            d_alpha = d_resets[b, t, 0]
            d_beta = d_resets[b, t, 1]
            for e in range(d):
                d_alpha += dcp[e] * rpc[b, t, e]
                d_beta += dcp[e] * hpc[b, t, e]
            for e in range(3 * d):
                g = dgp[e]
                d_xg[b, t, e] = g
                dcar[b, o_g + e] = g
                drp[b, e] = g
            for e in range(d):
                g = dcp[e]
                d_xg[b, t, 3 * d + e] = g
                dcar[b, o_g + 3 * d + e] = beta * g
                drp[b, 3 * d + e] = alpha * g
            g_a = d_alpha * alpha * (1.0 - alpha) / reset_temp
            g_b = d_beta * beta * (1.0 - beta) / reset_temp
            d_xg[b, t, 4 * d] = g_a
            d_xg[b, t, 4 * d + 1] = g_b
            dcar[b, o_g + 4 * d] = g_a
            dcar[b, o_g + 4 * d + 1] = g_b
            drp[b, 4 * d] = g_a
            drp[b, 4 * d + 1] = g_b
        dr = np.dot(drp, w_rg)  # (B, q)
        for b in range(B):  # eqs. 1, 19, 5, 4, 18
            for e in range(q):
                dr[b, e] += d_r_all[b, t, e]
            j = jr[b, t]
            for e in range(cw):
                dC[b, j, e] += dr[b, aw + e]
            for i in range(k):
                dpi[i] = 0.0
            dtau = 0.0
            if mode == GUMBEL:
                filling = steps0[b] + t < k
                for i in range(k):
                    acc = d_readw[b, t, i]
                    if not filling:
                        acc += dw[b, i]
                    for e in range(aw):
                        acc += dr[b, e] * address[i, e]
                    for e in range(cw):
                        acc += dr[b, aw + e] * C[b, i, e]
                    ds[i] = acc
                tau = tau_all[b, t]
                mean = 0.0
                for i in range(k):
                    mean += y_all[b, t, i] * ds[i]
                for i in range(k):
                    g = y_all[b, t, i] * (ds[i] - mean)
                    dpi[i] = tau * g
                    dtau += g * pg_all[b, t, i]
            if use_dprobs:
                mean = 0.0
                for i in range(k):
                    mean += probs[b, t, i] * d_probs[b, t, i]
                for i in range(k):
                    dpi[i] += probs[b, t, i] * (d_probs[b, t, i] - mean)
            if learned:
                dtau += d_tau_all[b, t]
                g = dtau * sig_tau[b, t]
                dtaupre[b, t] = g
                dcar[b, o_t] = g
            if read_grad:  # eq. 4
                for e in range(m):
                    dq[b, e] = 0.0
                for i in range(k):
                    g = dpi[i]
                    if g == 0.0:
                        continue
                    for e in range(m):
                        p = pre_all[b, t, i * m + e]
                        d_score[e] += g * p
                        gp = g * score[e] * (1.0 - p * p)
                        dq[b, e] += gp
                        dmp[b, i, e] += gp
                for e in range(m):
                    d_xr[b, t, e] = dq[b, e]
                    dcar[b, o_q + e] = dq[b, e]
    dcar[:, :cw] = 0.0
    dh = np.dot(dcar, w_h)  # the gradient of h_0
    return (
        d_xg,
        d_xr,
        dh,
        dc,
        dC,
        dmp,
        d_aproj,
        dv_all,
        dvm_all,
        dtaupre,
        d_score,
        d_lng_w,
        d_lng_b,
        d_lnc_w,
        d_lnc_b,
        d_lnm_w,
        d_lnm_b,
    )
