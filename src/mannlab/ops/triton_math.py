"""The elementwise and tile helpers the Triton kernels share (the NTM's, the D-NTM's, TARDIS's;
ARMIN's the row softmax and argmax), as numba_math.py is for the numba kernels. Triton inlines
@triton.jit calls, so a kernel that imports these compiles exactly as one that defines them.
ARMIN's kernels keep their own tanh: another formula, other rounding."""

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
