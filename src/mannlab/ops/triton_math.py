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


@triton.jit
def chunked_dot(
    x_rows,
    row_ok,
    n_in,
    v_ptr,
    k_stride,
    o_stride,
    n_out,
    BO: tl.constexpr,
    BI: tl.constexpr,
    KC: tl.constexpr,
):
    """x @ V for a tile x (rows, n_in) that the program stored in memory, row m at x_rows[m]
    (row_ok[m]: a row in the batch), and V[k, o] at v_ptr + k k_stride + o o_stride
    (n_in, n_out): (rows, BO), zero past n_out. The sum over k runs KC columns at a time: a
    tl.dot over whole (BI, BO) tiles, a float32 product on a GPU (FMA), holds both tiles in
    registers and spills; (KC, BO) slices do not. Put a barrier between storing x and this."""
    kk = tl.arange(0, KC)
    o = tl.arange(0, BO)
    out_ok = o[None, :] < n_out
    x = tl.load(x_rows[:, None] + kk[None, :], mask=row_ok[:, None] & (kk[None, :] < n_in), other=0.0)
    v = tl.load(
        v_ptr + kk[:, None] * k_stride + o[None, :] * o_stride, mask=(kk[:, None] < n_in) & out_ok, other=0.0
    )
    acc = dot(x, v)
    for k0 in range(KC, BI, KC):
        k = k0 + kk
        x = tl.load(x_rows[:, None] + k[None, :], mask=row_ok[:, None] & (k[None, :] < n_in), other=0.0)
        v = tl.load(
            v_ptr + k[:, None] * k_stride + o[None, :] * o_stride,
            mask=(k[:, None] < n_in) & out_ok,
            other=0.0,
        )
        acc += dot(x, v)
    return acc
