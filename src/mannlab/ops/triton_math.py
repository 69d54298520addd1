"""The elementwise and tile helpers the NTM's and the D-NTM's Triton kernels share (as
numba_math.py is for the numba kernels). Triton inlines @triton.jit calls, so a kernel that
imports these compiles exactly as one that defines them. ARMIN's kernels keep their own
tanh and softmax: other formulas, other rounding."""

from __future__ import annotations

import triton
import triton.language as tl


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


# ---------------------------------------------------------------- tiles of batch rows
# The tile phase of a whole-sequence kernel (its controller, for BLOCK_B rows at once) reads
# and writes (rows, columns) blocks of (T or 1, B, width) records through these.


@triton.jit
def tile_store(ptr, rows, rmask, stride, offset, cols, cmask, value):
    tl.store(
        ptr + rows[:, None] * stride + offset + cols[None, :], value, mask=rmask[:, None] & cmask[None, :]
    )


@triton.jit
def tile_load(ptr, rows, rmask, stride, offset, cols, cmask):
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
