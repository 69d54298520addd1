"""Compiled CPU kernels (numba) for a whole ARMIN sequence: the forward time loop and the
backward pass through time of mannlab.models.armin, eqs. 3-10 and the write of section 3.3,
for the paper's configuration (auto-addressing, tied write, control gates, layer norm,
optional zoneout). Run by ops/armin/numba_sequence.py, the numba backend of the op
``armin_sequence`` (ops/armin/op.py); tests/ops/test_armin_kernels.py checks values and
gradients against ops/armin/reference.py, and tests/models/test_armin.py the model on them against its
per-step tensor path.

Why: at batch 1 an ARMIN step is about 40 small tensor operations forward and 60 backward,
each a few microseconds of dispatch and autograd bookkeeping. Here the time loop runs in
machine code; the matrix products of each step are one BLAS call over the batch.

Per time step, for every batch row (paper symbols; C = d_h + d_r, G = 4 d_h + d_r):
    l = x_s + W_s,h h_{t-1}                      (x_s = W_s,x x_t + b_s, precomputed)   eq. 9
    s = softmax(l) | softmax((l + g) / τ) | one-hot(argmax of that) | one-hot(argmax l)
    r = s^T M_{t-1}                                                                    eq. 10
    c = σ(LN_c(x_c + W_ig,h h_{t-1} + W_ig,r r))                                        eq. 3
    h^g = c[:d_h] ∘ h_{t-1},  r^g = c[d_h:] ∘ r                                        eqs. 4-5
    z = LN_g(x_g + W_go,h h^g + W_go,r r^g);  i, f, o^h, o^r = σ(z), g = tanh(z)        eq. 6
    ĥ = LN_h(f ∘ h_{t-1} + i ∘ g)                                                      eq. 7
    o_t = [o^h ∘ tanh ĥ, o^r ∘ tanh r]                                                 eq. 8
    h_t = z ∘ h_{t-1} + (1 - z) ∘ ĥ     (zoneout: z the 0/1 keep mask in training, p at
                                         evaluation; without zoneout h_t = ĥ)
    v = W_w h_t (or h_t);  w = one-hot(n) while n < n_mem else s;  M_t = lerp(M_{t-1}, v, w)

Addressing modes (``mode``): 0 soft, 1 gumbel-relaxed (the relaxed sample of eq. 1), 2 gumbel
straight-through (one-hot forward, gradient of the relaxed sample), 3 argmax (no gradient to
the logits).
The backward returns the gradients of the pre-activations (x_c, x_g, x_s parts of the
precomputed input), of v, and of the three layer norms' outputs; the caller turns them into
weight gradients with one matrix product each over all steps.
"""

from __future__ import annotations

import math

import numpy as np

from mannlab.ops.numba_cache import njit
from mannlab.ops.numba_math import FAST, argmax, assign, layer_norm, layer_norm_backward, sigmoid, softmax

SOFT, GUMBEL_RELAXED, GUMBEL_ST, ARGMAX = 0, 1, 2, 3


@njit(fastmath=FAST, nogil=True)
def sequence_forward(
    xp,
    noise,
    zone,
    use_zone,
    h0,
    m0,
    steps0,
    wc_hT,
    ws_hT,
    wc_rT,
    wg_hT,
    wg_rT,
    wm_T,
    use_map,
    lnc_w,
    lnc_b,
    lng_w,
    lng_b,
    lnh_w,
    lnh_b,
    eps,
    inv_tau,
    mode,
    keep,
):
    """xp (B, T, P) = [x_c (C) | x_g (G) | x_s (N) | ...], noise (T, B, N) Gumbel draws (modes
    1, 2), zone (T, B, d_h) zoneout keep weights z (read when use_zone), h0 (B, d_h),
    m0 (B, N, d_r), steps0 (B,) steps since the memory was empty; the
    weights transposed (in, out). Returns (o (B, T, C), h_T, M_T) and what the backward reads;
    with ``keep`` False (no backward to come: inference) that is one step's scratch only,
    not (B, T, ...) arrays (the memory per step, (B, T, N, d_r), is most of them)."""
    B, T = xp.shape[0], xp.shape[1]
    H, N, R = h0.shape[1], m0.shape[1], m0.shape[2]
    C, G = H + R, 4 * H + R
    o_g, o_s = C, C + G
    dtype = xp.dtype
    out = np.empty((B, T, C), dtype)
    Ts = T if keep else 1
    hprev = np.empty((B, Ts, H), dtype)
    s_all = np.zeros((B, Ts, N), dtype)
    y_all = np.zeros((B, Ts, N), dtype)
    r_all = np.empty((B, Ts, R), dtype)
    c_all = np.empty((B, Ts, C), dtype)
    hg_all = np.empty((B, Ts, H), dtype)
    rg_all = np.empty((B, Ts, R), dtype)
    xc_all = np.empty((B, Ts, C), dtype)
    xg_all = np.empty((B, Ts, G), dtype)
    xh_all = np.empty((B, Ts, H), dtype)
    rstd = np.empty((B, Ts, 3), dtype)
    act = np.empty((B, Ts, G), dtype)
    th_all = np.empty((B, Ts, C), dtype)
    hs_all = np.empty((B, Ts, H), dtype)  # h_t, the state after zoneout
    v_all = np.empty((B, Ts, R), dtype)
    w_all = np.zeros((B, Ts, N), dtype)
    mem_all = np.empty((B, Ts, N, R), dtype)
    h = h0.copy()
    memory = m0.copy()
    r_t = np.empty((B, R), dtype)
    hg = np.empty((B, H), dtype)
    rg = np.empty((B, R), dtype)
    hn = np.empty((B, H), dtype)
    logits = np.empty(N, dtype)
    pre_c = np.empty(C, dtype)
    y_c = np.empty(C, dtype)
    pre_g = np.empty(G, dtype)
    z = np.empty(G, dtype)
    u = np.empty(H, dtype)
    for t in range(T):
        ts = t if keep else 0
        if keep:
            assign(mem_all[:, ts], memory)
        else:  # scratch rows of the one-hot reads and writes
            s_all[:, 0] = 0.0
            w_all[:, 0] = 0.0
        assign(hprev[:, ts], h)
        hs_c = np.dot(h, wc_hT)  # (B, C)
        hs_s = np.dot(h, ws_hT)  # (B, N)
        for b in range(B):  # eqs. 9-10
            for j in range(N):
                logits[j] = xp[b, t, o_s + j] + hs_s[b, j]
            if mode == ARGMAX:
                s_all[b, ts, argmax(logits)] = 1.0
            elif mode == SOFT:
                softmax(logits, y_all[b, ts])
                assign(s_all[b, ts], y_all[b, ts])
            else:
                for j in range(N):
                    logits[j] = (logits[j] + noise[t, b, j]) * inv_tau
                softmax(logits, y_all[b, ts])
                if mode == GUMBEL_RELAXED:
                    assign(s_all[b, ts], y_all[b, ts])
                else:
                    s_all[b, ts, argmax(y_all[b, ts])] = 1.0
            for k in range(R):
                r_t[b, k] = 0.0
            for j in range(N):
                sj = s_all[b, ts, j]
                if sj != 0.0:
                    for k in range(R):
                        r_t[b, k] += sj * memory[b, j, k]
            assign(r_all[b, ts], r_t[b])
        rc = np.dot(r_t, wc_rT)  # (B, C)
        for b in range(B):  # eqs. 3-5
            for k in range(C):
                pre_c[k] = xp[b, t, k] + hs_c[b, k] + rc[b, k]
            rstd[b, ts, 0] = layer_norm(pre_c, lnc_w, lnc_b, eps, xc_all[b, ts], y_c)
            for k in range(C):
                c_all[b, ts, k] = sigmoid(y_c[k])
            for k in range(H):
                hg[b, k] = c_all[b, ts, k] * h[b, k]
            for k in range(R):
                rg[b, k] = c_all[b, ts, H + k] * r_t[b, k]
            assign(hg_all[b, ts], hg[b])
            assign(rg_all[b, ts], rg[b])
        gates = np.dot(hg, wg_hT) + np.dot(rg, wg_rT)  # (B, G)
        for b in range(B):  # eqs. 6-8
            for k in range(G):
                pre_g[k] = xp[b, t, o_g + k] + gates[b, k]
            rstd[b, ts, 1] = layer_norm(pre_g, lng_w, lng_b, eps, xg_all[b, ts], z)
            for k in range(G):
                if 2 * H <= k < 3 * H:
                    act[b, ts, k] = math.tanh(z[k])
                else:
                    act[b, ts, k] = sigmoid(z[k])
            for k in range(H):
                u[k] = act[b, ts, H + k] * h[b, k] + act[b, ts, k] * act[b, ts, 2 * H + k]
            rstd[b, ts, 2] = layer_norm(u, lnh_w, lnh_b, eps, xh_all[b, ts], hn[b])
            for k in range(H):
                th = math.tanh(hn[b, k])
                th_all[b, ts, k] = th
                out[b, t, k] = act[b, ts, 3 * H + k] * th
            if use_zone:  # zoneout: hn becomes h_t
                for k in range(H):
                    zk = zone[t, b, k]
                    hn[b, k] = zk * h[b, k] + (1.0 - zk) * hn[b, k]
            assign(hs_all[b, ts], hn[b])
            for k in range(R):
                th = math.tanh(r_t[b, k])
                th_all[b, ts, H + k] = th
                out[b, t, H + k] = act[b, ts, 4 * H + k] * th
        value = np.dot(hn, wm_T) if use_map else hn.copy()  # section 3.3
        for b in range(B):  # the write
            assign(v_all[b, ts], value[b])
            step = steps0[b] + t
            if step < N:
                w_all[b, ts, step] = 1.0
            else:
                assign(w_all[b, ts], s_all[b, ts])
            for j in range(N):
                wj = w_all[b, ts, j]
                if wj == 0.0:
                    continue
                for k in range(R):  # torch.lerp's two formulas, for the same rounding
                    if wj < 0.5:
                        memory[b, j, k] = memory[b, j, k] + wj * (value[b, k] - memory[b, j, k])
                    else:
                        memory[b, j, k] = value[b, k] - (value[b, k] - memory[b, j, k]) * (1.0 - wj)
        h = hn.copy()
    saved = (
        hprev,
        s_all,
        y_all,
        r_all,
        c_all,
        hg_all,
        rg_all,
        xc_all,
        xg_all,
        xh_all,
        rstd,
        act,
        hs_all,
        v_all,
        w_all,
        mem_all,
        th_all,
        zone,
    )
    return out, h, memory, saved


@njit(fastmath=FAST, nogil=True)
def sequence_backward(
    saved,
    steps0,
    wc_h,
    wc_r,
    wg_h,
    wg_r,
    wm,
    use_map,
    use_zone,
    lnc_w,
    lng_w,
    lnh_w,
    inv_tau,
    mode,
    d_out,
    d_hT,
    d_mT,
):
    """Backpropagation through time of sequence_forward. Weights as stored (out, in);
    wc_h is the whole control_h weight [W_ig,h; W_s,h] (C + N, d_h). Returns the gradients
    of x_c, x_g, x_s (B, T, .), of the written values v (B, T, d_r), of the layer norms'
    outputs (B, T, C | G | d_h), and of h0 (B, d_h) and M0 (B, N, d_r)."""
    (
        hprev,
        s_all,
        y_all,
        r_all,
        c_all,
        hg_all,
        rg_all,
        xc_all,
        xg_all,
        xh_all,
        rstd,
        act,
        hs_all,
        v_all,
        w_all,
        mem_all,
        th_all,
        zone,
    ) = saved
    B, T, H = hprev.shape
    N, R = mem_all.shape[2], mem_all.shape[3]
    C, G = H + R, 4 * H + R
    dtype = hprev.dtype
    d_xc = np.empty((B, T, C), dtype)
    d_xg = np.empty((B, T, G), dtype)
    d_xs = np.zeros((B, T, N), dtype)
    d_v = np.empty((B, T, R), dtype)
    d_yc = np.empty((B, T, C), dtype)
    d_yg = np.empty((B, T, G), dtype)
    d_yh = np.empty((B, T, H), dtype)
    dh = d_hT.copy()
    dm = d_mT.copy()
    dv = np.empty((B, R), dtype)
    dw = np.zeros((B, N), dtype)
    da_g = np.empty((B, G), dtype)
    dhs = np.zeros((B, C + N), dtype)
    dr = np.empty((B, R), dtype)
    dhp = np.empty((B, H), dtype)
    dhn = np.empty(H, dtype)
    d_kept = np.zeros(H, dtype)  # zoneout: the part of dh_t that goes to h_{t-1}
    du = np.empty(H, dtype)
    dzc = np.empty(C, dtype)
    ds = np.empty(N, dtype)
    for t in range(T - 1, -1, -1):
        for b in range(B):  # the write
            for k in range(R):
                dv[b, k] = 0.0
            for j in range(N):
                wj = w_all[b, t, j]
                acc = 0.0
                for k in range(R):
                    g = dm[b, j, k]
                    acc += g * (v_all[b, t, k] - mem_all[b, t, j, k])
                    dv[b, k] += wj * g
                    dm[b, j, k] = g * (1.0 - wj)
                dw[b, j] = acc
            assign(d_v[b, t], dv[b])
        dhn_v = np.dot(dv, wm) if use_map else dv.copy()
        for b in range(B):  # eqs. 8, 7, 6
            for k in range(H):
                th = th_all[b, t, k]
                oh = act[b, t, 3 * H + k]
                go = d_out[b, t, k]
                d_state = dh[b, k] + dhn_v[b, k]
                if use_zone:
                    zk = zone[t, b, k]
                    d_kept[k] = zk * d_state
                    d_state = (1.0 - zk) * d_state
                dhn[k] = d_state + go * oh * (1.0 - th * th)
                d_yg[b, t, 3 * H + k] = go * th * oh * (1.0 - oh)
            for k in range(R):
                tr = th_all[b, t, H + k]
                orr = act[b, t, 4 * H + k]
                go = d_out[b, t, H + k]
                dr[b, k] = go * orr * (1.0 - tr * tr)
                d_yg[b, t, 4 * H + k] = go * tr * orr * (1.0 - orr)
            assign(d_yh[b, t], dhn)
            layer_norm_backward(dhn, lnh_w, xh_all[b, t], rstd[b, t, 2], du)
            for k in range(H):
                i, f, g = act[b, t, k], act[b, t, H + k], act[b, t, 2 * H + k]
                dhp[b, k] = du[k] * f + d_kept[k]
                d_yg[b, t, k] = du[k] * g * i * (1.0 - i)
                d_yg[b, t, H + k] = du[k] * hprev[b, t, k] * f * (1.0 - f)
                d_yg[b, t, 2 * H + k] = du[k] * i * (1.0 - g * g)
            layer_norm_backward(d_yg[b, t], lng_w, xg_all[b, t], rstd[b, t, 1], da_g[b])
            assign(d_xg[b, t], da_g[b])
        dhg = np.dot(da_g, wg_h)  # (B, H)
        drg = np.dot(da_g, wg_r)  # (B, R)
        for b in range(B):  # eqs. 5, 4, 3
            for k in range(H):
                c = c_all[b, t, k]
                dhp[b, k] += dhg[b, k] * c
                dzc[k] = dhg[b, k] * hprev[b, t, k] * c * (1.0 - c)
            for k in range(R):
                c = c_all[b, t, H + k]
                dr[b, k] += drg[b, k] * c
                dzc[H + k] = drg[b, k] * r_all[b, t, k] * c * (1.0 - c)
            assign(d_yc[b, t], dzc)
            layer_norm_backward(dzc, lnc_w, xc_all[b, t], rstd[b, t, 0], d_xc[b, t])
            for k in range(C):
                dhs[b, k] = d_xc[b, t, k]
        dr += np.dot(d_xc[:, t].copy(), wc_r)  # (B, R)
        for b in range(B):  # eqs. 10, 9
            filling = steps0[b] + t < N
            for j in range(N):
                acc = 0.0 if filling else dw[b, j]
                for k in range(R):
                    acc += dr[b, k] * mem_all[b, t, j, k]
                ds[j] = acc
                sj = s_all[b, t, j]
                if sj != 0.0:
                    for k in range(R):
                        dm[b, j, k] += sj * dr[b, k]
            if mode != ARGMAX:
                p = y_all[b, t]
                scale = 1.0 if mode == SOFT else inv_tau
                mean = 0.0
                for j in range(N):
                    mean += p[j] * ds[j]
                for j in range(N):
                    d_xs[b, t, j] = scale * p[j] * (ds[j] - mean)
            for j in range(N):
                dhs[b, C + j] = d_xs[b, t, j]
        dh = dhp + np.dot(dhs, wc_h)
    return d_xc, d_xg, d_xs, d_v, d_yc, d_yg, d_yh, dh, dm
