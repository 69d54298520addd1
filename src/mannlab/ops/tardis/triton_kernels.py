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

They cover every configuration of the op (records.covers: each size at most
records.TRITON_MAX_SIZE). One program per tile of BLOCK_B batch rows (1 to 16, chosen at launch
from the batch and the GPU's SMs: triton_math.rows_per_program; offsets that multiply time,
batch and width are int64, ``B`` widened first: triton_math.wide); each step has a tile
phase (the usage, 1/τ, the read MLP's query, the controller, the written value W_m h_t: the
tile's rows at once, h and c in registers) and a rows' phase (each row's read on its memory in
turn). The memory lives in global memory, in the final memory's buffer, which starts as C_0
(whole-tile products on a (BLOCK_B, k, q) tile in registers asked for about 1 MB of shared
memory, benchmarks/README.md): the rows' phase reads a row's memory (k, q) back BLOCK_K
columns at a time, and the read MLP runs BLOCK_K of its columns at a time, so no (k, m) tile
is held either. Every product reads its
input back from memory behind a barrier (triton_math.chunked_dot, as the NTM's kernels): h_{t-1}
and the query through a per-row scratch, u_t and r_t from the records the kernel writes. The
forward keeps c_{t-1} and C_{t-1} of every step (``KEEP``); the backward runs the time loop in
reverse, recomputes each step from them and from the reads r_t (the same @triton.jit code as the
forward), with the memory's gradient in d C_0's buffer, and writes the gradients of the step's
pre-activations (the input gates, W_x^γ x_t + b, the read MLP's W_m^γ M_{t-1}, w^τ h_{t-1} +
b^τ) and of the written values; the weight gradients are then one matrix product each over all
B T steps (triton_sequence.py). The score a's gradient is written per step and row (its terms
need the step's tanh(.)), the layer norms' gains' and biases' summed per program.

Sizes that are not powers of two are padded to one, at least 16 (tl.dot's least size on a
GPU), with masks on every load and store. float32 on the GPU (tl.dot in IEEE precision, not
TF32); float64 only in Triton's interpreter, where the tests check gradients.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mannlab.ops.triton_math import BLOCK_K
from mannlab.ops.triton_math import DTYPES as DTYPES  # float64 only in the interpreter
from mannlab.ops.triton_math import chunked_dot as _chunked_dot
from mannlab.ops.triton_math import sigmoid as _sigmoid
from mannlab.ops.triton_math import softmax as _softmax
from mannlab.ops.triton_math import softplus as _softplus
from mannlab.ops.triton_math import tanh as _tanh
from mannlab.ops.triton_math import tile_load as _tile_load
from mannlab.ops.triton_math import tile_store as _tile_store
from mannlab.ops.triton_math import wide as _wide

#: Whether these kernels have run on a GPU ("auto" uses only checked kernels). These were
#: tested in Triton's interpreter only: until benchmarks/gpu_check.sh has run them on a GPU,
#: they run only when forced (MANNLAB_KERNELS=triton).
GPU_CHECKED = False

# the read modes (records.MODES)
_GUMBEL = tl.constexpr(0)
_REINFORCE = tl.constexpr(1)

#: the blocks of the per-program sums of the layer norms' gains and biases (d each): the gates'
#: gain and bias (3 blocks each), the candidate's and the cell's gain and bias
LN_BLOCKS = 10
_LN_BLOCKS = tl.constexpr(LN_BLOCKS)
#: the columns of each product's input per tl.dot (triton_math.chunked_dot)
_KC = tl.constexpr(BLOCK_K)


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


# ---------------------------------------------------------------- products


@triton.jit
def _xwt(x_rows, rmask, n_in, w, out0, ld, n_out, BO: tl.constexpr, BI: tl.constexpr):
    """x @ W[out0 : out0 + n_out, :n_in]^T of a row-major W with ``ld`` columns, x's row m at
    x_rows[m] in memory (behind a barrier), BLOCK_K columns at a time."""
    return _chunked_dot(x_rows, rmask, n_in, w + out0 * ld, 1, ld, n_out, BO, BI, _KC)


@triton.jit
def _xw(x_rows, rmask, n_in, w, in0, ld, n_out, BO: tl.constexpr, BI: tl.constexpr):
    """x @ W[in0 : in0 + n_in, :n_out] of a row-major W with ``ld`` columns (as ``_xwt``)."""
    return _chunked_dot(x_rows, rmask, n_in, w + in0 * ld, ld, 1, n_out, BO, BI, _KC)


@triton.jit
def _row_of(tile, rows_in_tile, bi):
    """Row ``bi`` of a register tile (BLOCK_B, n) as a vector (n,)."""
    return tl.sum(tl.where((rows_in_tile == bi)[:, None], tile, 0.0), axis=0)


@triton.jit
def _value_of(column, rows_in_tile, bi):
    """Entry ``bi`` of a per-row vector (BLOCK_B,)."""
    return tl.sum(tl.where(rows_in_tile == bi, column, 0.0), axis=0)


# ---------------------------------------------------------------- one step, forward


@triton.jit
def _tau(h, w_tau, b_tau, inv_tau, dcol, dmask, LEARNED: tl.constexpr):
    """Eq. 18 for the tile: the pre-activation of 1/τ_t and 1/τ_t (BLOCK_B,)."""
    tau_pre = tl.sum(h * 0.0, axis=1)
    if LEARNED:
        tau_pre += tl.sum(h * _vec(w_tau, 0, dcol, dmask)[None, :], axis=1) + tl.load(b_tau)
        tau = _softplus(tau_pre) + 1.0
    else:
        tau = tau_pre + inv_tau
    return tau_pre, tau


@triton.jit
def _query(xr, w_qh, w_qu, h_rows, u_rows, rows, rmask, t, T, mcol, mmask,
           D: tl.constexpr, K: tl.constexpr, M: tl.constexpr, DP: tl.constexpr, KP: tl.constexpr,
           MP: tl.constexpr):  # fmt: skip
    """The read MLP's query W_x^γ x_t + W_h^γ h_{t-1} + W_u^γ u_t for the tile (eq. 4), h_{t-1}
    and u_t read back from memory."""
    query = _tile_load(xr + t * M, rows, rmask, T * M, 0, mcol, mmask)
    query += _xwt(h_rows, rmask, D, w_qh, 0, D, M, MP, DP)
    query += _xwt(u_rows, rmask, K, w_qu, 0, K, M, MP, KP)
    return query


@triton.jit
def _projected(
    mem, kv, address, w_mem, m0, kcol, kmask, A: tl.constexpr, C: tl.constexpr, M: tl.constexpr,
    AP: tl.constexpr, CP: tl.constexpr,
):  # fmt: skip
    """Columns m0 .. m0 + BLOCK_K of one row's W_m^γ M_{t-1} (k, BLOCK_K): the address part and
    the content part (row-major (k, c) at ``mem``) over their own columns."""
    Q: tl.constexpr = A + C
    out = _chunked_dot(address + kcol * A, kmask, A, w_mem + m0 * Q, 1, Q, M - m0, _KC, AP, _KC)
    out += _chunked_dot(mem + kcol * C, kv, C, w_mem + m0 * Q + A, 1, Q, M - m0, _KC, CP, _KC)
    return out


@triton.jit
def _row_read(
    q_row, mem, kv, valid, address, w_mem, score, gumbel, last, tau, row, t, B, penalty, kcol, kmask,
    K: tl.constexpr, A: tl.constexpr, C: tl.constexpr, M: tl.constexpr, KP: tl.constexpr,
    AP: tl.constexpr, CP: tl.constexpr, MP: tl.constexpr, MODE: tl.constexpr, TRAIN: tl.constexpr,
):  # fmt: skip
    """Eqs. 4-5, 19 for one row: π_t, softmax(π_t), π_t + g and the relaxed sample y
    (straight-through only; else π_t and softmax(π_t)), and the slot read. The read MLP runs
    BLOCK_K of its columns at a time: its (k, m) tile would not fit."""
    kc = tl.arange(0, _KC)
    logits = tl.zeros([KP], dtype=w_mem.dtype.element_ty)
    for m0 in range(0, MP, _KC):
        mm = (m0 + kc) < M
        query = tl.load(q_row + m0 + kc, mask=mm & ((kc * 0 + row) < B), other=0.0)
        mlp = _tanh(query[None, :] + _projected(mem, kv, address, w_mem, m0, kcol, kmask, A, C, M, AP, CP))
        logits += tl.sum(mlp * tl.load(score + m0 + kc, mask=mm, other=0.0)[None, :], axis=1)
    logits = tl.where(kmask, logits - penalty * last, float("-inf"))
    probs = _softmax(logits, kmask)
    noisy = logits
    relaxed = probs
    if TRAIN and MODE <= _REINFORCE:  # the Gumbel noise g (T, B, k)
        noisy = logits + tl.load(gumbel + (t * B + row) * K + kcol, mask=kv, other=0.0)
    if TRAIN and MODE == _GUMBEL:
        relaxed = _softmax(noisy * tau, kmask)
        pick = tl.where(kmask, relaxed, float("-inf"))
    else:
        pick = tl.where(kmask, noisy, float("-inf"))
    read = tl.min(tl.where(pick == tl.max(pick, axis=0), kcol, KP), axis=0)  # the first maximum
    return logits, probs, noisy, relaxed, read


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
    h_rows,
    r_rows,
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
    DP: tl.constexpr,
    QP: tl.constexpr,
    TRAIN: tl.constexpr,
    LN: tl.constexpr,
    USE_MASK: tl.constexpr,
):
    """Eqs. 7-10 for the tile from h_{t-1}, c_{t-1} and r_t: h_t, c_t, and what the backward
    reads (α, β, f, i, o, c̃, the dropout mask, the layer norms' x̂ and 1/σ, tanh(LN(c_t)),
    the c̃ blocks of W_h h and W_r r). The products read h_{t-1} and r_t back from memory
    (rows at h_rows, r_rows, behind a barrier)."""
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
    g_f += _xwt(h_rows, rmask, D, w_hg, 0, D, D, DP, DP) + _xwt(r_rows, rmask, Q, w_rg, 0, Q, D, DP, QP)
    g_i = _tile_load(x_row, rows, rmask, T * G, D, dcol, dmask)
    g_i += _xwt(h_rows, rmask, D, w_hg, D, D, D, DP, DP) + _xwt(r_rows, rmask, Q, w_rg, D, Q, D, DP, QP)
    g_o = _tile_load(x_row, rows, rmask, T * G, 2 * D, dcol, dmask)
    g_o += _xwt(h_rows, rmask, D, w_hg, 2 * D, D, D, DP, DP)
    g_o += _xwt(r_rows, rmask, Q, w_rg, 2 * D, Q, D, DP, QP)
    hp_c = _xwt(h_rows, rmask, D, w_hg, 3 * D, D, D, DP, DP)
    rp_c = _xwt(r_rows, rmask, Q, w_rg, 3 * D, Q, D, DP, QP)
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
    content,  # (B, k, c) in: C_0; out: the final C (the memory the steps work on)
    counts_out,  # (B, k) out
    last_out,  # (B, k) out
    cs,  # (B, T, d) out with KEEP: c_{t-1}
    mems,  # (B, T, k, c) out with KEEP: C_{t-1}
    scratch,  # (B, S) the tile's h_{t-1} and query, read back by the products
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
    AP: tl.constexpr,
    CP: tl.constexpr,
    QP: tl.constexpr,
    MP: tl.constexpr,
    S: tl.constexpr,
    MODE: tl.constexpr,
    TRAIN: tl.constexpr,
    LEARNED: tl.constexpr,
    LN: tl.constexpr,
    USE_MASK: tl.constexpr,
    KEEP: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    B = _wide(B)  # every offset made with it is int64
    Q: tl.constexpr = A + C
    rows, rmask, dcol, dmask, kcol, kmask, qcol, qmask, cq, mcol, mmask = _indices(
        B, D, K, A, Q, M, DP, KP, QP, MP, BLOCK_B
    )
    in_tile = tl.arange(0, BLOCK_B)
    ccol = tl.arange(0, CP)
    cmask = ccol < C
    kc = tl.arange(0, _KC)
    h = _tile_load(h0, rows, rmask, D, 0, dcol, dmask)
    c = _tile_load(c0, rows, rmask, D, 0, dcol, dmask)
    counts = _tile_load(counts0, rows, rmask, K, 0, kcol, kmask)
    last = _tile_load(last0, rows, rmask, K, 0, kcol, kmask)
    steps = tl.load(steps0 + rows, mask=rmask, other=0)
    h_rows = scratch + rows * S  # h_{t-1}
    _tile_store(scratch, rows, rmask, S, 0, dcol, dmask, h)
    for t in range(T):
        if KEEP:  # the state the backward recomputes step t from (the memory below, row by row)
            _tile_store(cs + t * D, rows, rmask, T * D, 0, dcol, dmask, c)
        # eq. 6: the normalised usage
        centred = tl.where(kmask[None, :], counts - (tl.sum(counts, axis=1) / K)[:, None], 0.0)
        u = centred / tl.sqrt(tl.sum(centred * centred, axis=1) / K + usage_eps)[:, None]
        _tile_store(usage + t * K, rows, rmask, T * K, 0, kcol, kmask, u)
        _tau_pre, tau = _tau(h, w_tau, b_tau, inv_tau, dcol, dmask, LEARNED)
        tl.store(tau_all + rows * T + t, tau, mask=rmask)
        tl.debug_barrier()  # the query's products read h_{t-1} and u_t back
        query = _query(xr, w_qh, w_qu, h_rows, usage + rows * T * K + t * K, rows, rmask, t, T, mcol, mmask,
                       D, K, M, DP, KP, MP)  # fmt: skip
        _tile_store(scratch, rows, rmask, S, DP, mcol, mmask, query)
        tl.debug_barrier()  # the rows' phase reads the query
        # ---- the rows' phase: each row's read on its memory (k, q), in global memory
        for bi in range(BLOCK_B):
            row = (tl.program_id(0) * BLOCK_B + bi).to(tl.int64)
            valid = row < B
            kv = kmask & ((kcol * 0 + row) < B)
            mem = content + row * K * C
            if KEEP:
                kept = mems + (row * T + t) * K * C
                for k0 in range(0, KP, _KC):
                    at = (k0 + kc)[:, None] * C + ccol[None, :]
                    ok = ((k0 + kc) < K)[:, None] & cmask[None, :] & ((kc * 0 + row) < B)[:, None]
                    tl.store(kept + at, tl.load(mem + at, mask=ok, other=0.0), mask=ok)
            _logits, p, _noisy, _relaxed, read = _row_read(
                scratch + row * S + DP, mem, kv, valid, address, w_mem, score, gumbel,
                _row_of(last, in_tile, bi), _value_of(tau, in_tile, bi), row, t, B, penalty, kcol, kmask,
                K, A, C, M, KP, AP, CP, MP, MODE, TRAIN,
            )  # fmt: skip
            tl.store(probs + (row * T + t) * K + kcol, p, mask=kv)
            tl.store(readw + (row * T + t) * K + kcol, tl.where(kcol == read, 1.0, 0.0).to(p.dtype), mask=kv)
            qv = qmask & ((qcol * 0 + row) < B)
            r = tl.load(address + read * A + qcol, mask=qv & (qcol < A), other=0.0)  # eq. 1
            r += tl.load(mem + read * C + tl.where(cq, qcol - A, 0), mask=qv & cq, other=0.0)
            tl.store(r_all + (row * T + t) * Q + qcol, r, mask=qv)
        tl.debug_barrier()  # the tile reads the rows' reads
        w = _tile_load(readw + t * K, rows, rmask, T * K, 0, kcol, kmask)
        r = _tile_load(r_all + t * Q, rows, rmask, T * Q, 0, qcol, qmask)
        read = tl.min(tl.where(w > 0.0, kcol[None, :], KP), axis=1)
        h, c, alpha, beta, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _ = _controller(
            xg, logistic, dropout, w_hg, w_rg, lng_w, lng_b, lnc_w, lnc_b, lnm_w, lnm_b, h, c, r,
            h_rows, r_all + rows * T * Q + t * Q, rows, rmask, t, T, B, eps, reset_temp, dcol, dmask,
            qcol, qmask, D, Q, DP, QP, TRAIN, LN, USE_MASK,
        )  # fmt: skip
        tl.debug_barrier()  # h_{t-1} was read: h_t replaces it
        _tile_store(scratch, rows, rmask, S, 0, dcol, dmask, h)
        _tile_store(h_all + t * D, rows, rmask, T * D, 0, dcol, dmask, h)
        tl.debug_barrier()  # W_m h_t reads h_t back
        value = _xwt(h_rows, rmask, D, w_m, 0, D, C, CP, DP)
        # eq. 2, algorithm 1: slot n while n < k, then the slot just read
        step = steps + t
        written = tl.where(step < K, step, read.to(tl.int64))
        ww = tl.where(kcol[None, :] == written[:, None], 1.0, 0.0).to(h.dtype)
        at = content + rows[:, None] * K * C + written[:, None] * C + ccol[None, :]
        tl.store(at, value, mask=rmask[:, None] & cmask[None, :])
        _tile_store(writew + t * K, rows, rmask, T * K, 0, kcol, kmask, ww)
        tl.store(resets + rows * T * 2 + t * 2, alpha, mask=rmask)
        tl.store(resets + rows * T * 2 + t * 2 + 1, beta, mask=rmask)
        counts += w
        last = w
        tl.debug_barrier()  # the next step reads the memory just written
    _tile_store(c_out, rows, rmask, D, 0, dcol, dmask, c)
    _tile_store(counts_out, rows, rmask, K, 0, kcol, kmask, counts)
    _tile_store(last_out, rows, rmask, K, 0, kcol, kmask, last)


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
    r_all,  # (B, T, q) r_t
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
    d_content,  # (B, k, c) in: of the final C; out: of C_0 (the gradient the steps work on)
    d_h0,  # (B, d) out
    d_xg,  # (B, T, G) out: of the gates' pre-activations
    d_xr,  # (B, T, m) out: of the read MLP's query (READ_GRAD)
    d_value,  # (B, T, c) out: of W_m h_t
    d_projected,  # (B, T, k, m) out: of W_m^γ M_{t-1} (READ_GRAD)
    d_tau_pre,  # (B, T) zeros in; out: of w^τ h_{t-1} + b^τ (LEARNED)
    d_score,  # (B, T, m) out: each step's terms of a's gradient (READ_GRAD)
    d_ln,  # (programs, LN_BLOCKS, d) out: per-program sums for the gains and biases (LN)
    scratch,  # (B, S) h_t, the query, d w^w, W_m h_t and d r_t of the tile, read back
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
    AP: tl.constexpr,
    CP: tl.constexpr,
    QP: tl.constexpr,
    MP: tl.constexpr,
    S: tl.constexpr,
    MODE: tl.constexpr,
    TRAIN: tl.constexpr,
    LEARNED: tl.constexpr,
    LN: tl.constexpr,
    USE_MASK: tl.constexpr,
    READ_GRAD: tl.constexpr,
    USE_DPROBS: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    B = _wide(B)  # every offset made with it is int64
    Q: tl.constexpr = A + C
    G: tl.constexpr = 4 * D + 2
    rows, rmask, dcol, dmask, kcol, kmask, qcol, qmask, cq, mcol, mmask = _indices(
        B, D, K, A, Q, M, DP, KP, QP, MP, BLOCK_B
    )
    in_tile = tl.arange(0, BLOCK_B)
    ccol = tl.arange(0, CP)
    cmask = ccol < C
    kc = tl.arange(0, _KC)
    W_AT: tl.constexpr = DP + MP  # the scratch's blocks: h_t | query | d w^w | W_m h_t | d r_t
    V_AT: tl.constexpr = W_AT + KP
    R_AT: tl.constexpr = V_AT + CP
    dc = _tile_load(d_c, rows, rmask, D, 0, dcol, dmask)
    dh = dc * 0.0  # of h_t from the steps after t
    zero_d = tl.sum(dc, axis=0) * 0.0
    acc_gw_f, acc_gw_i, acc_gw_o, acc_gb_f, acc_gb_i = zero_d, zero_d, zero_d, zero_d, zero_d
    acc_gb_o, acc_cw, acc_cb, acc_mw, acc_mb = zero_d, zero_d, zero_d, zero_d, zero_d
    h_rows = hprev + rows * T * D
    r_rows = r_all + rows * T * Q
    new_rows = scratch + rows * S
    for back in range(T):
        t = T - 1 - back
        # ---- step t again, from the state before it
        h = _tile_load(hprev + t * D, rows, rmask, T * D, 0, dcol, dmask)
        c = _tile_load(cs + t * D, rows, rmask, T * D, 0, dcol, dmask)
        r = _tile_load(r_all + t * Q, rows, rmask, T * Q, 0, qcol, qmask)
        tau_pre, tau = _tau(h, w_tau, b_tau, inv_tau, dcol, dmask, LEARNED)
        if READ_GRAD:
            query = _query(xr, w_qh, w_qu, h_rows + t * D, usage + rows * T * K + t * K, rows, rmask, t, T,
                           mcol, mmask, D, K, M, DP, KP, MP)  # fmt: skip
            _tile_store(scratch, rows, rmask, S, DP, mcol, mmask, query)
        (h_new, _c_new, alpha, beta, f, i, o, cand, keep, x_f, x_i, x_o, rstd_g, x_c, rstd_c, x_m, rstd_m,
         squashed, hp_c, rp_c) = _controller(
            xg, logistic, dropout, w_hg, w_rg, lng_w, lng_b, lnc_w, lnc_b, lnm_w, lnm_b, h, c, r,
            h_rows + t * D, r_rows + t * Q, rows, rmask, t, T, B, eps, reset_temp, dcol, dmask, qcol, qmask,
            D, Q, DP, QP, TRAIN, LN, USE_MASK,
        )  # fmt: skip
        _tile_store(scratch, rows, rmask, S, 0, dcol, dmask, h_new)
        tl.debug_barrier()  # W_m h_t reads h_t back
        _tile_store(
            scratch, rows, rmask, S, V_AT, ccol, cmask, _xwt(new_rows, rmask, D, w_m, 0, D, C, CP, DP)
        )
        tl.debug_barrier()  # the rows' phase reads W_m h_t
        # ---- the write (eq. 2), row by row: M_t = M_{t-1} + w^w (v - M_{t-1}) on the content
        for bi in range(BLOCK_B):
            row = (tl.program_id(0) * BLOCK_B + bi).to(tl.int64)
            cv = cmask & ((ccol * 0 + row) < B)
            dmem = d_content + row * K * C
            mem = mems + (row * T + t) * K * C
            value = tl.load(scratch + row * S + V_AT + ccol, mask=cv, other=0.0)
            d_v = value * 0.0
            for k0 in range(0, KP, _KC):
                slot = k0 + kc
                sv = (slot < K) & ((kc * 0 + row) < B)
                at = slot[:, None] * C + ccol[None, :]
                ok = sv[:, None] & cv[None, :]
                g = tl.load(dmem + at, mask=ok, other=0.0)
                w_w = tl.load(writew + (row * T + t) * K + slot, mask=sv, other=0.0)
                d_v += tl.sum(w_w[:, None] * g, axis=0)
                d_ww = tl.sum(g * (value[None, :] - tl.load(mem + at, mask=ok, other=0.0)), axis=1)
                d_ww += tl.load(d_writew + (row * T + t) * K + slot, mask=sv, other=0.0)
                tl.store(scratch + row * S + W_AT + slot, d_ww, mask=sv)
                tl.store(dmem + at, g * (1.0 - w_w[:, None]), mask=ok)
            tl.store(d_value + (row * T + t) * C + ccol, d_v, mask=cv)
        tl.debug_barrier()  # the tile reads d v back
        dh += _tile_load(d_h_all + t * D, rows, rmask, T * D, 0, dcol, dmask)
        dh += _xw(d_value + rows * T * C + t * C, rmask, C, w_m, 0, D, D, DP, CP)  # of h_t, whole
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
        tl.debug_barrier()  # the products read the gates' gradients back
        # of h_{t-1} and r_t: (d W_h h) W_h and (d W_r r) W_r (β, α scale the c̃ block)
        g_rows = d_xg + rows * T * G + t * G
        dh = _xw(g_rows, rmask, D, w_hg, 0, D, D, DP, DP)
        dh += _xw(g_rows + D, rmask, D, w_hg, D, D, D, DP, DP)
        dh += _xw(g_rows + 2 * D, rmask, D, w_hg, 2 * D, D, D, DP, DP)
        dh += beta[:, None] * _xw(g_rows + 3 * D, rmask, D, w_hg, 3 * D, D, D, DP, DP)
        dh += dz_a[:, None] * _vec(w_hg, 4 * D * D, dcol, dmask)[None, :]
        dh += dz_b[:, None] * _vec(w_hg, (4 * D + 1) * D, dcol, dmask)[None, :]
        dr = _tile_load(d_r_all + t * Q, rows, rmask, T * Q, 0, qcol, qmask)
        dr += _xw(g_rows, rmask, D, w_rg, 0, Q, Q, QP, DP)
        dr += _xw(g_rows + D, rmask, D, w_rg, D, Q, Q, QP, DP)
        dr += _xw(g_rows + 2 * D, rmask, D, w_rg, 2 * D, Q, Q, QP, DP)
        dr += alpha[:, None] * _xw(g_rows + 3 * D, rmask, D, w_rg, 3 * D, Q, Q, QP, DP)
        dr += dz_a[:, None] * _vec(w_rg, 4 * D * Q, qcol, qmask)[None, :]
        dr += dz_b[:, None] * _vec(w_rg, (4 * D + 1) * Q, qcol, qmask)[None, :]
        _tile_store(scratch, rows, rmask, S, R_AT, qcol, qmask, dr)
        tl.debug_barrier()  # the rows' phase reads d r_t
        # ---- the read (eqs. 1, 19, 5, 4), row by row: r_t = w^r M_{t-1}
        for bi in range(BLOCK_B):
            row = (tl.program_id(0) * BLOCK_B + bi).to(tl.int64)
            valid = row < B
            kv = kmask & ((kcol * 0 + row) < B)
            mem = mems + (row * T + t) * K * C
            dmem = d_content + row * K * C
            dr_row = scratch + row * S + R_AT
            at_k = (row * T + t) * K + kcol
            if READ_GRAD:
                tau_b = _value_of(tau, in_tile, bi)
                last = tl.load(lasts + at_k, mask=kv, other=0.0)
                _logits, p, noisy, relaxed, _read = _row_read(
                    scratch + row * S + DP, mem, kv, valid, address, w_mem, score, gumbel, last, tau_b,
                    row, t, B, penalty, kcol, kmask, K, A, C, M, KP, AP, CP, MP, MODE, TRAIN,
                )  # fmt: skip
                d_logits = p * 0.0
                if TRAIN and MODE == _GUMBEL:  # straight-through: the gradient of y
                    d_y = tl.load(d_readw + at_k, mask=kv, other=0.0)
                    for q0 in range(0, QP, _KC):
                        qq = q0 + kc
                        ok = kv[:, None] & (qq < Q)[None, :]
                        m_k = tl.load(address + kcol[:, None] * A + qq[None, :], mask=ok & (qq < A)[None, :],
                                      other=0.0)  # fmt: skip
                        m_k += tl.load(mem + kcol[:, None] * C + tl.where(qq >= A, qq - A, 0)[None, :],
                                       mask=ok & (qq >= A)[None, :], other=0.0)  # fmt: skip
                        d_y += tl.sum(m_k * tl.load(dr_row + qq, mask=qq < Q, other=0.0)[None, :], axis=1)
                    step = tl.load(steps0 + row, mask=valid, other=0) + t
                    d_ww = tl.load(scratch + row * S + W_AT + kcol, mask=kv, other=0.0)
                    d_y += tl.where((kcol * 0 + step) < K, 0.0, d_ww)  # the written slot is the read one
                    d_z = relaxed * (d_y - tl.sum(relaxed * d_y, axis=0))
                    d_logits += tau_b * d_z
                    d_tau_v = tl.sum(d_z * tl.where(kmask, noisy, 0.0), axis=0)
                    tl.store(d_tau_pre + row * T + t, d_tau_v, mask=valid)
                if USE_DPROBS:
                    d_p = tl.load(d_probs + at_k, mask=kv, other=0.0)
                    d_logits += p * (d_p - tl.sum(p * d_p, axis=0))
                d_logits = tl.where(kv, d_logits, 0.0)
                for m0 in range(0, MP, _KC):
                    mm = (m0 + kc) < M
                    mv = mm & ((kc * 0 + row) < B)
                    q = tl.load(scratch + row * S + DP + m0 + kc, mask=mv, other=0.0)
                    proj = _projected(mem, kv, address, w_mem, m0, kcol, kmask, A, C, M, AP, CP)
                    mlp = _tanh(q[None, :] + proj)
                    tl.store(
                        d_score + (row * T + t) * M + m0 + kc,
                        tl.sum(d_logits[:, None] * mlp, axis=0),
                        mask=mv,
                    )
                    a_v = tl.load(score + m0 + kc, mask=mm, other=0.0)
                    d_proj = d_logits[:, None] * a_v[None, :] * (1.0 - mlp * mlp)
                    tl.store(d_projected + at_k[:, None] * M + m0 + kc[None, :], d_proj,
                             mask=kv[:, None] & mv[None, :])  # fmt: skip
                    tl.store(d_xr + (row * T + t) * M + m0 + kc, tl.sum(d_proj, axis=0), mask=mv)
                tl.debug_barrier()  # d W_m^γ M_{t-1} is read back
            w_r = tl.load(readw + at_k, mask=kv, other=0.0)
            for c0 in range(0, CP, _KC):
                cc = c0 + kc
                cv = (cc < C) & ((kc * 0 + row) < B)
                ok = kv[:, None] & cv[None, :]
                at = kcol[:, None] * C + cc[None, :]
                add = w_r[:, None] * tl.load(dr_row + A + cc, mask=cv, other=0.0)[None, :]
                if READ_GRAD:
                    add += _chunked_dot(
                        d_projected + at_k * M, kv, M, w_mem + A + c0, Q, 1, C - c0, _KC, MP, _KC
                    )
                tl.store(dmem + at, tl.load(dmem + at, mask=ok, other=0.0) + add, mask=ok)
        tl.debug_barrier()  # the tile reads d query back
        if READ_GRAD:
            dh += _xw(d_xr + rows * T * M + t * M, rmask, M, w_qh, 0, D, D, DP, MP)
        if LEARNED:  # eq. 18
            d_tau_v = tl.load(d_tau_pre + rows * T + t, mask=rmask, other=0.0)
            d_tau_v += tl.load(d_tau + rows * T + t, mask=rmask, other=0.0)
            d_s = d_tau_v * _sigmoid(tau_pre)
            tl.store(d_tau_pre + rows * T + t, d_s, mask=rmask)
            dh += d_s[:, None] * _vec(w_tau, 0, dcol, dmask)[None, :]
        tl.debug_barrier()  # the step before overwrites the scratch
    _tile_store(d_h0, rows, rmask, D, 0, dcol, dmask, dh)
    _tile_store(d_c, rows, rmask, D, 0, dcol, dmask, dc)
    if LN:
        base = d_ln + tl.program_id(0) * _LN_BLOCKS * D
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
