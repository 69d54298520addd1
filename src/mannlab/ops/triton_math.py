"""The elementwise and tile helpers the Triton kernels share (the NTM's, the D-NTM's, TARDIS's
and the DNC's; ARMIN's the row softmax and argmax), as numba_math.py is for the numba kernels:
activations, products, softmaxes, the tile loads and stores, the controllers' tile phase (the
NTM's and the DNC's) and the cosine content weighting. Triton inlines @triton.jit calls, so a
kernel that imports these compiles exactly as one that defines them. ARMIN's kernels keep their
own tanh: another formula, other rounding."""

from __future__ import annotations

import os

import torch
import triton  # type: ignore[import-untyped]
import triton.language as tl  # type: ignore[import-untyped]

#: whether Triton runs in its interpreter (TRITON_INTERPRET=1: on CPU tensors, how the tests
#: check the kernels without a GPU)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: the dtypes the NTM's, D-NTM's and TARDIS's kernels take: float32 on the GPU, float64 too in
#: the interpreter, where the tests check gradients
DTYPES = (torch.float32, torch.float64) if INTERPRETED else (torch.float32,)


def padded(size: int, least: int = 1) -> int:
    """The power of two a size is padded to (at least ``least``)."""
    return max(least, triton.next_power_of_2(size))


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def tanh(x):
    return 2.0 * sigmoid(2.0 * x) - 1.0


@triton.jit
def softplus(x):
    return tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def dot(a, b):
    """a @ b in the inputs' precision (IEEE float32, not TF32)."""
    if a.dtype == tl.float64:
        out = tl.dot(a, b, out_dtype=tl.float64)
    else:
        out = tl.dot(a, b, input_precision="ieee")
    return out


@triton.jit
def softmax(logits, mask):
    """Softmax over the entries where ``mask`` holds (zeros elsewhere)."""
    logits = tl.where(mask, logits, float("-inf"))
    e = tl.where(mask, tl.exp(logits - tl.max(logits, axis=0)), 0.0)
    return e / tl.sum(e, axis=0)


@triton.jit
def row_softmax(logits):
    """Softmax of each row of a 2-D block whose padding is -inf (the padding gets 0)."""
    top = tl.max(logits, axis=1)
    e = tl.exp(logits - top[:, None])
    return e / tl.sum(e, axis=1)[:, None]


@triton.jit
def row_argmax(x, cols, NP: tl.constexpr):
    """The column of each row's first maximum (torch.argmax's choice) of a 2-D block whose
    padding is -inf; ``cols`` the column indices, NP their count."""
    top = tl.max(x, axis=1)
    return tl.min(tl.where(x == top[:, None], cols[None, :], NP), axis=1)


# ---------------------------------------------------------------- tiles of batch rows
# The tile phase of a whole-sequence kernel (its controller, for BLOCK_B rows at once) reads
# and writes (rows, columns) blocks of (T or 1, B, width) records through these.


@triton.jit
def tile_store(ptr, rows, rmask, stride, offset, cols, cmask, value):
    """value (rows, cols) to ptr[row * stride + offset + col], masked."""
    tl.store(
        ptr + rows[:, None] * stride + offset + cols[None, :], value, mask=rmask[:, None] & cmask[None, :]
    )


@triton.jit
def tile_load(ptr, rows, rmask, stride, offset, cols, cmask):
    """ptr[row * stride + offset + col] (rows, cols), zeros where masked."""
    return tl.load(
        ptr + rows[:, None] * stride + offset + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0
    )


@triton.jit
def store_lstm(ptr, rows, rmask, G, dcol, dmask, D, z, i, f, o):
    """The LSTM's four blocks [z, i, f, o] of the tile's G-wide rows at ``ptr``."""
    tile_store(ptr, rows, rmask, G, 0, dcol, dmask, z)
    tile_store(ptr, rows, rmask, G, D, dcol, dmask, i)
    tile_store(ptr, rows, rmask, G, 2 * D, dcol, dmask, f)
    tile_store(ptr, rows, rmask, G, 3 * D, dcol, dmask, o)


@triton.jit
def load_lstm(ptr, rows, rmask, G, dcol, dmask, D):
    """The LSTM's four blocks [z, i, f, o] of the tile's G-wide rows at ``ptr``."""
    z = tile_load(ptr, rows, rmask, G, 0, dcol, dmask)
    i = tile_load(ptr, rows, rmask, G, D, dcol, dmask)
    f = tile_load(ptr, rows, rmask, G, 2 * D, dcol, dmask)
    o = tile_load(ptr, rows, rmask, G, 3 * D, dcol, dmask)
    return z, i, f, o


@triton.jit
def lstm_times(grad_z, grad_i, grad_f, grad_o, w_ptr, tile, mask, block):
    """The sum over the LSTM's gates of d gate @ W_gate, W_gate the tile of W at ``tile`` in the
    gate's block of rows (``block`` apart)."""
    out = dot(grad_z, tl.load(w_ptr + tile, mask=mask, other=0.0))
    out += dot(grad_i, tl.load(w_ptr + block + tile, mask=mask, other=0.0))
    out += dot(grad_f, tl.load(w_ptr + 2 * block + tile, mask=mask, other=0.0))
    out += dot(grad_o, tl.load(w_ptr + 3 * block + tile, mask=mask, other=0.0))
    return out


@triton.jit
def gate_pre(
    xp,
    w_read,
    w_rec,
    r_prev,
    h,
    rows,
    rmask,
    t,
    T,
    gate: tl.constexpr,
    dcol,
    dmask,
    rcol,
    rwmask,
    D: tl.constexpr,
    G: tl.constexpr,
    RW: tl.constexpr,
    RECURRENT: tl.constexpr,
):
    """Block ``gate`` of a controller's pre-activation for the tile: h'bar = x_proj_t + W_r r_{t-1}
    and, for a ``RECURRENT`` controller, h'bar + W_h h_{t-1} (else h'bar again)."""
    x = tl.load(
        xp + (rows[:, None] * T + t) * G + gate * D + dcol[None, :],
        mask=rmask[:, None] & dmask[None, :],
        other=0.0,
    )
    w_r = tl.load(
        w_read + (gate * D + dcol[None, :]) * RW + rcol[:, None],
        mask=rwmask[:, None] & dmask[None, :],
        other=0.0,
    )
    pre_ff = x + dot(r_prev, w_r)
    pre = pre_ff
    if RECURRENT:
        w_h = tl.load(
            w_rec + (gate * D + dcol[None, :]) * D + dcol[:, None],
            mask=dmask[:, None] & dmask[None, :],
            other=0.0,
        )
        pre = pre_ff + dot(h, w_h)
    return pre_ff, pre


# ---------------------------------------------------------------- content addressing

#: the cosine's guard, as mannlab.nn.addressing.EPS: max(|x|, eps) in the denominators
COSINE_EPS = tl.constexpr(1e-8)


@triton.jit
def slot_norms(memory):
    """Each slot's norm (N,) of a memory tile (N, W), at least the cosine's guard."""
    return tl.maximum(tl.sqrt(tl.sum(memory * memory, axis=1)), COSINE_EPS)


@triton.jit
def cosine_content(key, beta, memory, norms, nmask):
    """Cosine similarity K (N,) of the key (W,) with every slot of memory (N, W), w^c =
    softmax(beta K) over the slots ``nmask`` holds, and max(|key|, eps)."""
    key_norm = tl.maximum(tl.sqrt(tl.sum(key * key, axis=0)), COSINE_EPS)
    similarity = tl.sum(memory * key[None, :], axis=1) / (key_norm * norms)
    return similarity, softmax(beta * similarity, nmask), key_norm


@triton.jit
def cosine_content_backward(grad_content, content, similarity, key, key_norm, beta, memory, norms):
    """Backward of ``cosine_content`` from the gradient of w^c: the gradients of the key (W,),
    of beta and of the memory (N, W). (Where a norm is the guard the slot or key is zero and the
    cosine 0, so the formulas hold there too.)"""
    grad_logits = content * (grad_content - tl.sum(content * grad_content, axis=0))
    grad_beta = tl.sum(grad_logits * similarity, axis=0)
    grad_sim = beta * grad_logits
    unit_key = key / key_norm
    unit_mem = memory / norms[:, None]
    grad_unit_key = tl.sum(grad_sim[:, None] * unit_mem, axis=0)
    grad_memory = (grad_sim / norms)[:, None] * (unit_key[None, :] - unit_mem * similarity[:, None])
    grad_key = (grad_unit_key - unit_key * tl.sum(unit_key * grad_unit_key, axis=0)) / key_norm
    return grad_key, grad_beta, grad_memory


# ---------------------------------------------------------------- the controllers' tile phase
# Step (i) of the NTM's and the DNC's kernels for a tile of batch rows: the controllers of
# ops/controller_codes.py (KIND 0 feed-forward, 1 Elman, 2 LSTM; ACT 0 tanh, 1 sigmoid, 2 relu
# for the feed-forward one), partially non-recurrent with PNR.


@triton.jit
def controller_forward(
    xp,
    w_read,
    w_rec,
    gates,
    r_prev,
    h,
    c,
    rows,
    rmask,
    t,
    T,
    dcol,
    dmask,
    rcol,
    rwmask,
    D: tl.constexpr,
    G: tl.constexpr,
    RW: tl.constexpr,
    KIND: tl.constexpr,
    ACT: tl.constexpr,
    PNR: tl.constexpr,
    CELL_PASSES: tl.constexpr,
):
    """(h_t, c_t, h_out) of the tile from x_proj (B, T, G), W_r, W_h, r_{t-1}, h_{t-1}, c_{t-1}:
    fnn h = phi(h'bar), Elman h = tanh(h'bar + W_h h_{t-1}) (eq. 1), LSTM eqs. 2-7 with the gates
    (z, i, f, o); h_out = tanh(h'bar's first block) with PNR (eq. 10), else h. The activated
    gates (h for the one-block controllers) go to the tile's G-wide rows at ``gates``. Without a
    cell, c is zeros, or c_{t-1} with CELL_PASSES."""
    z_ff, z_pre = gate_pre(
        xp, w_read, w_rec, r_prev, h, rows, rmask, t, T, 0, dcol, dmask, rcol, rwmask, D, G, RW, KIND != 0
    )
    if KIND == 2:
        _, i_pre = gate_pre(
            xp, w_read, w_rec, r_prev, h, rows, rmask, t, T, 1, dcol, dmask, rcol, rwmask, D, G, RW, True
        )
        _, f_pre = gate_pre(
            xp, w_read, w_rec, r_prev, h, rows, rmask, t, T, 2, dcol, dmask, rcol, rwmask, D, G, RW, True
        )
        _, o_pre = gate_pre(
            xp, w_read, w_rec, r_prev, h, rows, rmask, t, T, 3, dcol, dmask, rcol, rwmask, D, G, RW, True
        )
        z = tanh(z_pre)
        i = sigmoid(i_pre)
        f = sigmoid(f_pre)
        o = sigmoid(o_pre)
        c = f * c + i * z  # eq. 6
        h = o * tanh(c)  # eq. 7
        store_lstm(gates, rows, rmask, G, dcol, dmask, D, z, i, f, o)
    else:
        if KIND == 0 and ACT == 1:
            h = sigmoid(z_pre)
        elif KIND == 0 and ACT == 2:
            h = tl.maximum(z_pre, 0.0)
        else:
            h = tanh(z_pre)  # fnn-tanh, or Elman's eq. 1
        if not CELL_PASSES:
            c = tl.zeros_like(h)
        tile_store(gates, rows, rmask, G, 0, dcol, dmask, h)
    if PNR:
        h_out = tanh(z_ff)  # eq. 10
    else:
        h_out = h
    return h, c, h_out


@triton.jit
def controller_backward(
    grad_h,
    grad_c,
    d_params,
    w_head,
    d_out,
    out,
    out_stride,
    gates,
    c_prev,
    c_now,
    d_xp,
    d_rec,
    w_read,
    w_rec,
    rows,
    rmask,
    dcol,
    dmask,
    rcol,
    rwmask,
    pcol,
    pmask,
    D: tl.constexpr,
    G: tl.constexpr,
    RW: tl.constexpr,
    P: tl.constexpr,
    KIND: tl.constexpr,
    ACT: tl.constexpr,
    PNR: tl.constexpr,
):
    """Backward of ``controller_forward`` and of the head (interface) layer p_t = W_p h_t + b at
    one step, for the tile: from the carried gradients of h_t and c_t, those of p_t (the tile's
    P-wide rows at ``d_params``) and of the features (``d_out``, ``out``: the step's column
    block, rows ``out_stride`` apart), it writes the gradients of h'bar (``d_xp``) and, with PNR,
    of h'bar + W_h h_{t-1} (``d_rec``), and returns those of h_{t-1}, c_{t-1} (carried as it is
    without a cell) and r_{t-1}."""
    grad_params = tile_load(d_params, rows, rmask, P, 0, pcol, pmask)
    w_p = tl.load(w_head + pcol[:, None] * D + dcol[None, :], mask=pmask[:, None] & dmask[None, :], other=0.0)
    grad_h = grad_h + dot(grad_params, w_p)
    grad_out = tile_load(d_out, rows, rmask, out_stride, 0, dcol, dmask)
    if not PNR:
        grad_h += grad_out
    wr_tile = rcol[None, :] + dcol[:, None] * RW  # [k, j] = W_r[gate D + k, j]
    wr_mask = dmask[:, None] & rwmask[None, :]
    wh_tile = dcol[None, :] + dcol[:, None] * D  # [k, d] = W_h[gate D + k, d]
    wh_mask = dmask[:, None] & dmask[None, :]
    if KIND == 2:
        z, i, f, o = load_lstm(gates, rows, rmask, G, dcol, dmask, D)
        cell_prev = tile_load(c_prev, rows, rmask, D, 0, dcol, dmask)
        tanh_c = tanh(tile_load(c_now, rows, rmask, D, 0, dcol, dmask))
        grad_cell = grad_c + grad_h * o * (1.0 - tanh_c * tanh_c)
        grad_z = grad_cell * i * (1.0 - z * z)
        grad_i = grad_cell * z * i * (1.0 - i)
        grad_f = grad_cell * cell_prev * f * (1.0 - f)
        grad_o = grad_h * tanh_c * o * (1.0 - o)
        grad_c = grad_cell * f
        grad_z_ff = grad_z
        if PNR:  # h_out = tanh(h'bar_t's z block) reads x_proj and W_r r_{t-1} besides
            h_out = tile_load(out, rows, rmask, out_stride, 0, dcol, dmask)
            grad_z_ff = grad_z + grad_out * (1.0 - h_out * h_out)
            store_lstm(d_rec, rows, rmask, G, dcol, dmask, D, grad_z, grad_i, grad_f, grad_o)
        store_lstm(d_xp, rows, rmask, G, dcol, dmask, D, grad_z_ff, grad_i, grad_f, grad_o)
        grad_h = lstm_times(grad_z, grad_i, grad_f, grad_o, w_rec, wh_tile, wh_mask, D * D)
        grad_r = lstm_times(grad_z_ff, grad_i, grad_f, grad_o, w_read, wr_tile, wr_mask, D * RW)
    else:
        a = tile_load(gates, rows, rmask, G, 0, dcol, dmask)
        if KIND == 0 and ACT == 1:
            grad_a = grad_h * a * (1.0 - a)
        elif KIND == 0 and ACT == 2:
            grad_a = tl.where(a > 0.0, grad_h, 0.0)
        else:
            grad_a = grad_h * (1.0 - a * a)
        grad_a_ff = grad_a
        if PNR:
            h_out = tile_load(out, rows, rmask, out_stride, 0, dcol, dmask)
            grad_a_ff = grad_a + grad_out * (1.0 - h_out * h_out)
            tile_store(d_rec, rows, rmask, G, 0, dcol, dmask, grad_a)
        tile_store(d_xp, rows, rmask, G, 0, dcol, dmask, grad_a_ff)
        if KIND == 0:
            grad_h = tl.zeros_like(grad_h)  # the feed-forward h_t does not read h_{t-1}
        else:
            grad_h = dot(grad_a, tl.load(w_rec + wh_tile, mask=wh_mask, other=0.0))
        grad_r = dot(grad_a_ff, tl.load(w_read + wr_tile, mask=wr_mask, other=0.0))
    return grad_h, grad_c, grad_r
