"""Triton kernels of TARDIS's whole sequence: ops/tardis/reference.py's loop, forward and
backward, each one kernel launch with the time loop inside (as ops/dntm/triton_kernels.py).

Per step, for a tile of batch rows (the paper's equations; d = d_h, k slots, q = a + c, m the
read MLP's width, G = 4 d + 2):

    u_t = norm(sum_{i<t} w^r_i)                                                    eq. 6
    π_t = a^T tanh(W_x^γ x_t + W_h^γ h_{t-1} + W_u^γ u_t + W_m^γ M_{t-1}) - 100 [read at t-1]
                                                                                   eqs. 4-5
    1/τ_t = softplus(w^τ h_{t-1} + b^τ) + 1 (learned) or the scheduled 1/τ         eq. 18
    w^r_t = one-hot of argmax softmax((π_t + g) / τ_t) (straight-through, eq. 19), of
            argmax (π_t + g) (REINFORCE's sample) or of argmax π_t (evaluation)
    r_t = w^r_t M_{t-1}                                                             eq. 1
    α, β = σ((z + l) / 0.3), l logistic noise in training                          eq. 8
    f, i, o = σ(LN(.)), c̃ = tanh(LN(β W^g_h h + W^g_x x + α W^g_r r))             eqs. 7, 9
    c_t = f c_{t-1} + i (m ∘ c̃) (m the recurrent-dropout mask), h_t = o tanh(LN(c_t))
                                                                                   eqs. 9-10
    C_t: row n <- W_m h_t while n < k (n steps since the memory was empty), else the row
         just read                                                 eq. 2, algorithm 1

They cover every configuration of the op (records.triton_covers: each size at most
records.TRITON_MAX_SIZE). One program per tile of BLOCK_B batch rows; h, c, the read counts
and the memory M = [A; C] of the tile (BLOCK_B, k, q) stay in registers through the time
loop; the memory's product with W_m^γ is one tl.dot over the tile's BLOCK_B k slots. The
forward keeps c_{t-1} and C_{t-1} of every step (``KEEP``); the backward runs the time loop in
reverse, recomputes each step from them (the same @triton.jit code as the forward) and writes
the gradients of the step's pre-activations (the input gates, W_x^γ x_t + b, the read MLP's
W_m^γ M_{t-1}, w^τ h_{t-1} + b^τ) and of the written values; the weight gradients are then one
matrix product each over all B T steps (triton_sequence.py). The sums that need the step's
tanh(.) (the score a) or normalised values (the layer norms' gains and biases) are kept per
program instead.

Sizes that are not powers of two are padded to one, at least 16 (tl.dot's least size on a
GPU), with masks on every load and store. float32 on the GPU (tl.dot in IEEE precision, not
TF32); float64 only in Triton's interpreter, where the tests check gradients.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mannlab.ops.triton_math import DTYPES as DTYPES  # float64 only in the interpreter
from mannlab.ops.triton_math import INTERPRETED
from mannlab.ops.triton_math import dot as _dot
from mannlab.ops.triton_math import row_argmax as _row_argmax
from mannlab.ops.triton_math import row_softmax as _row_softmax
from mannlab.ops.triton_math import sigmoid as _sigmoid
from mannlab.ops.triton_math import softplus as _softplus
from mannlab.ops.triton_math import tanh as _tanh
from mannlab.ops.triton_math import tile_load as _tile_load
from mannlab.ops.triton_math import tile_store as _tile_store

#: Whether these kernels have run on a GPU ("auto" uses only checked kernels). These were
#: tested in Triton's interpreter only: until benchmarks/gpu_check.sh has run them on a GPU,
#: they run only when forced (MANNLAB_KERNELS=triton).
GPU_CHECKED = False

#: batch rows per program: tl.dot needs 16 at least on a GPU; the interpreter takes any size,
#: and runs the programs one after another at a cost per operation, not per row: the tests'
#: batches fit one tile (a test sets 2 to run several programs)
BLOCK_B = 4 if INTERPRETED else 16

# the read modes (records.MODES)
_GUMBEL = tl.constexpr(0)
_REINFORCE = tl.constexpr(1)

#: the blocks of the per-program sums of the layer norms' gains and biases (d each): the gates'
#: gain and bias (3 blocks each), the candidate's and the cell's gain and bias
LN_BLOCKS = 10
_LN_BLOCKS = tl.constexpr(LN_BLOCKS)


# ---------------------------------------------------------------- loads


@triton.jit
def _wt(ptr, out0, ld, ocol, omask, icol, imask):
    """An (in, out) tile of W^T for x @ W^T: [i, o] = W[out0 + o, i] of a row-major W with
    ``ld`` columns."""
    return tl.load(
        ptr + (out0 + ocol[None, :]) * ld + icol[:, None], mask=imask[:, None] & omask[None, :], other=0.0
    )


@triton.jit
def _w(ptr, out0, ld, ocol, omask, icol, imask):
    """An (out, in) tile of W for d @ W: [o, i] = W[out0 + o, i]."""
    return tl.load(
        ptr + (out0 + ocol[:, None]) * ld + icol[None, :], mask=omask[:, None] & imask[None, :], other=0.0
    )


@triton.jit
def _vec(ptr, start, cols, mask):
    return tl.load(ptr + start + cols, mask=mask, other=0.0)


@triton.jit
def _column(ptr, rows, rmask, stride, offset):
    """One value per row: ptr[row * stride + offset] (BLOCK_B,)."""
    return tl.load(ptr + rows * stride + offset, mask=rmask, other=0.0)


@triton.jit
def _content_at(ptr, rows, rmask, stride, kcol, kmask, qcol, cq, C: tl.constexpr, A: tl.constexpr):
    """Offsets and mask of the content part C (k, c) of each row at ptr + row * stride, laid
    out in the memory's columns q = a + c (the address columns masked)."""
    offsets = (
        rows[:, None, None] * stride + kcol[None, :, None] * C + tl.where(cq, qcol - A, 0)[None, None, :]
    )
    mask = rmask[:, None, None] & kmask[None, :, None] & cq[None, None, :]
    return ptr + offsets, mask


@triton.jit
def _first_max(x, cols, mask, NP: tl.constexpr):
    """The column of each row's first maximum over the valid columns (torch.argmax's choice)."""
    return _row_argmax(tl.where(mask[None, :], x, float("-inf")), cols, NP)


# ---------------------------------------------------------------- layer norm


@triton.jit
def _norm(x, dmask, n, eps):
    """(x - mean) / sqrt(var + eps) of each row over its valid columns (x zero elsewhere), and
    1 / sqrt(var + eps)."""
    centred = tl.where(dmask[None, :], x - (tl.sum(x, axis=1) / n)[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / n + eps)
    return centred * rstd[:, None], rstd


@triton.jit
def _norm3(x1, x2, x3, dmask, n, eps):
    """``_norm`` over the three blocks [x1 | x2 | x3] of each row together."""
    mean = ((tl.sum(x1, axis=1) + tl.sum(x2, axis=1) + tl.sum(x3, axis=1)) / n)[:, None]
    c1 = tl.where(dmask[None, :], x1 - mean, 0.0)
    c2 = tl.where(dmask[None, :], x2 - mean, 0.0)
    c3 = tl.where(dmask[None, :], x3 - mean, 0.0)
    var = (tl.sum(c1 * c1, axis=1) + tl.sum(c2 * c2, axis=1) + tl.sum(c3 * c3, axis=1)) / n
    rstd = 1.0 / tl.sqrt(var + eps)
    return c1 * rstd[:, None], c2 * rstd[:, None], c3 * rstd[:, None], rstd


@triton.jit
def _norm_backward(g, xhat, rstd, dmask, n):
    """The gradient of the input of ``_norm`` from g, that of x̂ (the output's times the gain)."""
    m1 = (tl.sum(g, axis=1) / n)[:, None]
    m2 = (tl.sum(g * xhat, axis=1) / n)[:, None]
    return tl.where(dmask[None, :], rstd[:, None] * (g - m1 - xhat * m2), 0.0)


@triton.jit
def _norm3_backward(g1, g2, g3, x1, x2, x3, rstd, dmask, n):
    m1 = ((tl.sum(g1, axis=1) + tl.sum(g2, axis=1) + tl.sum(g3, axis=1)) / n)[:, None]
    m2 = ((tl.sum(g1 * x1, axis=1) + tl.sum(g2 * x2, axis=1) + tl.sum(g3 * x3, axis=1)) / n)[:, None]
    r = rstd[:, None]
    return (
        tl.where(dmask[None, :], r * (g1 - m1 - x1 * m2), 0.0),
        tl.where(dmask[None, :], r * (g2 - m1 - x2 * m2), 0.0),
        tl.where(dmask[None, :], r * (g3 - m1 - x3 * m2), 0.0),
    )


# ---------------------------------------------------------------- one step, forward


@triton.jit
def _read(
    xr,
    gumbel,
    w_qh,
    w_qu,
    w_mem,
    score,
    w_tau,
    b_tau,
    h,
    u,
    last,
    memory,
    rows,
    rmask,
    t,
    T,
    B,
    inv_tau,
    penalty,
    dcol,
    dmask,
    kcol,
    kmask,
    qcol,
    qmask,
    mcol,
    mmask,
    D: tl.constexpr,
    K: tl.constexpr,
    Q: tl.constexpr,
    M: tl.constexpr,
    KP: tl.constexpr,
    QP: tl.constexpr,
    MP: tl.constexpr,
    MODE: tl.constexpr,
    TRAIN: tl.constexpr,
    LEARNED: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """Eqs. 4-5, 18-19 for the tile: the read MLP's tanh(.) (BLOCK_B, k, m), π_t, softmax(π_t),
    the pre-activation of 1/τ_t and 1/τ_t, π_t + g and the relaxed sample y (straight-through
    only; else π_t and softmax(π_t)), and the slot read (BLOCK_B,)."""
    query = _tile_load(xr + t * M, rows, rmask, T * M, 0, mcol, mmask)
    query += _dot(h, _wt(w_qh, 0, D, mcol, mmask, dcol, dmask))
    query += _dot(u, _wt(w_qu, 0, K, mcol, mmask, kcol, kmask))
    flat = tl.reshape(memory, (BLOCK_B * KP, QP))
    projected = tl.reshape(_dot(flat, _wt(w_mem, 0, Q, mcol, mmask, qcol, qmask)), (BLOCK_B, KP, MP))
    mlp = _tanh(query[:, None, :] + projected)
    logits = tl.sum(mlp * _vec(score, 0, mcol, mmask)[None, None, :], axis=2) - penalty * last
    logits = tl.where(kmask[None, :], logits, float("-inf"))
    probs = _row_softmax(logits)
    tau_pre = tl.sum(h * 0.0, axis=1)
    if LEARNED:
        tau_pre += tl.sum(h * _vec(w_tau, 0, dcol, dmask)[None, :], axis=1) + tl.load(b_tau)
        tau = _softplus(tau_pre) + 1.0
    else:
        tau = tau_pre + inv_tau
    noisy = logits
    relaxed = probs
    if TRAIN and MODE <= _REINFORCE:  # the Gumbel noise g (T, B, k)
        noisy = logits + _tile_load(gumbel + t * B * K, rows, rmask, K, 0, kcol, kmask)
    if TRAIN and MODE == _GUMBEL:
        relaxed = _row_softmax(noisy * tau[:, None])
        read = _first_max(relaxed, kcol, kmask, KP)
    else:
        read = _first_max(noisy, kcol, kmask, KP)
    return mlp, logits, probs, tau_pre, tau, noisy, relaxed, read


@triton.jit
def _controller(
    xg,
    logistic,
    dropout,
    w_hg,
    w_rg,
    lng_w,
    lng_b,
    lnc_w,
    lnc_b,
    lnm_w,
    lnm_b,
    h,
    c,
    r,
    rows,
    rmask,
    t,
    T,
    B,
    eps,
    reset_temp,
    dcol,
    dmask,
    qcol,
    qmask,
    D: tl.constexpr,
    Q: tl.constexpr,
    TRAIN: tl.constexpr,
    LN: tl.constexpr,
    USE_MASK: tl.constexpr,
):
    """Eqs. 7-10 for the tile from h_{t-1}, c_{t-1} and r_t: h_t, c_t, and what the backward
    reads (α, β, f, i, o, c̃, the dropout mask, the layer norms' x̂ and 1/σ, tanh(LN(c_t)),
    the c̃ blocks of W_h h and W_r r)."""
    G: tl.constexpr = 4 * D + 2
    x_row = xg + t * G
    # eq. 8: the RESET gates α, β (one value per row each)
    z_a = _column(x_row, rows, rmask, T * G, 4 * D) + tl.sum(
        h * _vec(w_hg, 4 * D * D, dcol, dmask)[None, :], 1
    )
    z_a += tl.sum(r * _vec(w_rg, 4 * D * Q, qcol, qmask)[None, :], 1)
    z_b = _column(x_row, rows, rmask, T * G, 4 * D + 1)
    z_b += tl.sum(h * _vec(w_hg, (4 * D + 1) * D, dcol, dmask)[None, :], 1)
    z_b += tl.sum(r * _vec(w_rg, (4 * D + 1) * Q, qcol, qmask)[None, :], 1)
    if TRAIN:  # logistic noise (T, B, 2)
        z_a += _column(logistic + t * B * 2, rows, rmask, 2, 0)
        z_b += _column(logistic + t * B * 2, rows, rmask, 2, 1)
    alpha = _sigmoid(z_a / reset_temp)
    beta = _sigmoid(z_b / reset_temp)
    # eq. 7 and 9's pre-activations, block by block
    g_f = _tile_load(x_row, rows, rmask, T * G, 0, dcol, dmask)
    g_f += _dot(h, _wt(w_hg, 0, D, dcol, dmask, dcol, dmask)) + _dot(
        r, _wt(w_rg, 0, Q, dcol, dmask, qcol, qmask)
    )
    g_i = _tile_load(x_row, rows, rmask, T * G, D, dcol, dmask)
    g_i += _dot(h, _wt(w_hg, D, D, dcol, dmask, dcol, dmask)) + _dot(
        r, _wt(w_rg, D, Q, dcol, dmask, qcol, qmask)
    )
    g_o = _tile_load(x_row, rows, rmask, T * G, 2 * D, dcol, dmask)
    g_o += _dot(h, _wt(w_hg, 2 * D, D, dcol, dmask, dcol, dmask))
    g_o += _dot(r, _wt(w_rg, 2 * D, Q, dcol, dmask, qcol, qmask))
    hp_c = _dot(h, _wt(w_hg, 3 * D, D, dcol, dmask, dcol, dmask))
    rp_c = _dot(r, _wt(w_rg, 3 * D, Q, dcol, dmask, qcol, qmask))
    cand = (
        beta[:, None] * hp_c
        + _tile_load(x_row, rows, rmask, T * G, 3 * D, dcol, dmask)
        + alpha[:, None] * rp_c
    )
    x_f, x_i, x_o, x_c = g_f, g_i, g_o, cand
    rstd_g = alpha * 0.0
    rstd_c = rstd_g
    if LN:
        x_f, x_i, x_o, rstd_g = _norm3(g_f, g_i, g_o, dmask, 3 * D, eps)
        g_f = x_f * _vec(lng_w, 0, dcol, dmask)[None, :] + _vec(lng_b, 0, dcol, dmask)[None, :]
        g_i = x_i * _vec(lng_w, D, dcol, dmask)[None, :] + _vec(lng_b, D, dcol, dmask)[None, :]
        g_o = x_o * _vec(lng_w, 2 * D, dcol, dmask)[None, :] + _vec(lng_b, 2 * D, dcol, dmask)[None, :]
        x_c, rstd_c = _norm(cand, dmask, D, eps)
        cand = x_c * _vec(lnc_w, 0, dcol, dmask)[None, :] + _vec(lnc_b, 0, dcol, dmask)[None, :]
    f = _sigmoid(g_f)
    i = _sigmoid(g_i)
    o = _sigmoid(g_o)
    cand = _tanh(cand)
    keep = tl.where(dmask[None, :], 1.0, 0.0).to(h.dtype)
    if USE_MASK:  # recurrent dropout (T, B, d)
        keep = _tile_load(dropout + t * B * D, rows, rmask, D, 0, dcol, dmask)
    c_new = f * c + i * (keep * cand)  # eq. 9
    x_m = c_new
    rstd_m = rstd_g
    if LN:
        x_m, rstd_m = _norm(c_new, dmask, D, eps)
        c_out = x_m * _vec(lnm_w, 0, dcol, dmask)[None, :] + _vec(lnm_b, 0, dcol, dmask)[None, :]
    else:
        c_out = c_new
    squashed = _tanh(c_out)
    h_new = tl.where(dmask[None, :], o * squashed, 0.0)  # eq. 10
    return (
        h_new,
        c_new,
        alpha,
        beta,
        f,
        i,
        o,
        cand,
        keep,
        x_f,
        x_i,
        x_o,
        rstd_g,
        x_c,
        rstd_c,
        x_m,
        rstd_m,
        squashed,
        hp_c,
        rp_c,
    )


@triton.jit
def _indices(
    B,
    D: tl.constexpr,
    K: tl.constexpr,
    A: tl.constexpr,
    Q: tl.constexpr,
    M: tl.constexpr,
    DP: tl.constexpr,
    KP: tl.constexpr,
    QP: tl.constexpr,
    MP: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """This program's rows (int64) and the padded columns of h, the slots, the memory (with the
    mask of its content columns) and the read MLP, each with its mask."""
    rows = (tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    dcol = tl.arange(0, DP)
    kcol = tl.arange(0, KP)
    qcol = tl.arange(0, QP)
    mcol = tl.arange(0, MP)
    cq = (qcol >= A) & (qcol < Q)
    return rows, rows < B, dcol, dcol < D, kcol, kcol < K, qcol, qcol < Q, cq, mcol, mcol < M


@triton.jit
def _address_tile(address, kcol, kmask, qcol, A: tl.constexpr):
    """A (k, a) in the memory's columns (k, q), zeros in the content columns."""
    return tl.load(
        address + kcol[:, None] * A + qcol[None, :], mask=kmask[:, None] & (qcol < A)[None, :], other=0.0
    )


# ---------------------------------------------------------------- forward


@triton.jit
def tardis_forward_kernel(
    xg,  # (B, T, G) W x_t + b
    xr,  # (B, T, m) W_x^γ x_t + b^γ
    gumbel,  # (T, B, k) (training in modes gumbel and reinforce; else any pointer)
    logistic,  # (T, B, 2) (training)
    dropout,  # (T, B, d) (USE_MASK)
    h0,  # (B, d)
    c0,  # (B, d)
    content0,  # (B, k, c)
    counts0,  # (B, k)
    last0,  # (B, k)
    steps0,  # (B,) int64
    address,  # (k, a)
    w_hg,  # (G, d)
    w_rg,  # (G, q)
    w_m,  # (c, d)
    w_mem,  # (m, q)
    w_qh,  # (m, d)
    w_qu,  # (m, k)
    score,  # (m,)
    w_tau,  # (d,)
    b_tau,  # (1,)
    lng_w,
    lng_b,
    lnc_w,
    lnc_b,
    lnm_w,
    lnm_b,
    h_all,  # (B, T, d) out
    r_all,  # (B, T, q) out
    probs,  # (B, T, k) out
    readw,  # (B, T, k) out
    writew,  # (B, T, k) out
    resets,  # (B, T, 2) out
    tau_all,  # (B, T) out
    usage,  # (B, T, k) out
    c_out,  # (B, d) out
    content_out,  # (B, k, c) out
    counts_out,  # (B, k) out
    last_out,  # (B, k) out
    cs,  # (B, T, d) out with KEEP: c_{t-1}
    mems,  # (B, T, k, c) out with KEEP: C_{t-1}
    B,
    T,
    inv_tau,
    eps,
    penalty,
    reset_temp,
    usage_eps,
    D: tl.constexpr,
    K: tl.constexpr,
    A: tl.constexpr,
    C: tl.constexpr,
    M: tl.constexpr,
    DP: tl.constexpr,
    KP: tl.constexpr,
    QP: tl.constexpr,
    MP: tl.constexpr,
    MODE: tl.constexpr,
    TRAIN: tl.constexpr,
    LEARNED: tl.constexpr,
    LN: tl.constexpr,
    USE_MASK: tl.constexpr,
    KEEP: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    Q: tl.constexpr = A + C
    rows, rmask, dcol, dmask, kcol, kmask, qcol, qmask, cq, mcol, mmask = _indices(
        B, D, K, A, Q, M, DP, KP, QP, MP, BLOCK_B
    )
    h = _tile_load(h0, rows, rmask, D, 0, dcol, dmask)
    c = _tile_load(c0, rows, rmask, D, 0, dcol, dmask)
    counts = _tile_load(counts0, rows, rmask, K, 0, kcol, kmask)
    last = _tile_load(last0, rows, rmask, K, 0, kcol, kmask)
    steps = tl.load(steps0 + rows, mask=rmask, other=0)
    content_ptrs, content_mask = _content_at(content0, rows, rmask, K * C, kcol, kmask, qcol, cq, C, A)
    memory = _address_tile(address, kcol, kmask, qcol, A)[None, :, :] + tl.load(
        content_ptrs, mask=content_mask, other=0.0
    )
    for t in range(T):
        if KEEP:  # the state the backward recomputes step t from
            _tile_store(cs + t * D, rows, rmask, T * D, 0, dcol, dmask, c)
            kept, kept_mask = _content_at(
                mems + t * K * C, rows, rmask, T * K * C, kcol, kmask, qcol, cq, C, A
            )
            tl.store(kept, memory, mask=kept_mask)
        # eq. 6: the normalised usage
        centred = tl.where(kmask[None, :], counts - (tl.sum(counts, axis=1) / K)[:, None], 0.0)
        u = centred / tl.sqrt(tl.sum(centred * centred, axis=1) / K + usage_eps)[:, None]
        mlp, logits, p, tau_pre, tau, noisy, relaxed, read = _read(
            xr, gumbel, w_qh, w_qu, w_mem, score, w_tau, b_tau, h, u, last, memory, rows, rmask, t, T, B,
            inv_tau, penalty, dcol, dmask, kcol, kmask, qcol, qmask, mcol, mmask,
            D, K, Q, M, KP, QP, MP, MODE, TRAIN, LEARNED, BLOCK_B,
        )  # fmt: skip
        w = tl.where(kcol[None, :] == read[:, None], 1.0, 0.0).to(h.dtype)
        r = tl.sum(w[:, :, None] * memory, axis=1)  # eq. 1
        h, c, alpha, beta, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _ = _controller(
            xg, logistic, dropout, w_hg, w_rg, lng_w, lng_b, lnc_w, lnc_b, lnm_w, lnm_b, h, c, r,
            rows, rmask, t, T, B, eps, reset_temp, dcol, dmask, qcol, qmask, D, Q, TRAIN, LN, USE_MASK,
        )  # fmt: skip
        # eq. 2, algorithm 1: slot n while n < k, then the slot just read
        step = steps + t
        written = tl.where(step < K, step, read.to(tl.int64))
        ww = tl.where(kcol[None, :] == written[:, None], 1.0, 0.0).to(h.dtype)
        value = _dot(
            h, _wt(w_m, 0, D, tl.where(cq, qcol - A, 0), cq, dcol, dmask)
        )  # W_m h_t, content columns
        memory = tl.where((ww[:, :, None] > 0.0) & cq[None, None, :], value[:, None, :], memory)
        _tile_store(h_all + t * D, rows, rmask, T * D, 0, dcol, dmask, h)
        _tile_store(r_all + t * Q, rows, rmask, T * Q, 0, qcol, qmask, r)
        _tile_store(probs + t * K, rows, rmask, T * K, 0, kcol, kmask, p)
        _tile_store(readw + t * K, rows, rmask, T * K, 0, kcol, kmask, w)
        _tile_store(writew + t * K, rows, rmask, T * K, 0, kcol, kmask, ww)
        _tile_store(usage + t * K, rows, rmask, T * K, 0, kcol, kmask, u)
        tl.store(resets + rows * T * 2 + t * 2, alpha, mask=rmask)
        tl.store(resets + rows * T * 2 + t * 2 + 1, beta, mask=rmask)
        tl.store(tau_all + rows * T + t, tau, mask=rmask)
        counts += w
        last = w
    _tile_store(c_out, rows, rmask, D, 0, dcol, dmask, c)
    _tile_store(counts_out, rows, rmask, K, 0, kcol, kmask, counts)
    _tile_store(last_out, rows, rmask, K, 0, kcol, kmask, last)
    final, final_mask = _content_at(content_out, rows, rmask, K * C, kcol, kmask, qcol, cq, C, A)
    tl.store(final, memory, mask=final_mask)


# ---------------------------------------------------------------- backward


@triton.jit
def tardis_backward_kernel(
    xg,
    xr,
    gumbel,
    logistic,
    dropout,
    hprev,  # (B, T, d) h_{t-1}
    cs,  # (B, T, d) c_{t-1}
    mems,  # (B, T, k, c) C_{t-1}
    lasts,  # (B, T, k) the read one-hot of step t - 1
    usage,  # (B, T, k) u_t
    probs,  # (B, T, k)
    readw,  # (B, T, k)
    writew,  # (B, T, k)
    steps0,
    address,
    w_hg,
    w_rg,
    w_m,
    w_mem,
    w_qh,
    w_qu,
    score,
    w_tau,
    b_tau,
    lng_w,
    lng_b,
    lnc_w,
    lnc_b,
    lnm_w,
    lnm_b,
    d_h_all,  # (B, T, d) the gradients of the outputs (zeros where none came)
    d_r_all,  # (B, T, q)
    d_probs,  # (B, T, k) (USE_DPROBS)
    d_readw,  # (B, T, k)
    d_writew,  # (B, T, k)
    d_resets,  # (B, T, 2)
    d_tau,  # (B, T)
    d_c,  # (B, d) in: of the final c; out: of c_0
    d_content,  # (B, k, c) in: of the final C; out: of C_0
    d_h0,  # (B, d) out
    d_xg,  # (B, T, G) out: of the gates' pre-activations
    d_xr,  # (B, T, m) out: of the read MLP's query (READ_GRAD)
    d_value,  # (B, T, c) out: of W_m h_t
    d_projected,  # (B, T, k, m) out: of W_m^γ M_{t-1} (READ_GRAD)
    d_tau_pre,  # (B, T) out: of w^τ h_{t-1} + b^τ (LEARNED)
    d_score,  # (programs, m) out: per-program sums for a
    d_ln,  # (programs, LN_BLOCKS, d) out: per-program sums for the gains and biases (LN)
    B,
    T,
    inv_tau,
    eps,
    penalty,
    reset_temp,
    D: tl.constexpr,
    K: tl.constexpr,
    A: tl.constexpr,
    C: tl.constexpr,
    M: tl.constexpr,
    DP: tl.constexpr,
    KP: tl.constexpr,
    QP: tl.constexpr,
    MP: tl.constexpr,
    MODE: tl.constexpr,
    TRAIN: tl.constexpr,
    LEARNED: tl.constexpr,
    LN: tl.constexpr,
    USE_MASK: tl.constexpr,
    READ_GRAD: tl.constexpr,
    USE_DPROBS: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    Q: tl.constexpr = A + C
    G: tl.constexpr = 4 * D + 2
    rows, rmask, dcol, dmask, kcol, kmask, qcol, qmask, cq, mcol, mmask = _indices(
        B, D, K, A, Q, M, DP, KP, QP, MP, BLOCK_B
    )
    qc = tl.where(cq, qcol - A, 0)
    steps = tl.load(steps0 + rows, mask=rmask, other=0)
    a_tile = _address_tile(address, kcol, kmask, qcol, A)[None, :, :]
    score_v = _vec(score, 0, mcol, mmask)
    dc = _tile_load(d_c, rows, rmask, D, 0, dcol, dmask)
    grad_ptrs, grad_mask = _content_at(d_content, rows, rmask, K * C, kcol, kmask, qcol, cq, C, A)
    dmem = tl.load(grad_ptrs, mask=grad_mask, other=0.0)  # of M_t, content columns only
    dh = dc * 0.0  # of h_t from the steps after t
    acc_score = score_v * 0.0
    zero_d = tl.sum(dc, axis=0) * 0.0
    acc_gw_f, acc_gw_i, acc_gw_o, acc_gb_f, acc_gb_i = zero_d, zero_d, zero_d, zero_d, zero_d
    acc_gb_o, acc_cw, acc_cb, acc_mw, acc_mb = zero_d, zero_d, zero_d, zero_d, zero_d
    for back in range(T):
        t = T - 1 - back
        # ---- step t again, from the state before it
        h = _tile_load(hprev + t * D, rows, rmask, T * D, 0, dcol, dmask)
        c = _tile_load(cs + t * D, rows, rmask, T * D, 0, dcol, dmask)
        kept, kept_mask = _content_at(mems + t * K * C, rows, rmask, T * K * C, kcol, kmask, qcol, cq, C, A)
        memory = a_tile + tl.load(kept, mask=kept_mask, other=0.0)
        u = _tile_load(usage + t * K, rows, rmask, T * K, 0, kcol, kmask)
        last = _tile_load(lasts + t * K, rows, rmask, T * K, 0, kcol, kmask)
        w = _tile_load(readw + t * K, rows, rmask, T * K, 0, kcol, kmask)
        ww = _tile_load(writew + t * K, rows, rmask, T * K, 0, kcol, kmask)
        mlp, logits, p, tau_pre, tau, noisy, relaxed, _ = _read(
            xr, gumbel, w_qh, w_qu, w_mem, score, w_tau, b_tau, h, u, last, memory, rows, rmask, t, T, B,
            inv_tau, penalty, dcol, dmask, kcol, kmask, qcol, qmask, mcol, mmask,
            D, K, Q, M, KP, QP, MP, MODE, TRAIN, LEARNED, BLOCK_B,
        )  # fmt: skip
        r = tl.sum(w[:, :, None] * memory, axis=1)
        (h_new, _, alpha, beta, f, i, o, cand, keep, x_f, x_i, x_o, rstd_g, x_c, rstd_c, x_m, rstd_m,
         squashed, hp_c, rp_c) = _controller(
            xg, logistic, dropout, w_hg, w_rg, lng_w, lng_b, lnc_w, lnc_b, lnm_w, lnm_b, h, c, r,
            rows, rmask, t, T, B, eps, reset_temp, dcol, dmask, qcol, qmask, D, Q, TRAIN, LN, USE_MASK,
        )  # fmt: skip
        value = _dot(h_new, _wt(w_m, 0, D, qc, cq, dcol, dmask))
        # ---- the write (eq. 2): M_t = M_{t-1} + w^w (v - M_{t-1}) on the content columns
        d_v = tl.sum(ww[:, :, None] * dmem, axis=1)
        d_ww = tl.sum(dmem * (value[:, None, :] - memory), axis=2)
        d_ww += _tile_load(d_writew + t * K, rows, rmask, T * K, 0, kcol, kmask)
        dmem = dmem * (1.0 - ww[:, :, None])
        tl.store(d_value + (rows[:, None] * T + t) * C + qc[None, :], d_v, mask=rmask[:, None] & cq[None, :])
        dh += _tile_load(d_h_all + t * D, rows, rmask, T * D, 0, dcol, dmask)
        dh += _dot(d_v, _w(w_m, 0, D, qc, cq, dcol, dmask))  # of h_t, whole
        # ---- eq. 10, 9, 7
        d_o = dh * squashed
        d_cn = dh * o * (1.0 - squashed * squashed)
        if LN:
            acc_mw += tl.sum(d_cn * x_m, axis=0)
            acc_mb += tl.sum(d_cn, axis=0)
            d_cn = _norm_backward(d_cn * _vec(lnm_w, 0, dcol, dmask)[None, :], x_m, rstd_m, dmask, D)
        d_ct = dc + d_cn
        dc = d_ct * f  # of c_{t-1}
        dy_f = d_ct * c * f * (1.0 - f)
        dy_i = d_ct * keep * cand * i * (1.0 - i)
        dy_o = d_o * o * (1.0 - o)
        dy_c = d_ct * i * keep * (1.0 - cand * cand)
        if LN:
            acc_gw_f += tl.sum(dy_f * x_f, axis=0)
            acc_gw_i += tl.sum(dy_i * x_i, axis=0)
            acc_gw_o += tl.sum(dy_o * x_o, axis=0)
            acc_gb_f += tl.sum(dy_f, axis=0)
            acc_gb_i += tl.sum(dy_i, axis=0)
            acc_gb_o += tl.sum(dy_o, axis=0)
            acc_cw += tl.sum(dy_c * x_c, axis=0)
            acc_cb += tl.sum(dy_c, axis=0)
            dy_f, dy_i, dy_o = _norm3_backward(
                dy_f * _vec(lng_w, 0, dcol, dmask)[None, :],
                dy_i * _vec(lng_w, D, dcol, dmask)[None, :],
                dy_o * _vec(lng_w, 2 * D, dcol, dmask)[None, :],
                x_f,
                x_i,
                x_o,
                rstd_g,
                dmask,
                3 * D,
            )
            dy_c = _norm_backward(dy_c * _vec(lnc_w, 0, dcol, dmask)[None, :], x_c, rstd_c, dmask, D)
        # ---- eq. 8: α, β
        d_alpha = tl.sum(dy_c * rp_c, axis=1) + _column(d_resets + t * 2, rows, rmask, T * 2, 0)
        d_beta = tl.sum(dy_c * hp_c, axis=1) + _column(d_resets + t * 2, rows, rmask, T * 2, 1)
        dz_a = d_alpha * alpha * (1.0 - alpha) / reset_temp
        dz_b = d_beta * beta * (1.0 - beta) / reset_temp
        x_row = d_xg + t * G
        _tile_store(x_row, rows, rmask, T * G, 0, dcol, dmask, dy_f)
        _tile_store(x_row, rows, rmask, T * G, D, dcol, dmask, dy_i)
        _tile_store(x_row, rows, rmask, T * G, 2 * D, dcol, dmask, dy_o)
        _tile_store(x_row, rows, rmask, T * G, 3 * D, dcol, dmask, dy_c)
        tl.store(x_row + rows * T * G + 4 * D, dz_a, mask=rmask)
        tl.store(x_row + rows * T * G + 4 * D + 1, dz_b, mask=rmask)
        # of h_{t-1} and r_t: (d W_h h) W_h and (d W_r r) W_r (β, α scale the c̃ block)
        dh = _dot(dy_f, _w(w_hg, 0, D, dcol, dmask, dcol, dmask))
        dh += _dot(dy_i, _w(w_hg, D, D, dcol, dmask, dcol, dmask))
        dh += _dot(dy_o, _w(w_hg, 2 * D, D, dcol, dmask, dcol, dmask))
        dh += _dot(beta[:, None] * dy_c, _w(w_hg, 3 * D, D, dcol, dmask, dcol, dmask))
        dh += dz_a[:, None] * _vec(w_hg, 4 * D * D, dcol, dmask)[None, :]
        dh += dz_b[:, None] * _vec(w_hg, (4 * D + 1) * D, dcol, dmask)[None, :]
        dr = _tile_load(d_r_all + t * Q, rows, rmask, T * Q, 0, qcol, qmask)
        dr += _dot(dy_f, _w(w_rg, 0, Q, dcol, dmask, qcol, qmask))
        dr += _dot(dy_i, _w(w_rg, D, Q, dcol, dmask, qcol, qmask))
        dr += _dot(dy_o, _w(w_rg, 2 * D, Q, dcol, dmask, qcol, qmask))
        dr += _dot(alpha[:, None] * dy_c, _w(w_rg, 3 * D, Q, dcol, dmask, qcol, qmask))
        dr += dz_a[:, None] * _vec(w_rg, 4 * D * Q, qcol, qmask)[None, :]
        dr += dz_b[:, None] * _vec(w_rg, (4 * D + 1) * Q, qcol, qmask)[None, :]
        # ---- eq. 1: r_t = w^r M_{t-1}
        dmem += w[:, :, None] * dr[:, None, :]
        d_tau_v = tl.sum(dh * 0.0, axis=1)
        if READ_GRAD:  # eqs. 19, 5, 4
            d_logits = p * 0.0
            if TRAIN and MODE == _GUMBEL:  # straight-through: the gradient of y
                d_y = _tile_load(d_readw + t * K, rows, rmask, T * K, 0, kcol, kmask)
                d_y += tl.sum(dr[:, None, :] * memory, axis=2)
                d_y += tl.where((steps + t < K)[:, None], 0.0, d_ww)  # the written slot is the read one
                d_z = relaxed * (d_y - tl.sum(relaxed * d_y, axis=1)[:, None])
                d_logits += tau[:, None] * d_z
                d_tau_v += tl.sum(d_z * tl.where(kmask[None, :], noisy, 0.0), axis=1)
            if USE_DPROBS:
                d_p = _tile_load(d_probs + t * K, rows, rmask, T * K, 0, kcol, kmask)
                d_logits += p * (d_p - tl.sum(p * d_p, axis=1)[:, None])
            d_logits = tl.where(rmask[:, None] & kmask[None, :], d_logits, 0.0)
            acc_score += tl.sum(tl.sum(d_logits[:, :, None] * mlp, axis=1), axis=0)
            d_proj = d_logits[:, :, None] * score_v[None, None, :] * (1.0 - mlp * mlp)
            proj_at = (((rows[:, None, None] * T + t) * K + kcol[None, :, None]) * M) + mcol[None, None, :]
            proj_mask = rmask[:, None, None] & kmask[None, :, None] & mmask[None, None, :]
            tl.store(d_projected + proj_at, d_proj, mask=proj_mask)
            d_query = tl.sum(d_proj, axis=1)
            _tile_store(d_xr + t * M, rows, rmask, T * M, 0, mcol, mmask, d_query)
            dh += _dot(d_query, _w(w_qh, 0, D, mcol, mmask, dcol, dmask))
            flat = tl.reshape(d_proj, (BLOCK_B * KP, MP))
            dmem += tl.reshape(_dot(flat, _w(w_mem, 0, Q, mcol, mmask, qcol, qmask)), (BLOCK_B, KP, QP))
        if LEARNED:  # eq. 18
            d_tau_v += tl.load(d_tau + rows * T + t, mask=rmask, other=0.0)
            d_s = d_tau_v * _sigmoid(tau_pre)
            tl.store(d_tau_pre + rows * T + t, d_s, mask=rmask)
            dh += d_s[:, None] * _vec(w_tau, 0, dcol, dmask)[None, :]
        dmem = tl.where(cq[None, None, :], dmem, 0.0)
    _tile_store(d_h0, rows, rmask, D, 0, dcol, dmask, dh)
    _tile_store(d_c, rows, rmask, D, 0, dcol, dmask, dc)
    tl.store(grad_ptrs, dmem, mask=grad_mask)
    pid = tl.program_id(0)
    tl.store(d_score + pid * M + mcol, acc_score, mask=mmask)
    if LN:
        base = d_ln + pid * _LN_BLOCKS * D
        tl.store(base + dcol, acc_gw_f, mask=dmask)
        tl.store(base + D + dcol, acc_gw_i, mask=dmask)
        tl.store(base + 2 * D + dcol, acc_gw_o, mask=dmask)
        tl.store(base + 3 * D + dcol, acc_gb_f, mask=dmask)
        tl.store(base + 4 * D + dcol, acc_gb_i, mask=dmask)
        tl.store(base + 5 * D + dcol, acc_gb_o, mask=dmask)
        tl.store(base + 6 * D + dcol, acc_cw, mask=dmask)
        tl.store(base + 7 * D + dcol, acc_cb, mask=dmask)
        tl.store(base + 8 * D + dcol, acc_mw, mask=dmask)
        tl.store(base + 9 * D + dcol, acc_mb, mask=dmask)
