"""Triton kernels for a whole ARMIN sequence: the forward time loop and the backward pass through
time of ops/armin/reference.py (eqs. 3-10, the write of section 3.3; auto-addressing read, tied
write, control gates, layer norm, optional zoneout), all four addressing modes.

How (the technique of flash-linear-attention's fused recurrent kernels and mamba's selective
scan): one program per tile of BLOCK_B batch rows runs the whole time loop; the weights are
re-read from global memory at every step (they stay in L2), and the input's share of every
pre-activation comes precomputed for all steps (one matrix product before the call:
ARMINCell.precompute). Each product x W^T reads x back from memory BLOCK_K columns at a time
(triton_math.chunked_dot): the forward's inputs through a small per-program scratch, the
backward's from the gradient records it has just written; whole-tile products (128 x 128
weight tiles) held both operands in registers and spilled (benchmarks/triton_resources.py).
The memory M (B, n_mem, d_r) of each row lives in global memory, read and written one slot at a
time (one-hot reads: the slot read is gathered, and without records the slot written is the
one row stored, section 5's fast path). Sizes need not
be powers of two: each block (d_h, d_r, n_mem) is padded to the next power of two, at least 16
so that tl.dot compiles, with masks on every load and store. Every gate is its own block (eq. 3:
g^h, g^r; eq. 6: i, f, g, o^h, o^r), its layer norm a sum over the blocks, so no tile is wider
than the widest of d_h, d_r, n_mem (records.TRITON_MAX_SIZE bounds them: the weight tiles of
tl.dot must fit shared memory).

The forward keeps, per step, what the backward reads (``KEEP``: a backward follows; else no
records and the memory updated in place); the backward runs the steps in reverse from those
records and returns the same pre-activation gradients as kernels.py's numba backward
(records.PreactivationGrads); gradients.py makes the weight gradients of them. Random draws
(Gumbel noise, zoneout masks) are inputs, drawn by torch before the call. The launchers are in
triton_sequence.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mannlab.ops.triton_math import BLOCK_K as BLOCK_K  # the columns of each product's chunks
from mannlab.ops.triton_math import chunked_dot
from mannlab.ops.triton_math import row_argmax as _row_argmax
from mannlab.ops.triton_math import row_softmax as _row_softmax
from mannlab.ops.triton_math import wide as _wide

#: the dtypes the kernels take (the GPU's float32; float64 is left to the other paths)
DTYPES = (torch.float32,)
#: Whether these kernels have run on a GPU ("auto" uses only checked kernels). An earlier
#: version's GPU tests and bench_gpu.py ran on an H200 (benchmarks/README.md); False since:
GPU_CHECKED = False  # products split into K chunks (spills cut) after that check: not run on a GPU yet
#: batch rows per program: tl.dot needs at least 16 rows
BLOCK_B = 16


# ------------------------------------------------------------------ small helpers


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))  # in (0, 1]: no overflow
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0.0, -t, t)


@triton.jit
def _vec(ptr, start, n, BLOCK: tl.constexpr):
    """ptr[start : start + n] as a (1, BLOCK) row, zero past n."""
    k = tl.arange(0, BLOCK)
    return tl.load(ptr + start + k, mask=k < n, other=0.0)[None, :]


@triton.jit
def _column(x, cn, j):
    """Column j of x (BB, BN) as a (BB, 1) block."""
    return tl.sum(tl.where(cn[None, :] == j, x, 0.0), axis=1)[:, None]


# ------------------------------------------------------- what both kernels index and load


@triton.jit
def _tile(B, H, R, N, BH: tl.constexpr, BR: tl.constexpr, BN: tl.constexpr, BLOCK_B: tl.constexpr):
    """The program's rows (int64) and which are in the batch; the padded columns of the d_h,
    d_r and n_mem blocks; each block's mask over rows and columns, and over columns only."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_ok = rows < B
    rows64 = rows.to(tl.int64)
    ch = tl.arange(0, BH)
    cr = tl.arange(0, BR)
    cn = tl.arange(0, BN)
    mh = row_ok[:, None] & (ch[None, :] < H)
    mr = row_ok[:, None] & (cr[None, :] < R)
    mn = row_ok[:, None] & (cn[None, :] < N)
    return rows64, row_ok, ch, cr, cn, mh, mr, mn, ch[None, :] < H, cr[None, :] < R, cn[None, :] < N


@triton.jit
def _step_offsets(rows64, t, T, ch, cr, cn, H: tl.constexpr, R: tl.constexpr, N: tl.constexpr):
    """Where step t's rows are in the (B, T, .) records: the d_h, d_r and n_mem blocks' offsets
    and the starts of the C = d_h + d_r and G = 4 d_h + d_r rows."""
    rec_h = rows64[:, None] * (T * H) + t * H + ch[None, :]
    rec_r = rows64[:, None] * (T * R) + t * R + cr[None, :]
    rec_n = rows64[:, None] * (T * N) + t * N + cn[None, :]
    rec_c = rows64[:, None] * (T * (H + R)) + t * (H + R)
    rec_g = rows64[:, None] * (T * (4 * H + R)) + t * (4 * H + R)
    return rec_h, rec_r, rec_n, rec_c, rec_g


@triton.jit
def _step_draws(ptr, t, B, rows64, cols, width, mask):
    """Step t's rows of a (T, B, width) array of draws (Gumbel noise, zoneout weights); t B width
    in int64 (past 2**31 at T = 784, B = 4,096, width 1,024)."""
    step = _wide(t) * B * width
    return tl.load(ptr + step + rows64[:, None] * width + cols[None, :], mask=mask, other=0.0)


@triton.jit
def _control_rows(ptr, H, R, BH: tl.constexpr, BR: tl.constexpr):
    """A (C,) vector's two blocks [h, r] (eq. 3's rows), a (1, block) row each."""
    return _vec(ptr, 0, H, BH), _vec(ptr, H, R, BR)


@triton.jit
def _gate_rows(ptr, H, R, BH: tl.constexpr, BR: tl.constexpr):
    """A (G,) vector's five blocks [i, f, g, o^h, o^r] (eq. 6's rows), a (1, block) row each."""
    return (
        _vec(ptr, 0, H, BH),
        _vec(ptr, H, H, BH),
        _vec(ptr, 2 * H, H, BH),
        _vec(ptr, 3 * H, H, BH),
        _vec(ptr, 4 * H, R, BR),
    )


@triton.jit
def _load_control(ptr, ch, cr, mh, mr, H):
    """The [h, r] blocks of the C row at ptr."""
    return tl.load(ptr + ch[None, :], mask=mh, other=0.0), tl.load(ptr + H + cr[None, :], mask=mr, other=0.0)


@triton.jit
def _store_control(ptr, ch, cr, mh, mr, H, block_h, block_r):
    tl.store(ptr + ch[None, :], block_h, mask=mh)
    tl.store(ptr + H + cr[None, :], block_r, mask=mr)


@triton.jit
def _load_gates(ptr, ch, cr, mh, mr, H):
    """The [i, f, g, o^h, o^r] blocks of the G row at ptr."""
    return (
        tl.load(ptr + ch[None, :], mask=mh, other=0.0),
        tl.load(ptr + H + ch[None, :], mask=mh, other=0.0),
        tl.load(ptr + 2 * H + ch[None, :], mask=mh, other=0.0),
        tl.load(ptr + 3 * H + ch[None, :], mask=mh, other=0.0),
        tl.load(ptr + 4 * H + cr[None, :], mask=mr, other=0.0),
    )


@triton.jit
def _store_gates(ptr, ch, cr, mh, mr, H, i, f, g, o, r):
    tl.store(ptr + ch[None, :], i, mask=mh)
    tl.store(ptr + H + ch[None, :], f, mask=mh)
    tl.store(ptr + 2 * H + ch[None, :], g, mask=mh)
    tl.store(ptr + 3 * H + ch[None, :], o, mask=mh)
    tl.store(ptr + 4 * H + cr[None, :], r, mask=mr)


@triton.jit
def _times_w(x_rows, row_ok, w_ptr, n_in, n_out, BO: tl.constexpr, BI: tl.constexpr, KC: tl.constexpr):
    """d W for the tile's d (n_in columns of a record this program wrote, row m at x_rows[m])
    and a row-major W (n_in, n_out)."""
    return chunked_dot(x_rows, row_ok, n_in, w_ptr, n_out, 1, n_out, BO, BI, KC)


@triton.jit
def _preactivation(
    x_ptr, sc_rows, row_ok, w_h, w_r, row0, n_out, H, R, BO: tl.constexpr, BH: tl.constexpr, BR: tl.constexpr,
    KC: tl.constexpr,
):  # fmt: skip
    """One block of a pre-activation, x + W_h h + W_r r, (BB, BO): the input's share at x_ptr,
    then the products with the rows row0 to row0 + n_out of W_h (ld d_h) and W_r (ld d_r), h and
    r read from the program's scratch (row m's h block at sc_rows[m], its r block after it)."""
    cols = tl.arange(0, BO)
    pre = tl.load(x_ptr + cols[None, :], mask=row_ok[:, None] & (cols[None, :] < n_out), other=0.0)
    pre += chunked_dot(sc_rows, row_ok, H, w_h + row0 * H, 1, H, n_out, BO, BH, KC)
    pre += chunked_dot(sc_rows + BH, row_ok, R, w_r + row0 * R, 1, R, n_out, BO, BR, KC)
    return pre


# ----------------------------------------------------------------------- forward


@triton.jit
def forward_kernel(
    xp_ptr,  # (B, T, P): [x_c | x_g | x_s | ...]
    noise_ptr,  # (T, B, N) Gumbel draws (noisy modes)
    zone_ptr,  # (T, B, H) zoneout weights (USE_ZONE)
    h0_ptr,  # (B, H)
    steps_ptr,  # (B,) int64
    wch_ptr,  # (C + N, H)
    wcr_ptr,  # (C, R)
    wgh_ptr,  # (G, H)
    wgr_ptr,  # (G, R)
    wmap_ptr,  # (R, H) (USE_MAP)
    lncw_ptr,
    lncb_ptr,
    lngw_ptr,
    lngb_ptr,
    lnhw_ptr,
    lnhb_ptr,
    out_ptr,  # (B, T, C)
    ht_ptr,  # (B, H)
    mem_ptr,  # (B, T + 1, N, R) with KEEP (M_0 at 0), else (B, 1, N, R) updated in place
    hprev_ptr,
    s_ptr,
    y_ptr,
    r_ptr,
    c_ptr,
    hg_ptr,
    rg_ptr,
    xc_ptr,
    xg_ptr,
    xh_ptr,
    rstd_ptr,
    act_ptr,
    hs_ptr,
    v_ptr,
    w_ptr,
    scratch_ptr,  # (programs * BLOCK_B, BH + BR): the inputs of this step's products
    B,
    T,
    P,
    mem_row_stride,
    mem_step_stride,  # N * R with KEEP, 0 in place
    eps,
    inv_tau,
    H: tl.constexpr,
    R: tl.constexpr,
    N: tl.constexpr,
    BH: tl.constexpr,
    BR: tl.constexpr,
    BN: tl.constexpr,
    BLOCK_B: tl.constexpr,
    MODE: tl.constexpr,
    USE_ZONE: tl.constexpr,
    USE_MAP: tl.constexpr,
    KEEP: tl.constexpr,
    GATHER_READ: tl.constexpr,  # one-hot reads (gumbel, argmax)
    SCATTER_WRITE: tl.constexpr,  # one-hot reads and the memory in place (no KEEP)
    KC: tl.constexpr,
):
    C: tl.constexpr = H + R
    G: tl.constexpr = 4 * H + R
    rows64, row_ok, ch, cr, cn, mh, mr, mn, col_h, col_r, col_n = _tile(B, H, R, N, BH, BR, BN, BLOCK_B)
    # the products read their input (h or h^g, r or r^g) back from here, KC columns at a time
    sc_rows = scratch_ptr + rows64 * (BH + BR)
    sc = sc_rows[:, None]
    h = tl.load(h0_ptr + rows64[:, None] * H + ch[None, :], mask=mh, other=0.0)
    steps0 = tl.load(steps_ptr + rows64, mask=row_ok, other=0)
    mem_rows = mem_ptr + rows64[:, None] * mem_row_stride + cr[None, :]
    for t in range(T):
        x_row = xp_ptr + rows64[:, None] * (T * P) + t * P  # this step's projected input
        mem_now = mem_rows + t * mem_step_stride  # M_{t-1}
        # each record is stored as soon as it is made (KEEP): held to the step's end, they would
        # take the registers the products need
        rec_h, rec_r, rec_n, rec_c, rec_g = _step_offsets(rows64, t, T, ch, cr, cn, H, R, N)
        rstd_row = rstd_ptr + rows64 * (T * 3) + t * 3
        # ---- eq. 9: the read weights
        tl.store(sc + ch[None, :], h)  # h_{t-1}, zero past d_h
        if KEEP:
            tl.store(hprev_ptr + rec_h, h, mask=mh)
        tl.debug_barrier()
        logits = tl.load(x_row + C + G + cn[None, :], mask=mn, other=0.0)
        logits += chunked_dot(sc_rows, row_ok, H, wch_ptr + C * H, 1, H, N, BN, BH, KC)
        read = tl.zeros((BLOCK_B,), dtype=tl.int32)  # the slot read, in the one-hot modes
        if MODE == 3:  # argmax
            read = _row_argmax(tl.where(col_n, logits, float("-inf")), cn, BN)
            s = tl.where(cn[None, :] == read[:, None], 1.0, 0.0)
            y = s * 0.0
        elif MODE == 0:  # soft
            y = _row_softmax(tl.where(col_n, logits, float("-inf")))
            s = y
        else:  # the gumbel-softmax sample of eq. 1
            noisy = (logits + _step_draws(noise_ptr, t, B, rows64, cn, N, mn)) * inv_tau
            y = _row_softmax(tl.where(col_n, noisy, float("-inf")))
            if MODE == 1:
                s = y
            else:  # straight-through: the one-hot forward
                read = _row_argmax(tl.where(col_n, y, float("-inf")), cn, BN)
                s = tl.where(cn[None, :] == read[:, None], 1.0, 0.0)
        if KEEP:
            tl.store(s_ptr + rec_n, s, mask=mn)
            tl.store(y_ptr + rec_n, y, mask=mn)
        # ---- eq. 10: r = s^T M_{t-1}
        if GATHER_READ:  # one-hot s: an index gather instead of the weighted sum (section 5)
            r = tl.load(mem_now + read[:, None] * R, mask=mr, other=0.0)
        else:
            r = tl.zeros((BLOCK_B, BR), dtype=h.dtype)
            for j in range(N):
                m_j = tl.load(mem_now + j * R, mask=mr, other=0.0)
                r += _column(s, cn, j) * m_j
        # ---- eq. 3: control gates [g^h; g^r] = σ(LN_c(x_c + W_ig,h h + W_ig,r r))
        tl.store(sc + BH + cr[None, :], r)
        if KEEP:
            tl.store(r_ptr + rec_r, r, mask=mr)
        tl.debug_barrier()
        a_h = _preactivation(x_row, sc_rows, row_ok, wch_ptr, wcr_ptr, 0, H, H, R, BH, BH, BR, KC)
        a_r = _preactivation(x_row + H, sc_rows, row_ok, wch_ptr, wcr_ptr, H, R, H, R, BR, BH, BR, KC)
        mean = (tl.sum(tl.where(col_h, a_h, 0.0), axis=1) + tl.sum(tl.where(col_r, a_r, 0.0), axis=1)) / C
        d_h = tl.where(col_h, a_h - mean[:, None], 0.0)
        d_r = tl.where(col_r, a_r - mean[:, None], 0.0)
        rstd_c = 1.0 / tl.sqrt((tl.sum(d_h * d_h, axis=1) + tl.sum(d_r * d_r, axis=1)) / C + eps)
        xc_h = d_h * rstd_c[:, None]
        xc_r = d_r * rstd_c[:, None]
        # the layer norms' gains and biases, a (1, block) row each, loaded where used (L1 hits)
        lnc_w_h, lnc_w_r = _control_rows(lncw_ptr, H, R, BH, BR)
        lnc_b_h, lnc_b_r = _control_rows(lncb_ptr, H, R, BH, BR)
        c_h = _sigmoid(xc_h * lnc_w_h + lnc_b_h)
        c_r = _sigmoid(xc_r * lnc_w_r + lnc_b_r)
        hg = c_h * h  # eq. 4
        rg = c_r * r  # eq. 5
        if KEEP:
            _store_control(xc_ptr + rec_c, ch, cr, mh, mr, H, xc_h, xc_r)
            tl.store(rstd_row, rstd_c, mask=row_ok)
            _store_control(c_ptr + rec_c, ch, cr, mh, mr, H, c_h, c_r)
            tl.store(hg_ptr + rec_h, hg, mask=mh)
            tl.store(rg_ptr + rec_r, rg, mask=mr)
        # ---- eq. 6: [i, f, g, o^h, o^r] from LN_g(x_g + W_go,h h^g + W_go,r r^g), one block each
        tl.debug_barrier()  # every read of h and r above, before h^g and r^g replace them
        tl.store(sc + ch[None, :], hg)
        tl.store(sc + BH + cr[None, :], rg)
        tl.debug_barrier()
        xg_row = x_row + C
        z_i = _preactivation(xg_row, sc_rows, row_ok, wgh_ptr, wgr_ptr, 0, H, H, R, BH, BH, BR, KC)
        z_f = _preactivation(xg_row + H, sc_rows, row_ok, wgh_ptr, wgr_ptr, H, H, H, R, BH, BH, BR, KC)
        z_g = _preactivation(
            xg_row + 2 * H, sc_rows, row_ok, wgh_ptr, wgr_ptr, 2 * H, H, H, R, BH, BH, BR, KC
        )
        z_o = _preactivation(
            xg_row + 3 * H, sc_rows, row_ok, wgh_ptr, wgr_ptr, 3 * H, H, H, R, BH, BH, BR, KC
        )
        z_r = _preactivation(
            xg_row + 4 * H, sc_rows, row_ok, wgh_ptr, wgr_ptr, 4 * H, R, H, R, BR, BH, BR, KC
        )
        total = tl.sum(tl.where(col_h, z_i + z_f + z_g + z_o, 0.0), axis=1)
        mean = (total + tl.sum(tl.where(col_r, z_r, 0.0), axis=1)) / G
        z_i = tl.where(col_h, z_i - mean[:, None], 0.0)
        z_f = tl.where(col_h, z_f - mean[:, None], 0.0)
        z_g = tl.where(col_h, z_g - mean[:, None], 0.0)
        z_o = tl.where(col_h, z_o - mean[:, None], 0.0)
        z_r = tl.where(col_r, z_r - mean[:, None], 0.0)
        var = tl.sum(z_i * z_i + z_f * z_f + z_g * z_g + z_o * z_o, axis=1) + tl.sum(z_r * z_r, axis=1)
        rstd_g = 1.0 / tl.sqrt(var / G + eps)
        z_i *= rstd_g[:, None]  # now x̂ of each block
        z_f *= rstd_g[:, None]
        z_g *= rstd_g[:, None]
        z_o *= rstd_g[:, None]
        z_r *= rstd_g[:, None]
        if KEEP:
            _store_gates(xg_ptr + rec_g, ch, cr, mh, mr, H, z_i, z_f, z_g, z_o, z_r)
            tl.store(rstd_row + 1, rstd_g, mask=row_ok)
        lng_w_i, lng_w_f, lng_w_g, lng_w_o, lng_w_r = _gate_rows(lngw_ptr, H, R, BH, BR)
        lng_b_i, lng_b_f, lng_b_g, lng_b_o, lng_b_r = _gate_rows(lngb_ptr, H, R, BH, BR)
        a_i = _sigmoid(z_i * lng_w_i + lng_b_i)
        a_f = _sigmoid(z_f * lng_w_f + lng_b_f)
        a_g = _tanh(z_g * lng_w_g + lng_b_g)
        a_o = _sigmoid(z_o * lng_w_o + lng_b_o)
        a_r = _sigmoid(z_r * lng_w_r + lng_b_r)
        if KEEP:
            _store_gates(act_ptr + rec_g, ch, cr, mh, mr, H, a_i, a_f, a_g, a_o, a_r)
        # ---- eq. 7: ĥ = LN_h(f h_{t-1} + i g); eq. 8: o_t = [o^h tanh ĥ, o^r tanh r]
        u = tl.where(col_h, a_f * h + a_i * a_g, 0.0)
        mean = tl.sum(u, axis=1) / H
        u = tl.where(col_h, u - mean[:, None], 0.0)
        rstd_h = 1.0 / tl.sqrt(tl.sum(u * u, axis=1) / H + eps)
        xh = u * rstd_h[:, None]
        if KEEP:
            tl.store(xh_ptr + rec_h, xh, mask=mh)
            tl.store(rstd_row + 2, rstd_h, mask=row_ok)
        h_hat = xh * _vec(lnhw_ptr, 0, H, BH) + _vec(lnhb_ptr, 0, H, BH)
        out_row = out_ptr + rows64[:, None] * (T * C) + t * C
        tl.store(out_row + ch[None, :], a_o * _tanh(h_hat), mask=mh)
        tl.store(out_row + H + cr[None, :], a_r * _tanh(r), mask=mr)
        if USE_ZONE:  # h_t = z h_{t-1} + (1 - z) ĥ
            zone = _step_draws(zone_ptr, t, B, rows64, ch, H, mh)
            h_new = zone * h + (1.0 - zone) * h_hat
        else:
            h_new = h_hat
        h_new = tl.where(mh, h_new, 0.0)
        if KEEP:
            tl.store(hs_ptr + rec_h, h_new, mask=mh)
        # ---- section 3.3: write v (W_w h_t, or h_t) to the next empty slot, then to the slot read
        if USE_MAP:
            tl.debug_barrier()  # every read of h^g above, before h_t replaces it
            tl.store(sc + ch[None, :], h_new)
            tl.debug_barrier()
            v = chunked_dot(sc_rows, row_ok, H, wmap_ptr, 1, H, R, BR, BH, KC)
        else:
            v = h_new
        step = steps0 + t
        w = tl.where((step < N)[:, None], tl.where(cn[None, :] == step[:, None], 1.0, 0.0), s)
        if KEEP:
            tl.store(v_ptr + rec_r, v, mask=mr)
            tl.store(w_ptr + rec_n, w, mask=mn)
        if SCATTER_WRITE:  # one-hot w, memory in place: only the slot written changes
            slot = tl.where(step < N, step, read)
            tl.store(mem_now + slot[:, None] * R, v, mask=mr)
        else:
            for j in range(N):
                w_j = _column(w, cn, j)
                m_j = tl.load(mem_now + j * R, mask=mr, other=0.0)
                # torch.lerp's two formulas, for the same rounding
                new = tl.where(w_j < 0.5, m_j + w_j * (v - m_j), v - (v - m_j) * (1.0 - w_j))
                tl.store(mem_now + mem_step_stride + j * R, new, mask=mr)
        h = h_new
        tl.debug_barrier()  # the next step reads the memory rows this one wrote
    tl.store(ht_ptr + rows64[:, None] * H + ch[None, :], h, mask=mh)


# ---------------------------------------------------------------------- backward


@triton.jit
def backward_kernel(
    d_out_ptr,  # (B, T, C)
    d_ht_ptr,  # (B, H)
    dm_ptr,  # (B, N, R): d M_T in, d M_0 out (updated in place)
    zone_ptr,  # (T, B, H) (USE_ZONE)
    steps_ptr,
    wch_ptr,
    wcr_ptr,
    wgh_ptr,
    wgr_ptr,
    wmap_ptr,
    lncw_ptr,
    lngw_ptr,
    lnhw_ptr,
    lnhb_ptr,
    hprev_ptr,
    s_ptr,
    y_ptr,
    r_ptr,
    c_ptr,
    xc_ptr,
    xg_ptr,
    xh_ptr,
    rstd_ptr,
    act_ptr,
    v_ptr,
    w_ptr,
    mem_ptr,  # (B, T + 1, N, R)
    d_xc_ptr,  # (B, T, C)
    d_xg_ptr,  # (B, T, G)
    d_xs_ptr,  # (B, T, N)
    d_v_ptr,  # (B, T, R)
    d_yc_ptr,  # (B, T, C)
    d_yg_ptr,  # (B, T, G)
    d_yh_ptr,  # (B, T, H)
    d_h0_ptr,  # (B, H)
    B,
    T,
    inv_tau,
    H: tl.constexpr,
    R: tl.constexpr,
    N: tl.constexpr,
    BH: tl.constexpr,
    BR: tl.constexpr,
    BN: tl.constexpr,
    BLOCK_B: tl.constexpr,
    MODE: tl.constexpr,
    USE_ZONE: tl.constexpr,
    USE_MAP: tl.constexpr,
    KC: tl.constexpr,
):
    C: tl.constexpr = H + R
    G: tl.constexpr = 4 * H + R
    # the padded sizes of the products over the C and G rows (whole KC chunks)
    CK: tl.constexpr = (C + KC - 1) // KC * KC
    GK: tl.constexpr = (G + KC - 1) // KC * KC
    rows64, row_ok, ch, cr, cn, mh, mr, mn, col_h, col_r, _ = _tile(B, H, R, N, BH, BR, BN, BLOCK_B)
    dh = tl.load(d_ht_ptr + rows64[:, None] * H + ch[None, :], mask=mh, other=0.0)
    steps0 = tl.load(steps_ptr + rows64, mask=row_ok, other=0)
    dm_rows = dm_ptr + rows64[:, None] * (N * R) + cr[None, :]
    mem_rows = mem_ptr + rows64[:, None] * ((T + 1) * N * R) + cr[None, :]
    for step_back in range(T):
        t = T - 1 - step_back
        rec_h, rec_r, rec_n, rec_c, rec_g = _step_offsets(rows64, t, T, ch, cr, cn, H, R, N)
        mem_now = mem_rows + t * (N * R)  # M_{t-1}
        # ---- the write M_t = lerp(M_{t-1}, v, w): gradients of v, w and M_{t-1}
        v = tl.load(v_ptr + rec_r, mask=mr, other=0.0)
        w = tl.load(w_ptr + rec_n, mask=mn, other=0.0)
        dv = tl.zeros((BLOCK_B, BR), dtype=dh.dtype)
        dw = tl.zeros((BLOCK_B, BN), dtype=dh.dtype)
        for j in range(N):
            w_j = _column(w, cn, j)
            g_j = tl.load(dm_rows + j * R, mask=mr, other=0.0)
            m_j = tl.load(mem_now + j * R, mask=mr, other=0.0)
            dw = tl.where(cn[None, :] == j, tl.sum(g_j * (v - m_j), axis=1)[:, None], dw)
            dv += w_j * g_j
            tl.store(dm_rows + j * R, g_j * (1.0 - w_j), mask=mr)
        tl.store(d_v_ptr + rec_r, dv, mask=mr)
        # the products below read their input back from the records this program writes
        if USE_MAP:
            tl.debug_barrier()
            dh_v = _times_w(d_v_ptr + rows64 * (T * R) + t * R, row_ok, wmap_ptr, R, H, BH, BR, KC)
        else:
            dh_v = dv
        # ---- eq. 8, zoneout, eq. 7
        hprev = tl.load(hprev_ptr + rec_h, mask=mh, other=0.0)
        xh = tl.load(xh_ptr + rec_h, mask=mh, other=0.0)
        # the layer norms' gains and biases, loaded where used (as in the forward)
        lnh_w = _vec(lnhw_ptr, 0, H, BH)
        th = _tanh(xh * lnh_w + _vec(lnhb_ptr, 0, H, BH))
        r = tl.load(r_ptr + rec_r, mask=mr, other=0.0)
        tr = _tanh(r)
        a_i, a_f, a_g, a_o, a_r = _load_gates(act_ptr + rec_g, ch, cr, mh, mr, H)
        go_h, go_r = _load_control(d_out_ptr + rec_c, ch, cr, mh, mr, H)
        d_state = dh + dh_v
        if USE_ZONE:
            zone = _step_draws(zone_ptr, t, B, rows64, ch, H, mh)
            d_kept = zone * d_state
            d_state = (1.0 - zone) * d_state
        else:
            d_kept = d_state * 0.0
        d_hhat = d_state + go_h * a_o * (1.0 - th * th)
        dy_o = go_h * th * a_o * (1.0 - a_o)
        dr = go_r * a_r * (1.0 - tr * tr)
        dy_r = go_r * tr * a_r * (1.0 - a_r)
        tl.store(d_yh_ptr + rec_h, d_hhat, mask=mh)
        rstd_row = rstd_ptr + rows64 * (T * 3) + t * 3
        rstd_h = tl.load(rstd_row + 2, mask=row_ok, other=0.0)
        gw = tl.where(col_h, d_hhat * lnh_w, 0.0)
        m1 = tl.sum(gw, axis=1) / H
        m2 = tl.sum(gw * xh, axis=1) / H
        du = tl.where(col_h, rstd_h[:, None] * (gw - m1[:, None] - xh * m2[:, None]), 0.0)
        dhp = du * a_f + d_kept
        dy_i = du * a_g * a_i * (1.0 - a_i)
        dy_f = du * hprev * a_f * (1.0 - a_f)
        dy_g = du * a_i * (1.0 - a_g * a_g)
        _store_gates(d_yg_ptr + rec_g, ch, cr, mh, mr, H, dy_i, dy_f, dy_g, dy_o, dy_r)
        # ---- eq. 6's layer norm, over the five blocks
        rstd_g = tl.load(rstd_row + 1, mask=row_ok, other=0.0)[:, None]
        x_i, x_f, x_g, x_o, x_r = _load_gates(xg_ptr + rec_g, ch, cr, mh, mr, H)
        lng_w_i, lng_w_f, lng_w_g, lng_w_o, lng_w_r = _gate_rows(lngw_ptr, H, R, BH, BR)
        g_i = tl.where(col_h, dy_i * lng_w_i, 0.0)
        g_f = tl.where(col_h, dy_f * lng_w_f, 0.0)
        g_g = tl.where(col_h, dy_g * lng_w_g, 0.0)
        g_o = tl.where(col_h, dy_o * lng_w_o, 0.0)
        g_r = tl.where(col_r, dy_r * lng_w_r, 0.0)
        m1 = (tl.sum(g_i + g_f + g_g + g_o, axis=1) + tl.sum(g_r, axis=1)) / G
        m2 = tl.sum(g_i * x_i + g_f * x_f + g_g * x_g + g_o * x_o, axis=1) + tl.sum(g_r * x_r, axis=1)
        m1 = m1[:, None]
        m2 = m2[:, None] / G
        da_i = tl.where(col_h, rstd_g * (g_i - m1 - x_i * m2), 0.0)
        da_f = tl.where(col_h, rstd_g * (g_f - m1 - x_f * m2), 0.0)
        da_g = tl.where(col_h, rstd_g * (g_g - m1 - x_g * m2), 0.0)
        da_o = tl.where(col_h, rstd_g * (g_o - m1 - x_o * m2), 0.0)
        da_r = tl.where(col_r, rstd_g * (g_r - m1 - x_r * m2), 0.0)
        _store_gates(d_xg_ptr + rec_g, ch, cr, mh, mr, H, da_i, da_f, da_g, da_o, da_r)
        # ---- d h^g = d a W_go,h and d r^g = d a W_go,r, over the five blocks at once
        tl.debug_barrier()
        dhg = _times_w(d_xg_ptr + rows64 * (T * G) + t * G, row_ok, wgh_ptr, G, H, BH, GK, KC)
        drg = _times_w(d_xg_ptr + rows64 * (T * G) + t * G, row_ok, wgr_ptr, G, R, BR, GK, KC)
        # ---- eqs. 5, 4, 3
        c_h, c_r = _load_control(c_ptr + rec_c, ch, cr, mh, mr, H)
        dhp += dhg * c_h
        dz_h = dhg * hprev * c_h * (1.0 - c_h)
        dr += drg * c_r
        dz_r = drg * r * c_r * (1.0 - c_r)
        _store_control(d_yc_ptr + rec_c, ch, cr, mh, mr, H, dz_h, dz_r)
        rstd_c = tl.load(rstd_row, mask=row_ok, other=0.0)[:, None]
        xc_h, xc_r = _load_control(xc_ptr + rec_c, ch, cr, mh, mr, H)
        lnc_w_h, lnc_w_r = _control_rows(lncw_ptr, H, R, BH, BR)
        g_h = tl.where(col_h, dz_h * lnc_w_h, 0.0)
        g_r = tl.where(col_r, dz_r * lnc_w_r, 0.0)
        m1 = ((tl.sum(g_h, axis=1) + tl.sum(g_r, axis=1)) / C)[:, None]
        m2 = ((tl.sum(g_h * xc_h, axis=1) + tl.sum(g_r * xc_r, axis=1)) / C)[:, None]
        dc_h = tl.where(col_h, rstd_c * (g_h - m1 - xc_h * m2), 0.0)
        dc_r = tl.where(col_r, rstd_c * (g_r - m1 - xc_r * m2), 0.0)
        _store_control(d_xc_ptr + rec_c, ch, cr, mh, mr, H, dc_h, dc_r)
        tl.debug_barrier()
        dr += _times_w(d_xc_ptr + rows64 * (T * C) + t * C, row_ok, wcr_ptr, C, R, BR, CK, KC)
        # ---- eqs. 10, 9: the read's gradient to M_{t-1} and to the logits
        s = tl.load(s_ptr + rec_n, mask=mn, other=0.0)
        filling = ((steps0 + t) < N)[:, None]
        ds = tl.where(filling, 0.0, dw)  # while filling, the write does not depend on s
        tl.debug_barrier()  # the write's updates of dm above, before this loop's
        for j in range(N):
            m_j = tl.load(mem_now + j * R, mask=mr, other=0.0)
            ds = tl.where(cn[None, :] == j, ds + tl.sum(dr * m_j, axis=1)[:, None], ds)
            g_j = tl.load(dm_rows + j * R, mask=mr, other=0.0)
            tl.store(dm_rows + j * R, g_j + _column(s, cn, j) * dr, mask=mr)
        if MODE == 3:  # argmax: no gradient to the logits
            d_xs = ds * 0.0
        else:
            p = tl.load(y_ptr + rec_n, mask=mn, other=0.0)
            mean = tl.sum(p * ds, axis=1)[:, None]
            if MODE == 0:
                d_xs = p * (ds - mean)
            else:
                d_xs = inv_tau * p * (ds - mean)
        d_xs = tl.where(mn, d_xs, 0.0)
        tl.store(d_xs_ptr + rec_n, d_xs, mask=mn)
        # ---- dh_{t-1} = the direct part + [d x_c, d x_s] [W_ig,h; W_s,h]
        tl.debug_barrier()
        dh = dhp + _times_w(d_xc_ptr + rows64 * (T * C) + t * C, row_ok, wch_ptr, C, H, BH, CK, KC)
        dh += _times_w(d_xs_ptr + rows64 * (T * N) + t * N, row_ok, wch_ptr + C * H, N, H, BH, BN, KC)
        dh = tl.where(mh, dh, 0.0)
        tl.debug_barrier()  # this step's dm, before the next step's write loop reads it
    tl.store(d_h0_ptr + rows64[:, None] * H + ch[None, :], dh, mask=mh)
