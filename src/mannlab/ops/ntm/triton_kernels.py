"""Triton kernels of the NTM's whole sequence: ops/ntm/reference.py's loop, forward and
backward, each one kernel launch with the time loop inside (the technique of
flash-linear-attention's fused_recurrent kernels and of mamba's selective scan).

One program per tile of BLOCK_B batch rows (chosen at launch from the batch and the GPU's
SMs: triton_math.rows_per_program). Each step has two phases:

    tile phase   (i) the controller for the tile's rows at once: its pre-activations as
                 products with W_r and W_h (re-read from global memory each step; they stay
                 in L2), c in registers; then the head layer p_t = W_p h_t + b_p. Each
                 product reads its input (r_{t-1}, h_{t-1}, h_t; in the backward the
                 gradients just written) back from memory BLOCK_K columns at a time
                 (triton_math.chunked_dot, in the controllers' helpers the DNC shares):
                 whole-tile products spilled
    row phase    (ii)-(iii) row by row: the addressing of every head, the erase/add write and
                 the reads on that row's memory (N, W), which lives in global memory

and the phases meet through global memory (p_t, r_t) behind a barrier. The circular shift reads
the interpolated weighting w^g back from global memory at shifted slots (w^g is a record the
backward needs anyway). The forward keeps, for the backward, the states over time (h, c, r, M,
w^r, w^w), the activated gates, the raw head parameters and w^g; the backward runs the time
loop in reverse, recomputes the addressing from them and writes the gradients of the
pre-activations of every step (x_proj, W_h h_{t-1}, the head layer's output). The weight
gradients are then one matrix product each over all B T steps (triton_sequence.py), and the
input projection of all steps is one matrix product before the forward.

Sizes that are not powers of two are padded (masks on every load and store); every tl.dot has
its inner and output sizes >= 16 (padded to 16 at least) and BLOCK_B rows, 1 to 16 (fewer than
16 on Triton 3.9 and later). Offsets that multiply time, batch and width are int64 (``B`` is
widened first: triton_math.wide). float32 on the GPU (tl.dot in IEEE precision, not TF32);
float64 only in Triton's interpreter, where the tests check gradients.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mannlab.ops.triton_math import BLOCK_K as BLOCK_K  # the columns of each product's chunks
from mannlab.ops.triton_math import DTYPES as DTYPES  # float64 only in the interpreter
from mannlab.ops.triton_math import controller_backward as _controller_backward
from mannlab.ops.triton_math import controller_forward as _controller_forward
from mannlab.ops.triton_math import cosine_content as _content
from mannlab.ops.triton_math import cosine_content_backward as _content_backward
from mannlab.ops.triton_math import sigmoid as _sigmoid
from mannlab.ops.triton_math import slot_norms as _slot_norms
from mannlab.ops.triton_math import softmax as _softmax
from mannlab.ops.triton_math import softplus as _softplus
from mannlab.ops.triton_math import tile_load as _tile_load
from mannlab.ops.triton_math import tile_store as _tile_store
from mannlab.ops.triton_math import wide as _wide

#: Whether these kernels have run on a GPU ("auto" uses only checked kernels). An earlier
#: version's GPU tests and bench_gpu.py ran on an H200 (benchmarks/README.md); False since:
GPU_CHECKED = False  # products split into K chunks (spills cut) after that check: not run on a GPU yet

#: warps per program, whatever its rows (the row phase, which sets the registers, goes row by
#: row): 8 halve the per-thread share of the row phase's (N, W) memory tiles
#: (sm_90, benchmarks/triton_resources.py: forward spills 2.8 KB instead of 5.3 KB at 4)
NUM_WARPS = 8

#: the sharpening's guard, as mannlab.nn.addressing.EPS (the cosine's is triton_math.COSINE_EPS)
_EPS = tl.constexpr(1e-8)


# ---------------------------------------------------------------- what both kernels index


@triton.jit
def _tile_columns(
    pid, B, D, RW, P, DP: tl.constexpr, RWP: tl.constexpr, PP: tl.constexpr, BLOCK_B: tl.constexpr
):
    """The tile's batch rows (int64) and which are in the batch; the padded columns of the
    controller's (D), the reads' (R W) and the head layer's (P) blocks, each with its mask."""
    rows = (pid * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    rmask = rows < B
    dcol = tl.arange(0, DP)
    dmask = dcol < D
    rcol = tl.arange(0, RWP)
    rwmask = rcol < RW
    pcol = tl.arange(0, PP)
    pmask = pcol < P
    return rows, rmask, dcol, dmask, rcol, rwmask, pcol, pmask


@triton.jit
def _memory_columns(N, W, NP: tl.constexpr, WP: tl.constexpr, SP: tl.constexpr):
    """The padded slot, width and shift indices with the masks of slots and width, the mask of
    a memory tile (N, W) and its offsets (row-major)."""
    nidx = tl.arange(0, NP)
    nmask = nidx < N
    widx = tl.arange(0, WP)
    wmask = widx < W
    sidx = tl.arange(0, SP)
    tile_mem = nmask[:, None] & wmask[None, :]
    return nidx, nmask, widx, wmask, sidx, tile_mem, nidx[:, None] * W + widx[None, :]


@triton.jit
def _row_masks(pid, bi, B, nidx, nmask, widx, wmask, sidx, tile_mem, S, BLOCK_B: tl.constexpr):
    """Row ``bi`` of the tile (int64), whether it is in the batch, and its masks of the slots,
    the width, the shifts and the memory tile (a tensor mask & a scalar one fails in the
    interpreter: the row's test is made a tensor first)."""
    row = (pid * BLOCK_B + bi).to(tl.int64)
    valid = row < B
    nv = nmask & ((nidx * 0 + row) < B)
    wv = wmask & ((widx * 0 + row) < B)
    sv = (sidx < S) & ((sidx * 0 + row) < B)
    return row, valid, nv, wv, sv, tile_mem & nv[:, None]


# ---------------------------------------------------------------- one head's addressing


@triton.jit
def _head_values(pbase, base, valid, widx, wv, sidx, sv, W: tl.constexpr, S: tl.constexpr):
    """Head block at ``base`` of one row's raw parameters -> k, raw beta, g, s, raw gamma."""
    key = tl.load(pbase + base + widx, mask=wv, other=0.0)
    beta_raw = tl.load(pbase + base + W, mask=valid, other=0.0)
    gate = _sigmoid(tl.load(pbase + base + W + 1, mask=valid, other=0.0))
    smask = sidx < S
    shift = _softmax(tl.load(pbase + base + W + 2 + sidx, mask=sv, other=0.0), smask)
    gamma_raw = tl.load(pbase + base + W + 2 + S, mask=valid, other=0.0)
    return key, beta_raw, gate, shift, gamma_raw


@triton.jit
def _shifted(gated_ptr, shift, nidx, nv, sidx, N: tl.constexpr, S: tl.constexpr):
    """w~(i) = sum_m w^g((i - k_m) mod N) s(m), k_m = m - S // 2, reading w^g from memory."""
    out = nidx.to(shift.dtype) * 0.0
    for m in range(S):
        source = (nidx - (m - S // 2) + N) % N
        out += tl.sum(tl.where(sidx == m, shift, 0.0), axis=0) * tl.load(
            gated_ptr + source, mask=nv, other=0.0
        )
    return out


@triton.jit
def _address(
    pbase,
    head,
    memory,
    norms,
    prev_ptr,
    gated_ptr,
    valid,
    nidx,
    nmask,
    nv,
    widx,
    wv,
    sidx,
    sv,
    N: tl.constexpr,
    W: tl.constexpr,
    S: tl.constexpr,
):
    """One head of one row: content -> interpolation -> circular shift -> sharpening; w^g is
    stored at ``gated_ptr`` (N,) on the way. Returns w (N,)."""
    key, beta_raw, gate, shift, gamma_raw = _head_values(
        pbase, head * (W + 3 + S), valid, widx, wv, sidx, sv, W, S
    )
    _, content, _ = _content(key, _softplus(beta_raw), memory, norms, nmask)
    prev = tl.load(prev_ptr + nidx, mask=nv, other=0.0)
    gated = prev + gate * (content - prev)
    tl.store(gated_ptr + nidx, gated, mask=nv)
    tl.debug_barrier()  # w^g is read back at other slots, by other threads
    shifted = _shifted(gated_ptr, shift, nidx, nv, sidx, N, S)
    gamma = 1.0 + _softplus(gamma_raw)
    return _softmax(gamma * tl.log(shifted + _EPS), nmask)


@triton.jit
def _address_backward(
    grad_w,
    pbase,
    dpbase,
    head,
    memory,
    norms,
    prev_ptr,
    weights,
    gated_ptr,
    scratch_ptr,
    valid,
    nidx,
    nmask,
    nv,
    widx,
    wv,
    sidx,
    sv,
    N: tl.constexpr,
    W: tl.constexpr,
    S: tl.constexpr,
):
    """Backward of ``_address`` from the gradient of w (N,): writes the gradient of the head's
    raw parameters at ``dpbase``; returns the gradients of the memory (N, W) and of w_{t-1}.
    ``scratch_ptr`` (N,) holds d w~ for the shift's reads at other slots."""
    base = head * (W + 3 + S)
    key, beta_raw, gate, shift, gamma_raw = _head_values(pbase, base, valid, widx, wv, sidx, sv, W, S)
    beta, gamma = _softplus(beta_raw), 1.0 + _softplus(gamma_raw)
    similarity, content, key_norm = _content(key, beta, memory, norms, nmask)
    prev = tl.load(prev_ptr + nidx, mask=nv, other=0.0)
    shifted = _shifted(gated_ptr, shift, nidx, nv, sidx, N, S)
    log_shifted = tl.where(nmask, tl.log(shifted + _EPS), 0.0)
    # sharpening: w = softmax(gamma log(w~ + eps))
    grad_z = weights * (grad_w - tl.sum(weights * grad_w, axis=0))
    grad_gamma = tl.sum(grad_z * log_shifted, axis=0)
    grad_shifted = tl.where(nmask, gamma * grad_z / (shifted + _EPS), 0.0)
    tl.store(scratch_ptr + nidx, grad_shifted, mask=nv)
    tl.debug_barrier()  # d w~ is read back at other slots
    # circular shift: d s(m) = sum_i d w~(i) w^g(i - k_m); d w^g(j) = sum_m s(m) d w~(j + k_m)
    grad_shift = tl.zeros_like(shift)
    grad_gated = tl.zeros_like(grad_shifted)
    for m in range(S):
        reach = m - S // 2
        back = (nidx - reach + N) % N
        ahead = (nidx + reach + N) % N
        gated_back = tl.load(gated_ptr + back, mask=nv, other=0.0)
        grad_shift = tl.where(sidx == m, tl.sum(grad_shifted * gated_back, axis=0), grad_shift)
        grad_ahead = tl.load(scratch_ptr + ahead, mask=nv, other=0.0)
        grad_gated += tl.sum(tl.where(sidx == m, shift, 0.0), axis=0) * grad_ahead
    # interpolation: w^g = w_prev + g (w^c - w_prev)
    grad_gate = tl.sum((content - prev) * grad_gated, axis=0)
    grad_content = gate * grad_gated
    grad_prev = grad_gated - grad_content
    # content weights and the cosine similarity
    grad_key, grad_beta, grad_memory = _content_backward(
        grad_content, content, similarity, key, key_norm, beta, memory, norms
    )
    # back to the raw parameters: softplus' = sigmoid, sigmoid' = g (1 - g), softmax
    grad_shift_raw = shift * (grad_shift - tl.sum(shift * grad_shift, axis=0))
    tl.store(dpbase + base + widx, grad_key, mask=wv)
    tl.store(dpbase + base + W, grad_beta * _sigmoid(beta_raw), mask=valid)
    tl.store(dpbase + base + W + 1, grad_gate * gate * (1.0 - gate), mask=valid)
    tl.store(dpbase + base + W + 2 + sidx, grad_shift_raw, mask=sv)
    tl.store(dpbase + base + W + 2 + S, grad_gamma * _sigmoid(gamma_raw), mask=valid)
    return grad_memory, grad_prev


# ---------------------------------------------------------------- the erase/add write


@triton.jit
def _erase(pbase, ebase, head, widx, wv, W: tl.constexpr):
    """Write head ``head``'s erase vector e = sigmoid(raw) (W,); its block starts at ``ebase``
    of the row's head parameters, after every head's addressing block."""
    return _sigmoid(tl.load(pbase + ebase + head * 2 * W + widx, mask=wv, other=0.0))


@triton.jit
def _add(pbase, ebase, head, widx, wv, W: tl.constexpr):
    """Write head ``head``'s add vector a (W,), after its erase vector."""
    return tl.load(pbase + ebase + head * 2 * W + W + widx, mask=wv, other=0.0)


@triton.jit
def _kept(w, erase):
    """What one head's erase keeps of every cell: 1 - w e^T (N, W)."""
    return 1.0 - w[:, None] * erase[None, :]


# ---------------------------------------------------------------- forward


@triton.jit
def ntm_forward_kernel(
    xp,  # (B, T, G) x_proj
    w_read,  # (G, R W)
    w_rec,  # (G, D); any pointer for the feed-forward controller
    w_head,  # (P, D)
    b_head,  # (P,)
    hs,  # (T + 1 or 2, B, D), row 0 the initial state
    cs,  # (T + 1 or 2, B, D)
    reads,  # (T + 1 or 2, B, R W)
    mem,  # (T + 1 or 2, B, N, W)
    rws,  # (T + 1 or 2, B, R, N)
    wws,  # (T + 1 or 2, B, H, N)
    gates_rec,  # (T or 1, B, G) activated gates
    params_rec,  # (T or 1, B, P) raw head parameters
    gated_rec,  # (T or 1, B, H + R, N) w^g
    out,  # (B, T, D + R W) features
    B,
    T,
    D: tl.constexpr,
    G: tl.constexpr,
    R: tl.constexpr,
    H: tl.constexpr,
    N: tl.constexpr,
    W: tl.constexpr,
    S: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    WP: tl.constexpr,
    SP: tl.constexpr,
    KIND: tl.constexpr,
    PNR: tl.constexpr,
    KEEP: tl.constexpr,
    BLOCK_B: tl.constexpr,
    KC: tl.constexpr,
):
    RW: tl.constexpr = R * W
    F: tl.constexpr = D + R * W
    K: tl.constexpr = H + R
    B = _wide(B)  # every offset made with it is int64
    pid = tl.program_id(0)
    rows, rmask, dcol, dmask, rcol, rwmask, pcol, pmask = _tile_columns(
        pid, B, D, RW, P, DP, RWP, PP, BLOCK_B
    )
    nidx, nmask, widx, wmask, sidx, tile_mem, slot = _memory_columns(N, W, NP, WP, SP)
    for t in range(T):
        if KEEP:
            now = t
            nxt = t + 1
            rec = t
        else:
            now = t % 2
            nxt = (t + 1) % 2
            rec = 0
        # ---- (i) the controller and the head layer, for the tile; it reads r_{t-1}, h_{t-1}
        # and c_{t-1} from their state rows (the previous step wrote them, behind a barrier)
        _controller_forward(
            xp + t * G, T * G, reads + now * B * RW, hs + now * B * D, cs + now * B * D, w_read, w_rec,
            w_head, b_head, gates_rec + rec * B * G, hs + nxt * B * D, cs + nxt * B * D, out + t * F, T * F,
            params_rec + rec * B * P, rows, rmask,
            D, G, RW, P, DP, RWP, PP, KIND, 0, PNR, False, KC,
        )  # fmt: skip
        tl.debug_barrier()  # the rows' phase reads p_t
        # ---- (ii)-(iii) the memory, row by row
        for bi in range(BLOCK_B):
            row, valid, nv, wv, sv, tv = _row_masks(
                pid, bi, B, nidx, nmask, widx, wmask, sidx, tile_mem, S, BLOCK_B
            )
            pbase = params_rec + (rec * B + row) * P
            gbase_row = gated_rec + (rec * B + row) * K * N
            memory = tl.load(mem + (now * B + row) * N * W + slot, mask=tv, other=0.0)
            norms = _slot_norms(memory)
            keep = tl.full((NP, WP), 1.0, memory.dtype)
            added = tl.zeros_like(memory)
            ebase = K * (W + 3 + S)
            for hd in range(H):  # (ii) every write head addresses M_{t-1}
                w = _address(
                    pbase,
                    hd,
                    memory,
                    norms,
                    wws + ((now * B + row) * H + hd) * N,
                    gbase_row + hd * N,
                    valid,
                    nidx,
                    nmask,
                    nv,
                    widx,
                    wv,
                    sidx,
                    sv,
                    N,
                    W,
                    S,
                )
                tl.store(wws + ((nxt * B + row) * H + hd) * N + nidx, w, mask=nv)
                erase = _erase(pbase, ebase, hd, widx, wv, W)
                add = _add(pbase, ebase, hd, widx, wv, W)
                keep = keep * _kept(w, erase)
                added += w[:, None] * add[None, :]
            memory = memory * keep + added  # M_t
            tl.store(mem + (nxt * B + row) * N * W + slot, memory, mask=tv)
            norms = _slot_norms(memory)
            for r in range(R):  # (iii) every read head addresses M_t and reads
                w = _address(
                    pbase,
                    H + r,
                    memory,
                    norms,
                    rws + ((now * B + row) * R + r) * N,
                    gbase_row + (H + r) * N,
                    valid,
                    nidx,
                    nmask,
                    nv,
                    widx,
                    wv,
                    sidx,
                    sv,
                    N,
                    W,
                    S,
                )
                tl.store(rws + ((nxt * B + row) * R + r) * N + nidx, w, mask=nv)
                read = tl.sum(w[:, None] * memory, axis=0)
                tl.store(reads + (nxt * B + row) * RW + r * W + widx, read, mask=wv)
                tl.store(out + (row * T + t) * F + D + r * W + widx, read, mask=wv)  # (iv)
        tl.debug_barrier()  # the next step's tile phase reads r_t


# ---------------------------------------------------------------- backward


@triton.jit
def ntm_backward_kernel(
    w_read,  # (G, R W)
    w_rec,  # (G, D)
    w_head,  # (P, D)
    hs,  # (T + 1, B, D)
    cs,
    reads,  # unused: the reads enter only through the weight gradients
    mem,  # (T + 1, B, N, W)
    rws,  # (T + 1, B, R, N)
    wws,  # (T + 1, B, H, N)
    gates_rec,  # (T, B, G)
    params_rec,  # (T, B, P)
    gated_rec,  # (T, B, H + R, N)
    out,  # (B, T, D + R W) the forward's features (h_out for the pnr controllers)
    d_out,  # (B, T, D + R W)
    d_h,  # (B, D) in: of the final h; out: of h_0
    d_c,  # (B, D) likewise
    g_r,  # (B, R W) in: of the final r; out: of r_0 (carried between steps)
    g_m,  # (2, B, N, W) row 0 in: of the final M; rows in turn; row T % 2 out: of M_0
    g_wr,  # (2, B, R, N) likewise for w^r
    g_ww,  # (2, B, H, N) likewise for w^w
    scratch,  # (B, H + R, N)
    d_xp,  # (T, B, G) out
    d_rec,  # (T, B, G) out (pnr controllers only)
    d_params,  # (T, B, P) out
    B,
    T,
    D: tl.constexpr,
    G: tl.constexpr,
    R: tl.constexpr,
    H: tl.constexpr,
    N: tl.constexpr,
    W: tl.constexpr,
    S: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    WP: tl.constexpr,
    SP: tl.constexpr,
    KIND: tl.constexpr,
    PNR: tl.constexpr,
    BLOCK_B: tl.constexpr,
    KC: tl.constexpr,
):
    RW: tl.constexpr = R * W
    F: tl.constexpr = D + R * W
    K: tl.constexpr = H + R
    B = _wide(B)  # every offset made with it is int64
    pid = tl.program_id(0)
    rows, rmask, dcol, dmask, rcol, rwmask, pcol, pmask = _tile_columns(
        pid, B, D, RW, P, DP, RWP, PP, BLOCK_B
    )
    nidx, nmask, widx, wmask, sidx, tile_mem, slot = _memory_columns(N, W, NP, WP, SP)
    g_h = _tile_load(d_h, rows, rmask, D, 0, dcol, dmask)
    g_c = _tile_load(d_c, rows, rmask, D, 0, dcol, dmask)
    for back in range(T):
        t = T - 1 - back
        src = back % 2  # the carried gradients: read row src, write row 1 - src
        dst = 1 - src
        # ---- (iii) and (ii) backwards, row by row
        for bi in range(BLOCK_B):
            row, valid, nv, wv, sv, tv = _row_masks(
                pid, bi, B, nidx, nmask, widx, wmask, sidx, tile_mem, S, BLOCK_B
            )
            pbase = params_rec + (t * B + row) * P
            dpbase = d_params + (t * B + row) * P
            gbase_row = gated_rec + (t * B + row) * K * N
            sbase_row = scratch + row * K * N
            old = tl.load(mem + (t * B + row) * N * W + slot, mask=tv, other=0.0)
            new = tl.load(mem + ((t + 1) * B + row) * N * W + slot, mask=tv, other=0.0)
            norms_old = _slot_norms(old)
            norms_new = _slot_norms(new)
            grad_new = tl.load(g_m + (src * B + row) * N * W + slot, mask=tv, other=0.0)
            for r in range(R):  # r = w^r M_t, then the read addressing on M_t
                w = tl.load(rws + (((t + 1) * B + row) * R + r) * N + nidx, mask=nv, other=0.0)
                grad_read = tl.load(d_out + (row * T + t) * F + D + r * W + widx, mask=wv, other=0.0)
                grad_read += tl.load(g_r + row * RW + r * W + widx, mask=wv, other=0.0)
                grad_w = tl.load(g_wr + ((src * B + row) * R + r) * N + nidx, mask=nv, other=0.0)
                grad_w += tl.sum(new * grad_read[None, :], axis=1)
                grad_new += w[:, None] * grad_read[None, :]
                grad_mem, grad_prev = _address_backward(
                    grad_w,
                    pbase,
                    dpbase,
                    H + r,
                    new,
                    norms_new,
                    rws + ((t * B + row) * R + r) * N,
                    w,
                    gbase_row + (H + r) * N,
                    sbase_row + (H + r) * N,
                    valid,
                    nidx,
                    nmask,
                    nv,
                    widx,
                    wv,
                    sidx,
                    sv,
                    N,
                    W,
                    S,
                )
                grad_new += grad_mem
                tl.store(g_wr + ((dst * B + row) * R + r) * N + nidx, grad_prev, mask=nv)
            # the erase/add write: M_t = M_{t-1} o prod_h f_h + sum_h w_h a_h^T, f_h = 1 - w_h e_h^T
            ebase = K * (W + 3 + S)
            keep = tl.full((NP, WP), 1.0, old.dtype)
            for hd in range(H):
                w = tl.load(wws + (((t + 1) * B + row) * H + hd) * N + nidx, mask=nv, other=0.0)
                keep = keep * _kept(w, _erase(pbase, ebase, hd, widx, wv, W))
            grad_old = grad_new * keep
            grad_keep = grad_new * old
            for hd in range(H):
                w = tl.load(wws + (((t + 1) * B + row) * H + hd) * N + nidx, mask=nv, other=0.0)
                erase = _erase(pbase, ebase, hd, widx, wv, W)
                add = _add(pbase, ebase, hd, widx, wv, W)
                others = tl.full((NP, WP), 1.0, old.dtype)  # prod over the other heads, no division
                for o in range(H):
                    w_o = tl.load(wws + (((t + 1) * B + row) * H + o) * N + nidx, mask=nv, other=0.0)
                    factor = _kept(w_o, _erase(pbase, ebase, o, widx, wv, W))
                    others = others * tl.where(o == hd, 1.0, factor)
                grad_factor = grad_keep * others
                grad_w = tl.load(g_ww + ((src * B + row) * H + hd) * N + nidx, mask=nv, other=0.0)
                grad_w += tl.sum(add[None, :] * grad_new - grad_factor * erase[None, :], axis=1)
                grad_erase = -tl.sum(grad_factor * w[:, None], axis=0)
                grad_add = tl.sum(w[:, None] * grad_new, axis=0)
                ebase_hd = dpbase + ebase + hd * 2 * W
                tl.store(ebase_hd + widx, grad_erase * erase * (1.0 - erase), mask=wv)
                tl.store(ebase_hd + W + widx, grad_add, mask=wv)
                # the write addressing on M_{t-1}
                grad_mem, grad_prev = _address_backward(
                    grad_w,
                    pbase,
                    dpbase,
                    hd,
                    old,
                    norms_old,
                    wws + ((t * B + row) * H + hd) * N,
                    w,
                    gbase_row + hd * N,
                    sbase_row + hd * N,
                    valid,
                    nidx,
                    nmask,
                    nv,
                    widx,
                    wv,
                    sidx,
                    sv,
                    N,
                    W,
                    S,
                )
                grad_old += grad_mem
                tl.store(g_ww + ((dst * B + row) * H + hd) * N + nidx, grad_prev, mask=nv)
            tl.store(g_m + (dst * B + row) * N * W + slot, grad_old, mask=tv)
        tl.debug_barrier()  # the tile phase reads d p_t
        # ---- (i) the head layer and the controller backwards, for the tile; the products read
        # their input back from the gradients this program wrote (behind a barrier)
        g_h, g_c, grad_r = _controller_backward(
            g_h, g_c, d_params + t * B * P, w_head, d_out + t * F, out + t * F, T * F,
            gates_rec + t * B * G, cs + t * B * D, cs + (t + 1) * B * D, d_xp + t * B * G,
            d_rec + t * B * G, w_read, w_rec, rows, rmask, dcol, dmask,
            D, G, RW, P, DP, RWP, PP, KIND, 0, PNR, KC,
        )  # fmt: skip
        _tile_store(g_r, rows, rmask, RW, 0, rcol, rwmask, grad_r)
        tl.debug_barrier()  # the rows' phase of the step before reads d r_{t-1}
    _tile_store(d_h, rows, rmask, D, 0, dcol, dmask, g_h)
    _tile_store(d_c, rows, rmask, D, 0, dcol, dmask, g_c)
