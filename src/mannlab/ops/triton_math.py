"""The elementwise and tile helpers the Triton kernels share (the NTM's, the D-NTM's, TARDIS's
and the DNC's; ARMIN's some), as numba_math.py is for the numba kernels: activations, products
(whole-tile and chunked), softmaxes, the tile loads and stores, the controllers' tile phase (the
NTM's and the DNC's) and the cosine content weighting. Triton inlines @triton.jit calls, so a
kernel that imports these compiles exactly as one that defines them. ARMIN's kernels keep their
own tanh (another formula, other rounding) and share the chunked product and the row softmax
and argmax."""

from __future__ import annotations

import os
import re

import torch
import triton
import triton.language as tl

from mannlab.errors import ConfigError

#: whether Triton runs in its interpreter (TRITON_INTERPRET=1: on CPU tensors, how the tests
#: check the kernels without a GPU)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: the dtypes the NTM's, D-NTM's, TARDIS's and the DNC's kernels take: float32 on the GPU,
#: float64 too in the interpreter, where the tests check gradients
DTYPES = (torch.float32, torch.float64) if INTERPRETED else (torch.float32,)


def padded(size: int, least: int = 1) -> int:
    """The power of two a size is padded to (at least ``least``)."""
    return max(least, triton.next_power_of_2(size))


# ---------------------------------------------------------------- batch rows per program
# One program of the NTM's, the D-NTM's, TARDIS's or the DNC's kernels takes a tile of batch
# rows. 16 rows a program leave most multiprocessors idle at the batches people train with (2
# programs at batch 32 on 132 SMs), so the launch takes about one program per SM instead.

#: the environment variable that forces the rows per program (a power of two, 1 to 16), for
#: benchmarks: MANNLAB_TRITON_ROWS=4
ROWS_VARIABLE = "MANNLAB_TRITON_ROWS"
#: the most rows a program takes (the tile phase's registers grow with them)
MAX_ROWS = 16
#: the Triton release from which these kernels take fewer than 16 rows: tl.dot of float32
#: took 16 rows at least in older ones (this one is what the kernels were tested with)
FEW_ROWS_TRITON = (3, 9)
#: the multiprocessors counted off a GPU (the interpreter, or compiler reports of CPU
#: launches): few, so that the tests' small batches take 1, 2 and 4 rows per program
OFF_GPU_MULTIPROCESSORS = 2


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def multiprocessors(device: torch.device) -> int:
    """The SMs a launch on ``device`` can fill: the GPU's own, else a fixed few."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return OFF_GPU_MULTIPROCESSORS


def forced_rows() -> int | None:
    """The rows per program ``MANNLAB_TRITON_ROWS`` forces, or None where it is unset."""
    value = os.environ.get(ROWS_VARIABLE, "").strip()
    if not value:
        return None
    allowed = [2**i for i in range(MAX_ROWS.bit_length())]
    if not value.isdigit() or int(value) not in allowed:
        raise ConfigError(f"{ROWS_VARIABLE} takes one of {allowed}, got {value!r}")
    return int(value)


def rows_per_program(batch: int, device: torch.device) -> int:
    """The batch rows per program of a launch over ``batch`` rows: ceil(batch / SMs) as a power of
    two, from 1 to 16, or what ``MANNLAB_TRITON_ROWS`` forces; 16 on a GPU with a Triton older
    than ``FEW_ROWS_TRITON``."""
    if not INTERPRETED and _release(triton.__version__) < FEW_ROWS_TRITON:
        return MAX_ROWS
    forced = forced_rows()
    if forced is not None:
        return forced
    return min(MAX_ROWS, padded(triton.cdiv(batch, multiprocessors(device))))


# ---------------------------------------------------------------- int64 offsets


@triton.jit
def wide(index):
    """``index`` as int64. A product of time, batch and width that indexes memory overflows
    int32 from 2**31 elements on (batch 4,096 x 784 steps x 1,024 columns): the kernels widen
    ``B`` first, so that every such product is made in int64."""
    return tl.cast(index, tl.int64)


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


#: the columns of a product's input per tl.dot in ``chunked_dot`` (tl.dot's least on a GPU);
#: 8 in the interpreter, so that the tests' small sizes (padded to 16) take two chunks, as the
#: real sizes take several
BLOCK_K = 8 if INTERPRETED else 16


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
def gate_pre(
    x_rows, r_rows, h_rows, rmask, w_read, w_rec, gate: tl.constexpr, o0, D: tl.constexpr,
    RW: tl.constexpr, DP: tl.constexpr, RWP: tl.constexpr, RECURRENT: tl.constexpr, KC: tl.constexpr,
):  # fmt: skip
    """Columns o0 .. o0 + KC of block ``gate`` of a controller's pre-activation for the tile:
    h'bar = x_proj_t + W_r r_{t-1} and, for a ``RECURRENT`` controller, h'bar + W_h h_{t-1} (else
    h'bar again). Row m of x_proj_t, r_{t-1} and h_{t-1} starts at x_rows[m], r_rows[m],
    h_rows[m]: the products read r_{t-1} and h_{t-1} back from the states the kernel wrote
    (behind a barrier), KC columns at a time."""
    col = o0 + tl.arange(0, KC)
    x = tl.load(
        x_rows[:, None] + gate * D + col[None, :], mask=rmask[:, None] & (col[None, :] < D), other=0.0
    )
    first = gate * D + o0  # the slice's first row of W_r and W_h
    pre_ff = x + chunked_dot(r_rows, rmask, RW, w_read + first * RW, 1, RW, D - o0, KC, RWP, KC)
    pre = pre_ff
    if RECURRENT:
        pre = pre_ff + chunked_dot(h_rows, rmask, D, w_rec + first * D, 1, D, D - o0, KC, DP, KC)
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
# for the feed-forward one), partially non-recurrent with PNR, and the head (interface) layer
# p_t = W_p h_t + b. Every product reads its input back from memory (chunked_dot): the states
# (T + 1 or 2, B, width) the kernel keeps, or the gradients it has just written; products over
# whole (128 x 128) tiles held both operands in registers and spilled.


@triton.jit
def head_layer(
    h_now, w_head, b_head, params, rows, rmask, D: tl.constexpr, P: tl.constexpr, DP: tl.constexpr,
    PP: tl.constexpr, KC: tl.constexpr,
):  # fmt: skip
    """The head layer p_t = W_p h_t + b_p for the tile, KC output columns at a time: reads h_t
    (D-wide rows at ``h_now``, stored behind a barrier) back KC columns at a time and stores
    p_t to the P-wide rows at ``params``."""
    for o0 in range(0, PP, KC):
        col = o0 + tl.arange(0, KC)
        cmask = col < P
        p = chunked_dot(h_now + rows * D, rmask, D, w_head + o0 * D, 1, D, P - o0, KC, DP, KC)
        tile_store(
            params, rows, rmask, P, 0, col, cmask, p + tl.load(b_head + col, mask=cmask, other=0.0)[None, :]
        )


@triton.jit
def controller_forward(
    xp_t,
    x_stride,
    r_prev,
    h_prev,
    c_prev,
    w_read,
    w_rec,
    w_head,
    b_head,
    gates,
    h_next,
    c_next,
    out_t,
    out_stride,
    params,
    rows,
    rmask,
    D: tl.constexpr,
    G: tl.constexpr,
    RW: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    KIND: tl.constexpr,
    ACT: tl.constexpr,
    PNR: tl.constexpr,
    CELL_PASSES: tl.constexpr,
    KC: tl.constexpr,
):
    """One step of the controller and the head layer for the tile: from x_proj_t (the tile's
    G-wide rows at ``xp_t``, ``x_stride`` apart), r_{t-1} (RW-wide rows at ``r_prev``), h_{t-1}
    and c_{t-1} (D-wide rows at ``h_prev``, ``c_prev``): fnn h = phi(h'bar), Elman
    h = tanh(h'bar + W_h h_{t-1}) (eq. 1), LSTM eqs. 2-7 with the gates (z, i, f, o); h_out =
    tanh(h'bar's first block) with PNR (eq. 10), else h. h_t, c_t and p_t are made KC columns
    at a time (the controllers are elementwise past their products): whole (rows, D) gate tiles
    and a (rows, P) product spilled (sm_90, benchmarks/triton_resources.py). It stores the activated
    gates (h for the one-block controllers) at ``gates``, h_t at ``h_next``, c_t at ``c_next``
    (without a cell zeros, or c_{t-1} with CELL_PASSES), h_out to the features' column block at
    ``out_t`` (rows ``out_stride`` apart) and p_t at ``params``. The caller puts a barrier
    between the stores of r_{t-1}, h_{t-1}, c_{t-1} and this, and after it before reading p_t."""
    x_rows = xp_t + rows * x_stride
    r_rows = r_prev + rows * RW
    h_rows = h_prev + rows * D
    for o0 in range(0, DP, KC):
        col = o0 + tl.arange(0, KC)
        cmask = col < D
        z_ff, z_pre = gate_pre(
            x_rows, r_rows, h_rows, rmask, w_read, w_rec, 0, o0, D, RW, DP, RWP, KIND != 0, KC
        )
        if KIND == 2:
            z = tanh(z_pre)
            tile_store(gates, rows, rmask, G, 0, col, cmask, z)
            _, pre = gate_pre(x_rows, r_rows, h_rows, rmask, w_read, w_rec, 1, o0, D, RW, DP, RWP, True, KC)
            i = sigmoid(pre)
            tile_store(gates, rows, rmask, G, D, col, cmask, i)
            _, pre = gate_pre(x_rows, r_rows, h_rows, rmask, w_read, w_rec, 2, o0, D, RW, DP, RWP, True, KC)
            f = sigmoid(pre)
            tile_store(gates, rows, rmask, G, 2 * D, col, cmask, f)
            c = f * tile_load(c_prev, rows, rmask, D, 0, col, cmask) + i * z  # eq. 6
            _, pre = gate_pre(x_rows, r_rows, h_rows, rmask, w_read, w_rec, 3, o0, D, RW, DP, RWP, True, KC)
            o = sigmoid(pre)
            tile_store(gates, rows, rmask, G, 3 * D, col, cmask, o)
            h = o * tanh(c)  # eq. 7
        else:
            if KIND == 0 and ACT == 1:
                h = sigmoid(z_pre)
            elif KIND == 0 and ACT == 2:
                h = tl.maximum(z_pre, 0.0)
            else:
                h = tanh(z_pre)  # fnn-tanh, or Elman's eq. 1
            if CELL_PASSES:
                c = tile_load(c_prev, rows, rmask, D, 0, col, cmask)
            else:
                c = tl.zeros_like(h)
            tile_store(gates, rows, rmask, G, 0, col, cmask, h)
        if PNR:
            h_out = tanh(z_ff)  # eq. 10
        else:
            h_out = h
        # h_{t-1}'s row is read by every slice's products: h_t goes to its own row
        tile_store(h_next, rows, rmask, D, 0, col, cmask, h)
        tile_store(c_next, rows, rmask, D, 0, col, cmask, c)
        tile_store(out_t, rows, rmask, out_stride, 0, col, cmask, h_out)
    tl.debug_barrier()  # the head layer's products read h_t back
    head_layer(h_next, w_head, b_head, params, rows, rmask, D, P, DP, PP, KC)


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
    D: tl.constexpr,
    G: tl.constexpr,
    RW: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    KIND: tl.constexpr,
    ACT: tl.constexpr,
    PNR: tl.constexpr,
    KC: tl.constexpr,
):
    """Backward of ``controller_forward`` at one step, for the tile: from the carried gradients
    of h_t and c_t, those of p_t (the tile's P-wide rows at ``d_params``, stored behind a
    barrier) and of the features (``d_out``, ``out``: the step's column block, rows
    ``out_stride`` apart), it writes the gradients of h'bar (``d_xp``) and, with PNR, of h'bar +
    W_h h_{t-1} (``d_rec``; without PNR the caller passes d_xp again), and returns those of
    h_{t-1}, c_{t-1} (carried as it is without a cell) and r_{t-1}; the products with W_h and W_r
    read the gradients back from d_rec and d_xp, G-wide rows whose blocks are W's rows in order."""
    GK: tl.constexpr = (G + KC - 1) // KC * KC  # G in whole chunks of the products over it
    grad_h = grad_h + chunked_dot(d_params + rows * P, rmask, P, w_head, D, 1, D, DP, PP, KC)
    grad_out = tile_load(d_out, rows, rmask, out_stride, 0, dcol, dmask)
    if not PNR:
        grad_h += grad_out
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
    tl.debug_barrier()  # the products below read the gradients just stored, across threads
    if KIND == 0:
        grad_h = tl.zeros_like(grad_h)  # the feed-forward h_t does not read h_{t-1}
    else:
        grad_h = chunked_dot(d_rec + rows * G, rmask, G, w_rec, D, 1, D, DP, GK, KC)
    grad_r = chunked_dot(d_xp + rows * G, rmask, G, w_read, RW, 1, RW, RWP, GK, KC)
    return grad_h, grad_c, grad_r
