"""Triton kernels of the D-NTM's whole sequence: ops/dntm/reference.py's loop, forward and
backward, each one kernel launch with the time loop inside (as ops/ntm/triton_kernels.py).

They cover every addressing mode (the samples from the op's Exp(1) draws, as the other
backends take them) with one addressing step (J = 1) and learned writes, the GRU and the
feed-forward (tanh) controller, LRU on or off, the NOP cell, write keys over [A; C] or C, any
heads; the op (triton_sequence.py) refuses the rest.

One program per tile of BLOCK_B batch rows (chosen at launch from the batch and the GPU's
SMs: triton_math.rows_per_program). Each step has two phases:

    tile phase   the controller for the tile's rows at once (eqs. 1-2), then the head layer
                 p_t = W_p h_t + b_p. Each product reads its input (φ_{t-1}, h_{t-1}, h_t;
                 in the backward the gradients just written) back from memory BLOCK_K
                 columns at a time (triton_math.chunked_dot, as the NTM's kernels): products
                 over whole (BLOCK_B, D) tiles held W_h's (D, D) blocks in registers and
                 spilled. The forward makes h_t and p_t BLOCK_K columns at a time and stores
                 the GRU's gates as it makes them; neither h nor its gradient is carried in
                 registers across the row phase
    row phase    row by row: the read and write weightings on M_{t-1} = [A; C_{t-1}]
                 (eqs. 10-13), the reads (eq. 5) and the write (eqs. 3, 4, 6) on that row's
                 content C (N', d_c), which lives in global memory

and the phases meet through global memory (p_t, φ_t) behind a barrier. The forward keeps, for
the backward, the states over time (h, φ, C, v^r, v^w), the GRU's gates, the raw head
parameters and the weightings w (without a backward or a trace to come: two state rows in
turn and one step's records); the backward runs the time loop in reverse, recomputes the
addressing from them and writes the gradients of every step's pre-activations (the input
projection, W_h h_{t-1} + b_h, the head layer's output) and of A per row; the weight gradients
are then one matrix product each over all B T steps (triton_sequence.py).

Sizes that are not powers of two are padded (masks on every load and store); every tl.dot has
its inner and output sizes >= 16 on a GPU (BLOCK_K = 16 of the input, the output padded to 16
at least) and BLOCK_B rows, 1 to 16. Offsets that multiply time, batch and width are int64
(``B`` is widened first: triton_math.wide). float32 on the GPU (tl.dot in IEEE precision, not
TF32); float64 only in Triton's interpreter, where the tests check gradients.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mannlab.ops.triton_math import BLOCK_K
from mannlab.ops.triton_math import DTYPES as DTYPES  # float64 only in the interpreter
from mannlab.ops.triton_math import chunked_dot as _chunked_dot
from mannlab.ops.triton_math import gate_pre as _gate_pre
from mannlab.ops.triton_math import head_layer as _head_layer
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

#: the columns of each product's input per tl.dot (triton_math.chunked_dot)
_KC = tl.constexpr(BLOCK_K)


# the addressing modes (records.MODES)
_SOFT = tl.constexpr(0)
_ARGMAX = tl.constexpr(2)
_GUMBEL = tl.constexpr(3)


@triton.jit
def _first_max_one_hot(w, nidx, nmask, NP: tl.constexpr):
    """The one-hot of the first of w's maxima (torch.argmax's choice)."""
    w = tl.where(nmask, w, float("-inf"))
    best = tl.min(tl.where(w == tl.max(w, axis=0), nidx, NP), axis=0)
    return tl.where(nidx == best, 1.0, 0.0).to(w.dtype)


@triton.jit
def _draws(draws, offset, nidx, nv, like, NOISY: tl.constexpr):
    """A head's Exp(1) draws E (N',) at ``offset`` (ones where the mode takes none)."""
    if NOISY:
        out = tl.load(draws + offset + nidx, mask=nv, other=1.0)
    else:
        out = like * 0.0 + 1.0
    return out


@triton.jit
def _used(w, draw, nidx, nmask, NP: tl.constexpr, MODE: tl.constexpr):
    """The weighting a head uses (section 4): w ("soft"), the one-hot of argmax_i w_i / E_i
    (a sample: "sample", and "gumbel"'s forward) or of argmax_i w_i ("argmax")."""
    if MODE == _SOFT:
        out = w
    elif MODE == _ARGMAX:
        out = _first_max_one_hot(w, nidx, nmask, NP)
    else:
        out = _first_max_one_hot(w / draw, nidx, nmask, NP)
    return out


@triton.jit
def _accumulate(ptr, value, mask):
    tl.store(ptr, tl.load(ptr, mask=mask, other=0.0) + value, mask=mask)


@triton.jit
def _unit(x, norm):
    """x / |x|, 0 for the zero vector (torch's norm has gradient 0 there)."""
    return tl.where(norm > 0.0, x / tl.where(norm > 0.0, norm, 1.0), 0.0)


# ---------------------------------------------------------------- one head's weighting


@triton.jit
def _similarity(ka, kc, A, C, eps):
    """S(k, m_i) = k . m_i / (|k| |m_i| + ε) of the key [k_a; k_c] with every cell [A_i; C_i]
    (eqs. 10-11), with the dots and both norms."""
    dots = tl.sum(A * ka[None, :], axis=1) + tl.sum(C * kc[None, :], axis=1)
    key_norm = tl.sqrt(tl.sum(ka * ka, axis=0) + tl.sum(kc * kc, axis=0))
    cell_norms = tl.sqrt(tl.sum(A * A, axis=1) + tl.sum(C * C, axis=1))
    return dots / (key_norm * cell_norms + eps), dots, key_norm, cell_norms


@triton.jit
def _weighting(ka, kc, A, C, beta_raw, gamma_raw, v_prev, nmask, eps, decay, LRU: tl.constexpr):
    """Eqs. 10-13 for one head: (w, v_t)."""
    similarity, _, _, _ = _similarity(ka, kc, A, C, eps)
    logits = (_softplus(beta_raw) + 1.0) * similarity  # eq. 9: β >= 1
    if LRU:
        v_new = decay * v_prev + (1.0 - decay) * logits  # eq. 13
        logits = logits - _sigmoid(gamma_raw) * v_prev  # eq. 12
    else:
        v_new = v_prev
    return _softmax(logits, nmask), v_new


@triton.jit
def _weighting_backward(
    grad_w,
    grad_used,
    draw,
    inverse_temperature,
    grad_v_new,
    w,
    ka,
    kc,
    A,
    C,
    beta_raw,
    gamma_raw,
    v_prev,
    nmask,
    eps,
    decay,
    LRU: tl.constexpr,
    MODE: tl.constexpr,
):
    """Backward of ``_weighting`` and ``_used`` from the gradients of w, of the used weighting
    and of v_t (v_t takes none from z_t): the gradients of k_a, k_c, A, C, the raw β and γ,
    and of v_{t-1}. A one-hot passes no gradient, but straight-through's ("gumbel") passes
    that of softmax((l - log E) / τ), l the logits of w."""
    similarity, dots, key_norm, cell_norms = _similarity(ka, kc, A, C, eps)
    beta = _softplus(beta_raw) + 1.0
    if MODE == _SOFT:
        grad_w += grad_used
    grad_logits = tl.where(nmask, w * (grad_w - tl.sum(w * grad_w, axis=0)), 0.0)
    if MODE == _GUMBEL:
        logits = beta * similarity
        if LRU:
            logits = logits - _sigmoid(gamma_raw) * v_prev
        relaxed = _softmax((logits - tl.log(draw)) * inverse_temperature, nmask)
        grad_relaxed = relaxed * (grad_used - tl.sum(relaxed * grad_used, axis=0))
        grad_logits += tl.where(nmask, inverse_temperature * grad_relaxed, 0.0)
    if LRU:
        gamma = _sigmoid(gamma_raw)
        grad_gamma_raw = -tl.sum(grad_logits * v_prev, axis=0) * gamma * (1.0 - gamma)
        grad_v_prev = decay * grad_v_new - gamma * grad_logits
    else:
        grad_gamma_raw = tl.sum(grad_logits * 0.0, axis=0)
        grad_v_prev = grad_v_new
    grad_beta_raw = tl.sum(grad_logits * similarity, axis=0) * _sigmoid(beta_raw)
    grad_sim = beta * grad_logits
    den = key_norm * cell_norms + eps
    grad_dots = grad_sim / den
    grad_den = -grad_sim * dots / (den * den)
    grad_key_norm = tl.sum(grad_den * cell_norms, axis=0)
    grad_cell_norms = grad_den * key_norm
    grad_ka = tl.sum(grad_dots[:, None] * A, axis=0) + grad_key_norm * _unit(ka, key_norm)
    grad_kc = tl.sum(grad_dots[:, None] * C, axis=0) + grad_key_norm * _unit(kc, key_norm)
    grad_A = grad_dots[:, None] * ka[None, :] + grad_cell_norms[:, None] * _unit(A, cell_norms[:, None])
    grad_C = grad_dots[:, None] * kc[None, :] + grad_cell_norms[:, None] * _unit(C, cell_norms[:, None])
    return grad_ka, grad_kc, grad_A, grad_C, grad_beta_raw, grad_gamma_raw, grad_v_prev


# ---------------------------------------------------------------- the head parameters' blocks


@triton.jit
def _param_offsets(R: tl.constexpr, H: tl.constexpr, W: tl.constexpr, KW: tl.constexpr, DC: tl.constexpr):
    """Where the blocks of a row's head parameters p_t start after the read keys (R W wide, at
    0), as records.head_sizes lays them out: the write keys (H KW), β and γ (R + H each), e
    (H d_c), α_h (H), W_m h + b_m (H d_c). (Compile-time constants, folded; a Triton call
    returns them as scalars, not constexprs.)"""
    keys = R * W
    strengths = keys + H * KW
    gates = strengths + R + H
    erase = gates + R + H
    alpha = erase + H * DC
    return keys, strengths, gates, erase, alpha, alpha + H


# ---------------------------------------------------------------- the write's head values


@triton.jit
def _write_values(
    pbase,
    xbase,
    hd,
    valid,
    dcidx,
    dcv,
    OFF_E,
    OFF_A,
    OFF_M,
    PC: tl.constexpr,
    H: tl.constexpr,
    DC: tl.constexpr,
):
    """Write head ``hd``'s e = σ(.), α = σ(α_h + v_α^T x) (eq. 3), the candidate's
    pre-activation W_m h + b_m + α W_x x (eq. 4) and W_x x."""
    erase = _sigmoid(tl.load(pbase + OFF_E + hd * DC + dcidx, mask=dcv, other=0.0))
    alpha = _sigmoid(
        tl.load(pbase + OFF_A + hd, mask=valid, other=0.0)
        + tl.load(xbase + PC + H * DC + hd, mask=valid, other=0.0)
    )
    x_in = tl.load(xbase + PC + hd * DC + dcidx, mask=dcv, other=0.0)
    pre = tl.load(pbase + OFF_M + hd * DC + dcidx, mask=dcv, other=0.0) + alpha * x_in
    return erase, alpha, pre, x_in


# ---------------------------------------------------------------- the controller's tile phase


@triton.jit
def _tile_indices(
    pid,
    B,
    D,
    RW,
    P,
    N,
    DA,
    DC,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    DAP: tl.constexpr,
    DCP: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """This program's batch rows (int64) and the padded column indices of h, the reads, the
    head parameters, the slots and the address and content parts, each with its mask."""
    rows = (pid * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    dcol = tl.arange(0, DP)
    rcol = tl.arange(0, RWP)
    pcol = tl.arange(0, PP)
    nidx = tl.arange(0, NP)
    daidx = tl.arange(0, DAP)
    dcidx = tl.arange(0, DCP)
    return (
        rows,
        rows < B,
        dcol,
        dcol < D,
        rcol,
        rcol < RW,
        pcol,
        pcol < P,
        nidx,
        nidx < N,
        daidx,
        daidx < DA,
        dcidx,
        dcidx < DC,
    )


@triton.jit
def _controller_forward(
    x_rows,
    phi_rows,
    h_rows,
    w_read,
    w_rec,
    b_rec,
    w_head,
    b_head,
    gates,
    h_next,
    out_t,
    out_stride,
    params,
    rows,
    rmask,
    D: tl.constexpr,
    RW: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    GRU: tl.constexpr,
):
    """The controller (eqs. 1-2) and the head layer p_t = W_p h_t + b_p for the tile. Row m of
    W x_t + b, φ_{t-1} and h_{t-1} starts at x_rows[m], phi_rows[m], h_rows[m] (stored behind a
    barrier: the products read them back, _KC columns at a time). h_t and p_t are made _KC
    columns at a time too (the GRU is elementwise past its products): products with outputs
    as wide as D or P spilled more (sm_90, benchmarks/triton_resources.py). Stores the GRU's
    r, u, n and (W_h h + b_h)'s n block at ``gates`` (4 D-wide rows), h_t at ``h_next`` and to
    the features' block at ``out_t``, p_t at ``params``; the caller puts a barrier after it
    before reading p_t."""
    for o0 in range(0, DP, _KC):
        col = o0 + tl.arange(0, _KC)
        cmask = col < D
        if GRU:
            _, pre = _gate_pre(
                x_rows, phi_rows, h_rows, rmask, w_read, w_rec, 0, o0, D, RW, DP, RWP, True, _KC
            )
            reset = _sigmoid(pre + tl.load(b_rec + col, mask=cmask, other=0.0)[None, :])
            _tile_store(gates, rows, rmask, 4 * D, 0, col, cmask, reset)
            rec_n = _chunked_dot(h_rows, rmask, D, w_rec + (2 * D + o0) * D, 1, D, D - o0, _KC, DP, _KC)
            rec_n += tl.load(b_rec + 2 * D + col, mask=cmask, other=0.0)[None, :]
            _tile_store(gates, rows, rmask, 4 * D, 3 * D, col, cmask, rec_n)
            pre, _ = _gate_pre(
                x_rows, phi_rows, h_rows, rmask, w_read, w_rec, 2, o0, D, RW, DP, RWP, False, _KC
            )
            new = _tanh(pre + reset * rec_n)
            _tile_store(gates, rows, rmask, 4 * D, 2 * D, col, cmask, new)
            _, pre = _gate_pre(
                x_rows, phi_rows, h_rows, rmask, w_read, w_rec, 1, o0, D, RW, DP, RWP, True, _KC
            )
            update = _sigmoid(pre + tl.load(b_rec + D + col, mask=cmask, other=0.0)[None, :])
            _tile_store(gates, rows, rmask, 4 * D, D, col, cmask, update)
            h_prev = tl.load(h_rows[:, None] + col[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0)
            h = new + update * (h_prev - new)  # eq. 1: (1 - u) n + u h_{t-1}
        else:
            pre, _ = _gate_pre(
                x_rows, phi_rows, h_rows, rmask, w_read, w_rec, 0, o0, D, RW, DP, RWP, False, _KC
            )
            h = _tanh(pre)  # eq. 2
        _tile_store(out_t, rows, rmask, out_stride, 0, col, cmask, h)
        # h_{t-1}'s row is read by every slice's products: h_t goes to its own row
        _tile_store(h_next, rows, rmask, D, 0, col, cmask, h)
    tl.debug_barrier()  # the head layer's products read h_t back
    _head_layer(h_next, w_head, b_head, params, rows, rmask, D, P, DP, PP, _KC)


@triton.jit
def _controller_backward(
    grad_h,
    d_params_t,
    w_head,
    d_out_t,
    out_stride,
    gates,
    h_prev,
    h_now,
    d_xp_t,
    d_rec_t,
    w_read,
    w_rec,
    rows,
    rmask,
    dcol,
    dmask,
    D: tl.constexpr,
    PC: tl.constexpr,
    X: tl.constexpr,
    RW: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    GRU: tl.constexpr,
):
    """Backward of ``_controller_forward`` at one step, for the tile: from the carried gradient
    of h_t, those of p_t (P-wide rows at ``d_params_t``, stored behind a barrier) and of the
    features (``d_out_t``, rows ``out_stride`` apart), writes the gradients of W x_t + b (the
    first PC columns of the X-wide rows at ``d_xp_t``) and, for the GRU, of W_h h_{t-1} + b_h
    (3 D-wide rows at ``d_rec_t``); returns those of h_{t-1} and φ_{t-1}. The products with
    W_h and W_r read the gradients just stored back, _KC columns at a time."""
    PCK: tl.constexpr = (PC + _KC - 1) // _KC * _KC  # PC in whole chunks
    grad_h += _chunked_dot(d_params_t + rows * P, rmask, P, w_head, D, 1, D, DP, PP, _KC)
    grad_h += _tile_load(d_out_t, rows, rmask, out_stride, 0, dcol, dmask)
    if GRU:
        update = _tile_load(gates, rows, rmask, 4 * D, D, dcol, dmask)
        new = _tile_load(gates, rows, rmask, 4 * D, 2 * D, dcol, dmask)
        grad_new_pre = grad_h * (1.0 - update) * (1.0 - new * new)
        grad_update_pre = grad_h * (_tile_load(h_prev, rows, rmask, D, 0, dcol, dmask) - new)
        grad_update_pre = grad_update_pre * update * (1.0 - update)
        grad_h = grad_h * update  # of h_{t-1} through eq. 1's u h_{t-1}
        _tile_store(d_xp_t, rows, rmask, X, D, dcol, dmask, grad_update_pre)
        _tile_store(d_rec_t, rows, rmask, 3 * D, D, dcol, dmask, grad_update_pre)
        _tile_store(d_xp_t, rows, rmask, X, 2 * D, dcol, dmask, grad_new_pre)
        reset = _tile_load(gates, rows, rmask, 4 * D, 0, dcol, dmask)
        _tile_store(d_rec_t, rows, rmask, 3 * D, 2 * D, dcol, dmask, grad_new_pre * reset)
        grad_reset_pre = grad_new_pre * _tile_load(gates, rows, rmask, 4 * D, 3 * D, dcol, dmask)
        grad_reset_pre = grad_reset_pre * reset * (1.0 - reset)
        _tile_store(d_xp_t, rows, rmask, X, 0, dcol, dmask, grad_reset_pre)
        _tile_store(d_rec_t, rows, rmask, 3 * D, 0, dcol, dmask, grad_reset_pre)
        tl.debug_barrier()  # the products below read the gradients just stored, across threads
        grad_h += _chunked_dot(d_rec_t + rows * 3 * D, rmask, 3 * D, w_rec, D, 1, D, DP, PCK, _KC)
    else:
        h = _tile_load(h_now, rows, rmask, D, 0, dcol, dmask)
        _tile_store(d_xp_t, rows, rmask, X, 0, dcol, dmask, grad_h * (1.0 - h * h))
        tl.debug_barrier()  # the product below reads the gradient just stored
        grad_h = tl.zeros_like(grad_h)  # the feed-forward h_t does not read h_{t-1}
    grad_phi = _chunked_dot(d_xp_t + rows * X, rmask, PC, w_read, RW, 1, RW, RWP, PCK, _KC)
    return grad_h, grad_phi


# ---------------------------------------------------------------- forward


@triton.jit
def dntm_forward_kernel(
    xp,  # (B, T, X) [W x_t + b (P_c) | W_x x_t (H d_c) | v_α^T x_t (H)]
    w_read,  # (P_c, R W)
    w_rec,  # (3 D, D); any pointer for the feed-forward controller
    b_rec,  # (3 D,)
    w_head,  # (P, D)
    b_head,  # (P,)
    address,  # (N', d_a)
    hs,  # (T + 1 or 2, B, D), row 0 the initial state
    phis,  # (T + 1 or 2, B, R W)
    contents,  # (T + 1 or 2, B, N', d_c)
    vrs,  # (T + 1 or 2, B, R, N')
    vws,  # (T + 1 or 2, B, H, N')
    gates_rec,  # (T or 1, B, 4 D) the GRU's r, u, n and (W_h h + b_h)'s n block
    params_rec,  # (T or 1, B, P) raw head parameters
    probs_rec,  # (T or 1, B, R + H, N') w
    out,  # (B, T, D + R W) features
    draws,  # (T, B (R + H) N') Exp(1) draws (modes "sample" and "gumbel"; else any pointer)
    B,
    T,
    eps,
    decay,
    D: tl.constexpr,
    PC: tl.constexpr,
    X: tl.constexpr,
    R: tl.constexpr,
    H: tl.constexpr,
    N: tl.constexpr,
    DA: tl.constexpr,
    DC: tl.constexpr,
    KW: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    DAP: tl.constexpr,
    DCP: tl.constexpr,
    GRU: tl.constexpr,
    LRU: tl.constexpr,
    NOP_CELL: tl.constexpr,
    MEMKEYS: tl.constexpr,
    MODE: tl.constexpr,
    NOISY: tl.constexpr,
    KEEP: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    W: tl.constexpr = DA + DC
    RW: tl.constexpr = R * W
    F: tl.constexpr = D + R * W
    K: tl.constexpr = R + H
    OFF_KW, OFF_B, OFF_G, OFF_E, OFF_A, OFF_M = _param_offsets(R, H, W, KW, DC)
    B = _wide(B)  # every offset made with it is int64
    pid = tl.program_id(0)
    rows, rmask, dcol, dmask, rcol, rwmask, pcol, pmask, nidx, nmask, daidx, damask, dcidx, dcmask = (
        _tile_indices(pid, B, D, RW, P, N, DA, DC, DP, RWP, PP, NP, DAP, DCP, BLOCK_B)
    )
    for t in range(T):
        if KEEP:  # every step's state and records, for the backward or the trace
            now = t
            nxt = t + 1
            rec = t
        else:  # two state rows in turn, one step's records
            now = t % 2
            nxt = (t + 1) % 2
            rec = 0
        # ---- the controller (eqs. 1-2) and the head layer, for the tile; the products read
        # φ_{t-1} and h_{t-1} from their state rows (the previous step wrote them, behind a barrier)
        _controller_forward(
            xp + (rows * T + t) * X, phis + (now * B + rows) * RW, hs + (now * B + rows) * D,
            w_read, w_rec, b_rec, w_head, b_head, gates_rec + rec * B * 4 * D, hs + nxt * B * D,
            out + t * F, T * F, params_rec + rec * B * P, rows, rmask, D, RW, P, DP, RWP, PP, GRU,
        )  # fmt: skip
        tl.debug_barrier()  # the rows' phase reads p_t
        # ---- the memory, row by row
        for bi in range(BLOCK_B):
            row = (pid * BLOCK_B + bi).to(tl.int64)
            valid = row < B
            # the masks of this row (a tensor mask & a scalar one fails in the interpreter)
            nv = nmask & ((nidx * 0 + row) < B)
            dav = damask & ((daidx * 0 + row) < B)
            dcv = dcmask & ((dcidx * 0 + row) < B)
            pbase = params_rec + (rec * B + row) * P
            xbase = xp + (row * T + t) * X
            cell_c = nidx[:, None] * DC + dcidx[None, :]
            mask_c = nv[:, None] & dcmask[None, :]
            A = tl.load(
                address + nidx[:, None] * DA + daidx[None, :], mask=nv[:, None] & damask[None, :], other=0.0
            )
            C = tl.load(contents + (now * B + row) * N * DC + cell_c, mask=mask_c, other=0.0)
            A_w = A * MEMKEYS  # the write keys' memory: [A; C], or C alone
            access = tl.where(nmask & (nidx != NOP_CELL), 1.0, 0.0).to(C.dtype)
            for k in range(R):  # the read heads: eqs. 10-13 on M_{t-1}, eq. 5
                ka = tl.load(pbase + k * W + daidx, mask=dav, other=0.0)
                kc = tl.load(pbase + k * W + DA + dcidx, mask=dcv, other=0.0)
                vbase = ((now * B + row) * R + k) * N
                w, v_new = _weighting(
                    ka,
                    kc,
                    A,
                    C,
                    tl.load(pbase + OFF_B + k, mask=valid, other=0.0),
                    tl.load(pbase + OFF_G + k, mask=valid, other=0.0),
                    tl.load(vrs + vbase + nidx, mask=nv, other=0.0),
                    nmask,
                    eps,
                    decay,
                    LRU,
                )
                tl.store(vrs + ((nxt * B + row) * R + k) * N + nidx, v_new, mask=nv)
                tl.store(probs_rec + ((rec * B + row) * K + k) * N + nidx, w, mask=nv)
                draw = _draws(draws, t * B * K * N + (row * R + k) * N, nidx, nv, w, NOISY)
                used = _used(w, draw, nidx, nmask, NP, MODE) * access
                phi_a = tl.sum(used[:, None] * A, axis=0)
                phi_c = tl.sum(used[:, None] * C, axis=0)
                pb = phis + (nxt * B + row) * RW + k * W
                tl.store(pb + daidx, phi_a, mask=dav)
                tl.store(pb + DA + dcidx, phi_c, mask=dcv)
                ob = out + (row * T + t) * F + D + k * W
                tl.store(ob + daidx, phi_a, mask=dav)
                tl.store(ob + DA + dcidx, phi_c, mask=dcv)
            keep = tl.full((NP, DCP), 1.0, C.dtype)
            added = tl.zeros_like(C)
            for hd in range(H):  # the write heads: eqs. 10-13 on M_{t-1} (or C_{t-1}), eqs. 3, 4, 6
                kbase = pbase + OFF_KW + hd * KW
                ka = tl.load(kbase + daidx, mask=dav & (daidx < DA * MEMKEYS), other=0.0)
                kc = tl.load(kbase + (KW - DC) + dcidx, mask=dcv, other=0.0)
                vbase = ((now * B + row) * H + hd) * N
                w, v_new = _weighting(
                    ka,
                    kc,
                    A_w,
                    C,
                    tl.load(pbase + OFF_B + R + hd, mask=valid, other=0.0),
                    tl.load(pbase + OFF_G + R + hd, mask=valid, other=0.0),
                    tl.load(vws + vbase + nidx, mask=nv, other=0.0),
                    nmask,
                    eps,
                    decay,
                    LRU,
                )
                tl.store(vws + ((nxt * B + row) * H + hd) * N + nidx, v_new, mask=nv)
                tl.store(probs_rec + ((rec * B + row) * K + R + hd) * N + nidx, w, mask=nv)
                draw = _draws(draws, t * B * K * N + B * R * N + (row * H + hd) * N, nidx, nv, w, NOISY)
                used = _used(w, draw, nidx, nmask, NP, MODE) * access
                erase, _, pre, _ = _write_values(
                    pbase, xbase, hd, valid, dcidx, dcv, OFF_E, OFF_A, OFF_M, PC, H, DC
                )
                keep = keep * (1.0 - used[:, None] * erase[None, :])
                added += used[:, None] * tl.maximum(pre, 0.0)[None, :]  # c̄ = ReLU(.)
            tl.store(contents + (nxt * B + row) * N * DC + cell_c, C * keep + added, mask=mask_c)
        tl.debug_barrier()  # the next step's tile phase reads φ_t


# ---------------------------------------------------------------- backward


@triton.jit
def dntm_backward_kernel(
    xp,  # (B, T, X)
    w_read,  # (P_c, R W)
    w_rec,  # (3 D, D)
    w_head,  # (P, D)
    address,  # (N', d_a)
    hs,  # (T + 1, B, D)
    contents,  # (T + 1, B, N', d_c)
    vrs,  # (T + 1, B, R, N')
    vws,  # (T + 1, B, H, N')
    gates_rec,  # (T, B, 4 D)
    params_rec,  # (T, B, P)
    probs_rec,  # (T, B, R + H, N')
    d_out,  # (B, T, D + R W)
    d_probs,  # (T, B, R + H, N') of the trace's w (read only with TRACE_GRADS)
    d_contents,  # (T, B, N', d_c) of the trace's C_t (likewise)
    g_h,  # (B, D) in: of the final h; out: of h_0
    g_phi,  # (B, R W) in: of the final φ; out: of φ_0
    g_c,  # (B, N', d_c) likewise for C
    g_vr,  # (B, R, N') likewise for v^r
    g_vw,  # (B, H, N') likewise for v^w
    d_address,  # (B, N', d_a) out: of A, per row
    d_xp,  # (T, B, X) out
    d_rec,  # (T, B, 3 D) out: of W_h h_{t-1} + b_h (GRU only)
    d_params,  # (T, B, P) in: of the trace's raw head parameters (or zeros); out: of p_t
    draws,  # (T, B (R + H) N') as the forward's
    B,
    T,
    eps,
    decay,
    inverse_temperature,
    D: tl.constexpr,
    PC: tl.constexpr,
    X: tl.constexpr,
    R: tl.constexpr,
    H: tl.constexpr,
    N: tl.constexpr,
    DA: tl.constexpr,
    DC: tl.constexpr,
    KW: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    DAP: tl.constexpr,
    DCP: tl.constexpr,
    GRU: tl.constexpr,
    LRU: tl.constexpr,
    NOP_CELL: tl.constexpr,
    MEMKEYS: tl.constexpr,
    MODE: tl.constexpr,
    NOISY: tl.constexpr,
    TRACE_GRADS: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    W: tl.constexpr = DA + DC
    RW: tl.constexpr = R * W
    F: tl.constexpr = D + R * W
    K: tl.constexpr = R + H
    OFF_KW, OFF_B, OFF_G, OFF_E, OFF_A, OFF_M = _param_offsets(R, H, W, KW, DC)
    B = _wide(B)  # every offset made with it is int64
    pid = tl.program_id(0)
    rows, rmask, dcol, dmask, rcol, rwmask, pcol, pmask, nidx, nmask, daidx, damask, dcidx, dcmask = (
        _tile_indices(pid, B, D, RW, P, N, DA, DC, DP, RWP, PP, NP, DAP, DCP, BLOCK_B)
    )
    for back in range(T):
        t = T - 1 - back
        # ---- the memory backwards, row by row
        for bi in range(BLOCK_B):
            row = (pid * BLOCK_B + bi).to(tl.int64)
            valid = row < B
            nv = nmask & ((nidx * 0 + row) < B)
            dav = damask & ((daidx * 0 + row) < B)
            dcv = dcmask & ((dcidx * 0 + row) < B)
            pbase = params_rec + (t * B + row) * P
            dpbase = d_params + (t * B + row) * P
            xbase = xp + (row * T + t) * X
            dxbase = d_xp + (t * B + row) * X
            cell_c = nidx[:, None] * DC + dcidx[None, :]
            mask_c = nv[:, None] & dcmask[None, :]
            cell_a = nidx[:, None] * DA + daidx[None, :]
            mask_a = nv[:, None] & damask[None, :]
            A = tl.load(address + cell_a, mask=mask_a, other=0.0)
            C = tl.load(contents + (t * B + row) * N * DC + cell_c, mask=mask_c, other=0.0)
            A_w = A * MEMKEYS
            access = tl.where(nmask & (nidx != NOP_CELL), 1.0, 0.0).to(C.dtype)
            grad_new = tl.load(g_c + row * N * DC + cell_c, mask=mask_c, other=0.0)  # of C_t
            if TRACE_GRADS:
                grad_new += tl.load(d_contents + (t * B + row) * N * DC + cell_c, mask=mask_c, other=0.0)
            grad_A = tl.zeros_like(A)
            # the write, eq. 6: C_t = C_{t-1} o prod_h (1 - u_h e_h^T) + sum_h u_h c̄_h^T
            keep = tl.full((NP, DCP), 1.0, C.dtype)
            for hd in range(H):
                w = tl.load(probs_rec + ((t * B + row) * K + R + hd) * N + nidx, mask=nv, other=0.0)
                draw = _draws(draws, t * B * K * N + B * R * N + (row * H + hd) * N, nidx, nv, w, NOISY)
                used = _used(w, draw, nidx, nmask, NP, MODE) * access
                erase, _, _, _ = _write_values(
                    pbase, xbase, hd, valid, dcidx, dcv, OFF_E, OFF_A, OFF_M, PC, H, DC
                )
                keep = keep * (1.0 - used[:, None] * erase[None, :])
            grad_C = grad_new * keep  # of C_{t-1}
            grad_keep = grad_new * C
            for hd in range(H):
                pbase_w = probs_rec + ((t * B + row) * K + R + hd) * N
                w = tl.load(pbase_w + nidx, mask=nv, other=0.0)
                draw = _draws(draws, t * B * K * N + B * R * N + (row * H + hd) * N, nidx, nv, w, NOISY)
                used = _used(w, draw, nidx, nmask, NP, MODE) * access
                erase, alpha, pre, x_in = _write_values(
                    pbase, xbase, hd, valid, dcidx, dcv, OFF_E, OFF_A, OFF_M, PC, H, DC
                )
                others = tl.full((NP, DCP), 1.0, C.dtype)  # prod over the other heads, no division
                for o in range(H):
                    w_o = tl.load(probs_rec + ((t * B + row) * K + R + o) * N + nidx, mask=nv, other=0.0)
                    d_o = _draws(draws, t * B * K * N + B * R * N + (row * H + o) * N, nidx, nv, w_o, NOISY)
                    u_o = _used(w_o, d_o, nidx, nmask, NP, MODE) * access
                    e_o, _, _, _ = _write_values(
                        pbase, xbase, o, valid, dcidx, dcv, OFF_E, OFF_A, OFF_M, PC, H, DC
                    )
                    others = others * tl.where(o == hd, 1.0, 1.0 - u_o[:, None] * e_o[None, :])
                grad_factor = grad_keep * others
                candidate = tl.maximum(pre, 0.0)
                grad_used = (
                    tl.sum(candidate[None, :] * grad_new - grad_factor * erase[None, :], axis=1) * access
                )
                grad_erase = -tl.sum(grad_factor * used[:, None], axis=0)
                grad_pre = tl.where(pre > 0.0, tl.sum(used[:, None] * grad_new, axis=0), 0.0)  # eq. 4's ReLU
                grad_alpha_pre = tl.sum(grad_pre * x_in, axis=0) * alpha * (1.0 - alpha)  # eq. 3
                _accumulate(dpbase + OFF_M + hd * DC + dcidx, grad_pre, dcv)
                _accumulate(dpbase + OFF_E + hd * DC + dcidx, grad_erase * erase * (1.0 - erase), dcv)
                _accumulate(dpbase + OFF_A + hd, grad_alpha_pre, valid)
                tl.store(dxbase + PC + hd * DC + dcidx, grad_pre * alpha, mask=dcv)
                tl.store(dxbase + PC + H * DC + hd, grad_alpha_pre, mask=valid)
                # the write weighting on M_{t-1} (or C_{t-1})
                grad_w = w * 0.0  # of the trace's w
                if TRACE_GRADS:
                    grad_w += tl.load(d_probs + ((t * B + row) * K + R + hd) * N + nidx, mask=nv, other=0.0)
                kbase = OFF_KW + hd * KW
                kamask = dav & (daidx < DA * MEMKEYS)
                ka = tl.load(pbase + kbase + daidx, mask=kamask, other=0.0)
                kc = tl.load(pbase + kbase + (KW - DC) + dcidx, mask=dcv, other=0.0)
                vbase = ((t * B + row) * H + hd) * N
                g_ka, g_kc, g_A, g_C, g_beta, g_gamma, g_v = _weighting_backward(
                    grad_w,
                    grad_used,
                    draw,
                    inverse_temperature,
                    tl.load(g_vw + (row * H + hd) * N + nidx, mask=nv, other=0.0),
                    w,
                    ka,
                    kc,
                    A_w,
                    C,
                    tl.load(pbase + OFF_B + R + hd, mask=valid, other=0.0),
                    tl.load(pbase + OFF_G + R + hd, mask=valid, other=0.0),
                    tl.load(vws + vbase + nidx, mask=nv, other=0.0),
                    nmask,
                    eps,
                    decay,
                    LRU,
                    MODE,
                )
                grad_A += g_A * MEMKEYS
                grad_C += g_C
                _accumulate(dpbase + kbase + daidx, g_ka, kamask)
                _accumulate(dpbase + kbase + (KW - DC) + dcidx, g_kc, dcv)
                _accumulate(dpbase + OFF_B + R + hd, g_beta, valid)
                _accumulate(dpbase + OFF_G + R + hd, g_gamma, valid)
                tl.store(g_vw + (row * H + hd) * N + nidx, g_v, mask=nv)
            # the reads, eq. 5: φ_k = sum_i u_k(i) M_{t-1}(i), and their weightings
            for k in range(R):
                gp = g_phi + row * RW + k * W
                op = d_out + (row * T + t) * F + D + k * W
                grad_phi_a = tl.load(gp + daidx, mask=dav, other=0.0) + tl.load(
                    op + daidx, mask=dav, other=0.0
                )
                grad_phi_c = tl.load(gp + DA + dcidx, mask=dcv, other=0.0) + tl.load(
                    op + DA + dcidx, mask=dcv, other=0.0
                )
                w = tl.load(probs_rec + ((t * B + row) * K + k) * N + nidx, mask=nv, other=0.0)
                draw = _draws(draws, t * B * K * N + (row * R + k) * N, nidx, nv, w, NOISY)
                used = _used(w, draw, nidx, nmask, NP, MODE) * access
                grad_A += used[:, None] * grad_phi_a[None, :]
                grad_C += used[:, None] * grad_phi_c[None, :]
                grad_used = (
                    tl.sum(A * grad_phi_a[None, :], axis=1) + tl.sum(C * grad_phi_c[None, :], axis=1)
                ) * access
                grad_w = w * 0.0  # of the trace's w
                if TRACE_GRADS:
                    grad_w += tl.load(d_probs + ((t * B + row) * K + k) * N + nidx, mask=nv, other=0.0)
                ka = tl.load(pbase + k * W + daidx, mask=dav, other=0.0)
                kc = tl.load(pbase + k * W + DA + dcidx, mask=dcv, other=0.0)
                vbase = ((t * B + row) * R + k) * N
                g_ka, g_kc, g_A, g_C, g_beta, g_gamma, g_v = _weighting_backward(
                    grad_w,
                    grad_used,
                    draw,
                    inverse_temperature,
                    tl.load(g_vr + (row * R + k) * N + nidx, mask=nv, other=0.0),
                    w,
                    ka,
                    kc,
                    A,
                    C,
                    tl.load(pbase + OFF_B + k, mask=valid, other=0.0),
                    tl.load(pbase + OFF_G + k, mask=valid, other=0.0),
                    tl.load(vrs + vbase + nidx, mask=nv, other=0.0),
                    nmask,
                    eps,
                    decay,
                    LRU,
                    MODE,
                )
                grad_A += g_A
                grad_C += g_C
                _accumulate(dpbase + k * W + daidx, g_ka, dav)
                _accumulate(dpbase + k * W + DA + dcidx, g_kc, dcv)
                _accumulate(dpbase + OFF_B + k, g_beta, valid)
                _accumulate(dpbase + OFF_G + k, g_gamma, valid)
                tl.store(g_vr + (row * R + k) * N + nidx, g_v, mask=nv)
            tl.store(g_c + row * N * DC + cell_c, grad_C, mask=mask_c)
            _accumulate(d_address + row * N * DA + cell_a, grad_A, mask_a)
        tl.debug_barrier()  # the tile phase reads d p_t; g_phi is read before it is rewritten
        # ---- the head layer and the controller backwards, for the tile; the products read
        # their input back from the gradients this program wrote (behind a barrier)
        grad_h, grad_phi = _controller_backward(
            _tile_load(g_h, rows, rmask, D, 0, dcol, dmask), d_params + t * B * P, w_head,
            d_out + t * F, T * F, gates_rec + t * B * 4 * D, hs + t * B * D, hs + (t + 1) * B * D,
            d_xp + t * B * X, d_rec + t * B * 3 * D, w_read, w_rec, rows, rmask, dcol, dmask,
            D, PC, X, RW, P, DP, RWP, PP, GRU,
        )  # fmt: skip
        _tile_store(g_h, rows, rmask, D, 0, dcol, dmask, grad_h)  # not carried in registers
        _tile_store(g_phi, rows, rmask, RW, 0, rcol, rwmask, grad_phi)
        tl.debug_barrier()  # the rows' phase of the step before reads d φ_{t-1}
