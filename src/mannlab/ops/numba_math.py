"""The numba helpers every kernel shares, each written once: scalar activations and their
gradients, dot products, softmax, argmax, layer norm, vectorisable tanh and sigmoid over
arrays, a cache prefetch hint, and ``assign``, the array copy kernels use instead of numba's
slice assignment (see its docstring). Kernels import helpers from here only, never from each
other (the cache stamp of ops/numba_cache.py covers this file; tests/ops/test_numba_cache.py
checks the rule).

Where two helpers compute the same function they differ in rounding, and each kernel
keeps the one it was checked against: ``softmax_into`` sums the values as stored (in the
output's dtype), ``softmax`` the float64 exponentials; ``softplus_grad`` goes through
``sigmoid``, ``softplus_grad_exp`` is torch's exp(x) / (exp(x) + 1); ``sigmoid`` calls
libm, ``branchless_sigmoid`` and the ``*_array`` functions are the vectorisable versions.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from mannlab.ops.numba_cache import njit

EPS = 1e-8
SOFTPLUS_THRESHOLD = 20.0  # as torch.nn.functional.softplus: x above it is returned as is

#: Reassociated sums and fused multiply-adds, so LLVM can vectorise the reductions and the
#: (n_mem, d_r) memory loops (results differ from the tensor path by rounding only; no
#: assumptions about NaN or infinity, which the sigmoid relies on for large inputs).
FAST = {"reassoc", "contract"}


# ------------------------------------------------------------- scalars and vectors


@njit
def softplus(x):
    return x if x > SOFTPLUS_THRESHOLD else math.log1p(math.exp(x))


@njit
def sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)  # no overflow for very negative x
    return z / (1.0 + z)


@njit
def softplus_grad(x):
    return 1.0 if x > SOFTPLUS_THRESHOLD else sigmoid(x)


@njit
def dot(a, b):
    total = 0.0
    for j in range(a.shape[0]):
        total += a[j] * b[j]
    return total


@njit
def softmax_into(logits, out):
    top = logits.max()
    total = 0.0
    for i in range(logits.shape[0]):
        out[i] = math.exp(logits[i] - top)
        total += out[i]
    for i in range(logits.shape[0]):
        out[i] /= total


@njit
def assign(out, values):
    """out[...] = values for two arrays of one shape (no broadcasting; they must not overlap),
    a row at a time. Why not numba's slice assignment from an array: it compiles the formatting
    of its shape-mismatch message (str, repr, joins of unicode) into every kernel that uses it,
    and each caller optimises that code again: about a third of a family's first compile."""
    if out.shape != values.shape:
        raise ValueError("assign: the arrays' shapes differ")
    for index in np.ndindex(values.shape[:-1]):
        row_out, row_in = out[index], values[index]
        for j in range(row_in.shape[0]):
            row_out[j] = row_in[j]


@njit
def row_norms(memory, out):
    """max(|M(i)|, eps) for every slot."""
    for i in range(memory.shape[0]):
        out[i] = max(math.sqrt(dot(memory[i], memory[i])), EPS)


@njit
def softplus_grad_exp(x):
    """As torch's softplus backward: exp(x) / (exp(x) + 1), 1 above the threshold."""
    if x > SOFTPLUS_THRESHOLD:
        return 1.0
    z = math.exp(x)
    return z / (z + 1.0)


@njit(fastmath=FAST)
def layer_norm(a, weight, bias, eps, xhat, out):
    """out = LN(a) with biased variance (torch.nn.LayerNorm); writes x̂, returns 1/σ."""
    n = a.shape[0]
    mean = 0.0
    for k in range(n):
        mean += a[k]
    mean /= n
    var = 0.0
    for k in range(n):
        d = a[k] - mean
        var += d * d
    var /= n
    rstd = 1.0 / math.sqrt(var + eps)
    for k in range(n):
        xh = (a[k] - mean) * rstd
        xhat[k] = xh
        out[k] = xh * weight[k] + bias[k]
    return rstd


@njit(fastmath=FAST)
def layer_norm_backward(dy, weight, xhat, rstd, dx):
    """dx of LN from dy (the gradient of its output)."""
    n = dy.shape[0]
    m1 = 0.0
    m2 = 0.0
    for k in range(n):
        g = dy[k] * weight[k]
        m1 += g
        m2 += g * xhat[k]
    m1 /= n
    m2 /= n
    for k in range(n):
        dx[k] = rstd * (dy[k] * weight[k] - m1 - xhat[k] * m2)


@njit
def softmax(z, out):
    top = z[0]
    for j in range(1, z.shape[0]):
        if z[j] > top:
            top = z[j]
    total = 0.0
    for j in range(z.shape[0]):
        e = math.exp(z[j] - top)
        out[j] = e
        total += e
    for j in range(z.shape[0]):
        out[j] /= total


@njit
def argmax(z):
    """Index of the first maximum (as torch.argmax)."""
    best = 0
    for j in range(1, z.shape[0]):
        if z[j] > z[best]:
            best = j
    return best


# ------------------------------------------------------- vectorisable tanh and sigmoid
#
# numba calls libm's tanh and exp one value at a time (about 25-30 ns each here; no SVML);
# a TARDIS step evaluates k m + 5 d of them per batch row, most of the forward's time. These
# are branch-free double-precision versions LLVM vectorises (4 doubles per AVX2 instruction,
# about 7 ns per value): x = n ln 2 + r with |r| <= ln 2 / 2, expm1(r) by its Taylor series to
# r^13 (error below 2e-16 relative), 2^n built from the exponent bits. Errors measured against
# numpy's tanh and torch's sigmoid over |x| in [1e-8, 800]: tanh 4.8e-16 relative, sigmoid
# 3.2e-16 relative for x > -700 (below, about 1e-304 where the true value is smaller); the
# same at inf, -inf and nan. float32 arrays are computed in double and rounded. Compiled
# without fastmath: reassociation would fold the rounding trick (x + 1.5 2^52) - 1.5 2^52.

_ROUND = 6755399441055744.0  # 1.5 * 2^52: t = y + _ROUND has round(y) in its low bits
_ROUND_BITS = 0x4338000000000000
_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238  # ln 2 = _LN2_HI + _LN2_LO (Cody and Waite)
_LN2_LO = 1.9082149292705877e-10


@intrinsic
def _bits_as_float(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _float_bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@njit(inline="always", error_model="numpy")
def _exp_parts(x):
    """(2^n, expm1(r)) with x = n ln 2 + r, |r| <= ln 2 / 2: the range reduction and the
    polynomial that _expm1_exact and _exp_exact share."""
    t = x * _LOG2E + _ROUND
    n = t - _ROUND
    r = (x - n * _LN2_HI) - n * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    scale = _bits_as_float(((_float_bits(t) - _ROUND_BITS) + 1023) << 52)  # 2^n
    return scale, p * r


@njit(inline="always", error_model="numpy")
def _expm1_exact(x):
    """expm1(x) for x in [-700, 700], as 2^n (expm1(r) + 1) - 1 (exact relative for |x| small)."""
    scale, expm1_r = _exp_parts(x)
    return scale * expm1_r + (scale - 1.0)


@njit(inline="always", error_model="numpy")
def _branchless_tanh(x):
    m = _expm1_exact(-2.0 * min(abs(x), 40.0))  # in (-1, 0]
    return math.copysign(-m / (2.0 + m), x)


@njit(inline="always", error_model="numpy")
def _branchless_sigmoid(x):
    return 1.0 / (2.0 + _expm1_exact(min(max(-x, -700.0), 700.0)))


@njit(error_model="numpy")
def tanh_array(x, out):
    """out[j] = tanh(x[j]) over 1-D arrays (out may be x)."""
    for j in range(x.shape[0]):
        out[j] = _branchless_tanh(x[j])


@njit(error_model="numpy")
def sigmoid_array(x, out):
    """out[j] = 1 / (1 + exp(-x[j])) over 1-D arrays (out may be x)."""
    for j in range(x.shape[0]):
        out[j] = _branchless_sigmoid(x[j])


@njit(error_model="numpy")
def branchless_sigmoid(x):
    return _branchless_sigmoid(x)


# ------------------------------------------------------------------------------ NTM
#
# Vectorisable exp and log for the NTM's addressing (ops/ntm/kernels.py): its content
# softmax and its sharpening, softmax(gamma log(w~ + eps)), take 3 N of them per head and
# step, which libm computes one value at a time. The same range reduction as _expm1_exact
# above; log by x = 2^e m, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh((m - 1) / (m + 1)) to
# its s^21 term (|s| <= 0.172: error below 2e-16 relative). Double precision inside, for
# float32 arrays too. Compiled without fastmath, as the functions above.

_SQRT2 = 1.4142135623730951
_MANTISSA = 0x000FFFFFFFFFFFFF
_EXPONENT_ONE = 0x3FF0000000000000


@njit(inline="always", error_model="numpy")
def _exp_exact(x):
    """exp(x) for x <= 0 (softmax logits less their maximum); below -700 it returns
    exp(-700) ~ 1e-304 instead of a smaller number or 0."""
    scale, expm1_r = _exp_parts(max(x, -700.0))
    return scale + scale * expm1_r


@njit(inline="always", error_model="numpy")
def _log_exact(x):
    """log(x) for normal positive x (the NTM's w~ + eps >= 1e-8)."""
    bits = _float_bits(x + 0.0)
    exponent = ((bits >> 52) & 0x7FF) - 1023
    m = _bits_as_float((bits & _MANTISSA) | _EXPONENT_ONE)  # in [1, 2)
    if m > _SQRT2:
        m *= 0.5
        exponent += 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    p = 1.0 / 21.0
    p = p * s2 + 1.0 / 19.0
    p = p * s2 + 1.0 / 17.0
    p = p * s2 + 1.0 / 15.0
    p = p * s2 + 1.0 / 13.0
    p = p * s2 + 1.0 / 11.0
    p = p * s2 + 1.0 / 9.0
    p = p * s2 + 1.0 / 7.0
    p = p * s2 + 1.0 / 5.0
    p = p * s2 + 1.0 / 3.0
    p = p * s2 + 1.0
    e = float(exponent)
    return e * _LN2_HI + (2.0 * s * p + e * _LN2_LO)


@njit(error_model="numpy")
def log_array(x, offset, out):
    """out[j] = log(x[j] + offset) (out may be x)."""
    for j in range(x.shape[0]):
        out[j] = _log_exact(x[j] + offset)


@njit(error_model="numpy")
def scaled_softmax_into(scale, logits, out):
    """out = softmax(scale * logits) (scale >= 0; out may be logits)."""
    top = logits[0]
    for j in range(1, logits.shape[0]):
        top = max(top, logits[j])
    for j in range(logits.shape[0]):  # no sum in this loop: it vectorises without fastmath
        out[j] = _exp_exact(scale * (logits[j] - top))
    total = 0.0
    for j in range(logits.shape[0]):
        total += out[j]
    inverse = 1.0 / total
    for j in range(logits.shape[0]):
        out[j] *= inverse


# ------------------------------------------------------------- cache


@intrinsic
def _prefetch_line(typingctx, array, offset):
    """Hint the CPU to load the cache line at byte ``offset`` of the array's data."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte_pointer = ir.IntType(8).as_pointer()
        pointer = builder.gep(builder.bitcast(data, byte_pointer), [args[1]])
        i32 = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        function = cgutils.get_or_insert_function(builder.module, function_type, "llvm.prefetch.p0i8")
        # a read, to be kept in every cache level, of data
        builder.call(function, [pointer, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, types.intp), codegen


@njit(inline="always")
def prefetch(array):
    """Start loading a C-contiguous array into the caches, one hint per 64-byte line, so that
    a loop that reads it later need not wait for memory."""
    for offset in range(0, array.size * array.itemsize, 64):
        _prefetch_line(array, offset)
