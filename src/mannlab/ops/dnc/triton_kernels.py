"""Triton kernels of the DNC's whole sequence: ops/dnc/reference.py's loop, forward and backward,
each one kernel launch with the time loop inside (as ops/ntm/triton_kernels.py).

The equations are those of mannlab.models.dnc (the DNC section of Taguchi & Tsuruoka, with the
corrected usage and link updates): the controller (i) fnn h = phi(h'bar), Elman (eq. 1), LSTM
(eqs. 2-7), each partially non-recurrent with h_out = tanh(h'bar's first block) (eqs. 9-13);
the interface vector W_xi h_t + b_xi; then (ii) retention psi, usage u, allocation a, the write
weighting w^w, the erase/add write, the links L and the precedence p, and (iii) the forward and
backward weightings f = L w^r_{t-1}, b = L^T w^r_{t-1}, the content read weightings, the read
modes pi and the reads r; (iv) the features [h_out; r_t]. Every controller and read-head count
of the numba kernels (ops/dnc/kernels.py) is covered, with the same gradients: the allocation's
sort order phi is a constant for the gradient, the usage is not.

One program per tile of BLOCK_B batch rows (chosen at launch from the batch and the GPU's
SMs: triton_math.rows_per_program). Each step has two phases:

    tile phase   (i) the controller for the tile's rows at once (products with W_r, W_h; c in
                 registers), then the interface vectors W_xi h_t + b_xi: triton_math's
                 controller helpers, shared with the NTM, whose products read their input
                 (r_{t-1}, h_{t-1}, h_t; the gradients just written) back from memory in
                 16-column chunks
    row phase    (ii)-(iii) row by row, on that row's memory (N, W) and links (N, N), both in
                 global memory between steps

and the phases meet through global memory (the interface vectors, r_t) behind a barrier.

The allocation needs the slots in order of usage (ties to the lower slot): no sort here, but
an N x N comparison, j before i when (u_j, j) < (u_i, i), made LINK_ROWS slots j at a time
(u read back from memory): the exclusive product prod_{j before i} u_j and the count of the
slots before i (the slot's position) are a product and a sum over those slices. The backward's
suffix recursion Q_{k-1} = g_k (1 - u_k) + u_k Q_k (no division by u) is an associative scan
over the slots in order: they are stored at their positions in a small scratch, and Q is read
back at each slot's position.

The links are one (N, N) matrix per row: the forward keeps two in turn and, for the backward,
one every ``every`` steps (checkpoints); the backward recomputes a segment's links from its
checkpoint into scratch, then goes back through the segment (as the numba backward does).

Both kernels touch the (N, N) matrices (L_{t-1}, L_t, dL) only in slices of LINK_ROWS rows
from global memory: whole (N, N) tiles held at once spilled most of the backward's registers.
A product over the rows i of a slice is summed over the slices in registers. The forward's
f = L_t w^r_{t-1}, a product over the columns, is summed over transposed slices (LINK_ROWS
columns of L_t); the backward recomputes L_t from L_{t-1} slice by slice, and the rows'
entries of its products over the columns go through the row's ``vectors`` scratch (with
d w^r_t, which the slices read in rows) behind a barrier.

All other states are kept every step (h, c, r, M, w^r, w^w, u, p) with the controller's
activated gates and the raw interface vectors; the backward recomputes the addressing from them
and writes the gradients of every step's pre-activations (h'bar, W_h h_{t-1} for the pnr
controllers, the interface vector); the weight gradients are then one matrix product each over
all B T steps (triton_sequence.py).

Sizes that are not powers of two are padded (masks on every load and store); every tl.dot has
its inner and output sizes >= 16 on a GPU (a chunked product's inner one is BLOCK_K = 16) and
BLOCK_B rows, 1 to 16. Offsets that multiply time, batch and width are int64 (``B`` is widened
first: triton_math.wide). float32 on the
GPU (tl.dot in IEEE precision, not TF32); float64 only in Triton's interpreter, where the tests
check gradients.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mannlab.ops.triton_math import BLOCK_K as BLOCK_K  # the columns of each product's chunks
from mannlab.ops.triton_math import DTYPES as DTYPES  # float64 only in the interpreter
from mannlab.ops.triton_math import INTERPRETED
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

#: Whether these kernels have run on a GPU ("auto" uses only checked kernels). These were
#: tested in Triton's interpreter only: until benchmarks/gpu_check.sh has run them on a GPU,
#: they run only when forced (MANNLAB_KERNELS=triton).
GPU_CHECKED = False

#: rows of an (N, N) matrix (the links, the allocation's order) in registers at once: whole
#: (N, N) tiles (N = 128: 128 registers a thread each at 4 warps) spill; in the interpreter
#: 2, so that the tests' N = 4 and 7 take several slices, the last one partly masked
LINK_ROWS = 2 if INTERPRETED else 16

#: warps per program (as the NTM's), whatever its rows (the row phase sets the registers): 8
#: halve the per-thread share of the row phase's (N, W) memory tiles and links' slices (sm_90,
#: benchmarks/triton_resources.py, bench_gpu's dnc: forward 2.2 KB spilled instead of 3.4 KB
#: at 4, backward 80 B instead of 632 B)
NUM_WARPS = 8

# ---------------------------------------------------------------- what both kernels index


@triton.jit
def _columns(
    pid,
    B,
    D,
    RW,
    P,
    N,
    W,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    WP: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """The tile's batch rows (int64) with their mask; the padded columns of the controller (D),
    the reads (R W), the interface vector (P), the slots (N) and the width (W), each with its
    mask."""
    rows = (pid * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    dcol = tl.arange(0, DP)
    rcol = tl.arange(0, RWP)
    pcol = tl.arange(0, PP)
    nidx = tl.arange(0, NP)
    widx = tl.arange(0, WP)
    return rows, rows < B, dcol, dcol < D, rcol, rcol < RW, pcol, pcol < P, nidx, nidx < N, widx, widx < W


@triton.jit
def _row_masks(pid, bi, B, nidx, nmask, widx, wmask, midx, BLOCK_B: tl.constexpr):
    """Row ``bi`` of the tile (int64), whether it is in the batch, and its masks of the slots,
    the width, the read modes and the memory (N, W) (a tensor mask & a scalar one fails in the
    interpreter: the row's test is made a tensor first)."""
    row = (pid * BLOCK_B + bi).to(tl.int64)
    nv = nmask & ((nidx * 0 + row) < B)
    wv = wmask & ((widx * 0 + row) < B)
    mv = (midx < 3) & ((midx * 0 + row) < B)
    return row, row < B, nv, wv, mv, nv[:, None] & wv[None, :]


@triton.jit
def _slice(i0, row, B, N, LC: tl.constexpr):
    """Slots i0 .. i0 + LC - 1 (a slice of an (N, N) matrix's rows) and their mask, with the
    row's test made a tensor (as _row_masks)."""
    ci = i0 + tl.arange(0, LC)
    return ci, (ci < N) & ((ci * 0 + row) < B)


@triton.jit
def _pick(vector, idx, k):
    """vector[k] of a small register vector, as a scalar."""
    return tl.sum(tl.where(idx == k, vector, 0.0), axis=0)


# ---------------------------------------------------------------- allocation


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _affine(c1, u1, c2, u2):
    """Composition of y -> c1 + u1 y, then y -> c2 + u2 y (the scan of the suffix recursion)."""
    return c2 + u2 * c1, u2 * u1


@triton.jit
def _before(usage_ptr, usage, row, B, N, nidx, nmask, LC: tl.constexpr):
    """For every slot i, prod_{j before i} u_j and how many slots are before it, in the order of
    the free list, j before i when (u_j, j) < (u_i, i) (a stable ascending sort, ties to the
    lower slot). The N x N comparison runs LC slots j at a time, read back from usage_ptr (u
    in memory; ``usage`` the same vector in registers)."""
    before = usage * 0.0 + 1.0
    count = nidx * 0
    for j0 in range(0, N, LC):
        cj, cv = _slice(j0, row, B, N, LC)
        u_j = tl.load(usage_ptr + cj, mask=cv, other=0.0)
        first = (u_j[:, None] < usage[None, :]) | (
            (u_j[:, None] == usage[None, :]) & (cj[:, None] < nidx[None, :])
        )
        first = first & cv[:, None] & nmask[None, :]
        before = before * tl.reduce(tl.where(first, u_j[:, None], 1.0), 0, _mul)
        count += tl.sum(first.to(tl.int32), axis=0)
    return before, count


@triton.jit
def _allocation(before, usage, nmask):
    """a[i] = (1 - u[i]) prod_{j before i} u[j]."""
    return tl.where(nmask, (1.0 - usage) * before, 0.0)


@triton.jit
def _allocation_backward(grad_alloc, usage, before, count, order, nidx, nv, N: tl.constexpr):
    """d(a . grad_alloc)/du with the order a constant: du_i = before_i (Q_i - g_i), Q_i the sum
    over the slots k after i of g_k (1 - u_k) prod_{i < m < k} u_m. The slots at position s of
    the descending order give Q(s) = c(s - 1) + u(s - 1) Q(s - 1), c = g (1 - u): a scan over
    the slots moved to position s + 1 through ``order`` (the row's (3, N) scratch in memory:
    c, u and Q by position), then Q gathered back to the slots."""
    position = N - 1 - count  # descending
    moved = nv & (position + 1 < N)  # the last position's slot feeds no Q
    tl.store(order + position + 1, grad_alloc * (1.0 - usage), mask=moved)
    tl.store(order + N + position + 1, usage, mask=moved)
    tl.debug_barrier()  # stored by other threads; position 0 is no slot's, c = u = 0 there
    c_s = tl.load(order + nidx, mask=nv & (nidx > 0), other=0.0)
    u_s = tl.load(order + N + nidx, mask=nv & (nidx > 0), other=0.0)
    q_s, _ = tl.associative_scan((c_s, u_s), 0, _affine)
    tl.store(order + 2 * N + nidx, q_s, mask=nv)
    tl.debug_barrier()
    q = tl.load(order + 2 * N + position, mask=nv, other=0.0)
    return tl.where(nv, before * (q - grad_alloc), 0.0)


# ---------------------------------------------------------------- links


@triton.jit
def _link_update(links_prev, write_rows, write_w, prec_prev, ci, nidx, lmask):
    """Rows ci of L_t[i, j] = (1 - w^w[i] - w^w[j]) L_{t-1}[i, j] + w^w[i] p_{t-1}[j],
    L_t[i, i] = 0, from the same rows of L_{t-1}; write_rows = w^w[ci]."""
    keep = (1.0 - write_rows[:, None]) - write_w[None, :]
    links = keep * links_prev + write_rows[:, None] * prec_prev[None, :]
    return tl.where(lmask & (ci[:, None] != nidx[None, :]), links, 0.0)


@triton.jit
def _link_tile(ptr, ci, nidx, lmask, N: tl.constexpr):
    """Rows ci of an (N, N) matrix at ptr."""
    return tl.load(ptr + ci[:, None] * N + nidx[None, :], mask=lmask, other=0.0)


# ---------------------------------------------------------------- the interface vector
# Layout (P,): [k^r (R W), k^w (W), v (W) | beta^r (R), beta^w | e (W), f (R), g^a, g^w | pi (3 R)]
#               identity                  | oneplus            | sigmoid                | softmax


@triton.jit
def _retention(pbase, rws_now, valid, nidx, nv, O_FREE: tl.constexpr, R: tl.constexpr, N: tl.constexpr):
    """psi = prod_r (1 - f^r w^{r}_{t-1})."""
    psi = 1.0 - _sigmoid(tl.load(pbase + O_FREE, mask=valid, other=0.0)) * tl.load(
        rws_now + nidx, mask=nv, other=0.0
    )
    for r in range(1, R):
        free = _sigmoid(tl.load(pbase + O_FREE + r, mask=valid, other=0.0))
        psi = psi * (1.0 - free * tl.load(rws_now + r * N + nidx, mask=nv, other=0.0))
    return tl.where(nv, psi, 0.0)


@triton.jit
def _modes(pbase, head, midx, mv, O_MODES: tl.constexpr):
    """pi of read head ``head``: softmax over (backward, content, forward), padded to 4."""
    return _softmax(tl.load(pbase + O_MODES + 3 * head + midx, mask=mv, other=0.0), midx < 3)


# ---------------------------------------------------------------- forward


@triton.jit
def dnc_forward_kernel(
    xp,  # (B, T, G) x_proj
    w_read,  # (G, R W)
    w_rec,  # (G, D); any pointer for the feed-forward controller
    w_xi,  # (P, D)
    b_xi,  # (P,)
    hs,  # (T + 1 or 2, B, D), row 0 the initial state
    cs,  # (T + 1 or 2, B, D)
    reads,  # (T + 1 or 2, B, R W)
    mem,  # (T + 1 or 2, B, N, W)
    rws,  # (T + 1 or 2, B, R, N)
    wws,  # (T + 1 or 2, B, N)
    us,  # (T + 1 or 2, B, N)
    ps,  # (T + 1 or 2, B, N)
    links,  # (2, B, N, N) in turn, row 0 L_0
    link_rec,  # (ceil(T / every), B, N, N) L every ``every`` steps, row 0 L_0 (with KEEP)
    gates_rec,  # (T or 1, B, G) activated gates
    params_rec,  # (T or 1, B, P) raw interface vectors
    out,  # (B, T, D + R W) features
    B,
    T,
    every,
    D: tl.constexpr,
    G: tl.constexpr,
    R: tl.constexpr,
    N: tl.constexpr,
    W: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    WP: tl.constexpr,
    KIND: tl.constexpr,
    ACT: tl.constexpr,
    PNR: tl.constexpr,
    KEEP: tl.constexpr,
    BLOCK_B: tl.constexpr,
    KC: tl.constexpr,
    LC: tl.constexpr,
):
    RW: tl.constexpr = R * W
    F: tl.constexpr = D + R * W
    O_VEC: tl.constexpr = RW + W
    O_BETA: tl.constexpr = O_VEC + W
    O_ERASE: tl.constexpr = O_BETA + R + 1
    O_FREE: tl.constexpr = O_ERASE + W
    O_GA: tl.constexpr = O_FREE + R
    O_MODES: tl.constexpr = O_GA + 2
    B = _wide(B)  # every offset made with it is int64
    pid = tl.program_id(0)
    rows, rmask, dcol, dmask, rcol, rwmask, pcol, pmask, nidx, nmask, widx, wmask = _columns(
        pid, B, D, RW, P, N, W, DP, RWP, PP, NP, WP, BLOCK_B
    )
    midx = tl.arange(0, 4)
    slot = nidx[:, None] * W + widx[None, :]
    for t in range(T):
        if KEEP:  # every step's state and records, for the backward
            now = t
            nxt = t + 1
            rec = t
        else:  # two state rows in turn, one step's records
            now = t % 2
            nxt = (t + 1) % 2
            rec = 0
        # ---- (i) the controller and the interface layer, for the tile; it reads r_{t-1},
        # h_{t-1} and c_{t-1} from their state rows (the previous step wrote them, behind a barrier)
        _controller_forward(
            xp + t * G, T * G, reads + now * B * RW, hs + now * B * D, cs + now * B * D, w_read, w_rec,
            w_xi, b_xi, gates_rec + rec * B * G, hs + nxt * B * D, cs + nxt * B * D, out + t * F, T * F,
            params_rec + rec * B * P, rows, rmask,
            D, G, RW, P, DP, RWP, PP, KIND, ACT, PNR, True, KC,
        )  # fmt: skip
        tl.debug_barrier()  # the rows' phase reads the interface vectors
        # ---- (ii)-(iii) the memory, row by row
        for bi in range(BLOCK_B):
            row, valid, nv, wv, mv, tv = _row_masks(pid, bi, B, nidx, nmask, widx, wmask, midx, BLOCK_B)
            pbase = params_rec + (rec * B + row) * P
            rws_now = rws + (now * B + row) * R * N
            memory = tl.load(mem + (now * B + row) * N * W + slot, mask=tv, other=0.0)
            # retention, usage, allocation
            psi = _retention(pbase, rws_now, valid, nidx, nv, O_FREE, R, N)
            usage_prev = tl.load(us + (now * B + row) * N + nidx, mask=nv, other=0.0)
            write_prev = tl.load(wws + (now * B + row) * N + nidx, mask=nv, other=0.0)
            usage = (usage_prev + write_prev - usage_prev * write_prev) * psi
            tl.store(us + (nxt * B + row) * N + nidx, usage, mask=nv)
            tl.debug_barrier()  # the allocation's slices read u_t back
            before, _ = _before(us + (nxt * B + row) * N, usage, row, B, N, nidx, nmask, LC)
            alloc = _allocation(before, usage, nmask)
            # the write weighting, on M_{t-1}, and the write
            key = tl.load(pbase + RW + widx, mask=wv, other=0.0)
            beta = 1.0 + _softplus(tl.load(pbase + O_BETA + R, mask=valid, other=0.0))
            _, content, _ = _content(key, beta, memory, _slot_norms(memory), nmask)
            alloc_gate = _sigmoid(tl.load(pbase + O_GA, mask=valid, other=0.0))
            write_gate = _sigmoid(tl.load(pbase + O_GA + 1, mask=valid, other=0.0))
            write_w = write_gate * (content + alloc_gate * (alloc - content))
            erase = _sigmoid(tl.load(pbase + O_ERASE + widx, mask=wv, other=0.0))
            vector = tl.load(pbase + O_VEC + widx, mask=wv, other=0.0)
            memory = memory * (1.0 - write_w[:, None] * erase[None, :]) + write_w[:, None] * vector[None, :]
            tl.store(mem + (nxt * B + row) * N * W + slot, memory, mask=tv)
            tl.store(wws + (nxt * B + row) * N + nidx, write_w, mask=nv)
            # links (from p_{t-1}) in slices of rows, then precedence
            prec_prev = tl.load(ps + (now * B + row) * N + nidx, mask=nv, other=0.0)
            links_prev = links + ((t % 2) * B + row) * N * N
            links_now = links + (((t + 1) % 2) * B + row) * N * N
            tl.debug_barrier()  # the slices read w^w_t back
            for i0 in range(0, N, LC):
                ci, cv = _slice(i0, row, B, N, LC)
                sv = cv[:, None] & nv[None, :]
                cell = ci[:, None] * N + nidx[None, :]
                write_rows = tl.load(wws + (nxt * B + row) * N + ci, mask=cv, other=0.0)
                lnk = _link_update(
                    _link_tile(links_prev, ci, nidx, sv, N), write_rows, write_w, prec_prev, ci, nidx, sv
                )
                tl.store(links_now + cell, lnk, mask=sv)
                if KEEP:
                    if ((t + 1) % every == 0) & (t + 1 < T):  # a checkpoint for the backward
                        tl.store(link_rec + (((t + 1) // every) * B + row) * N * N + cell, lnk, mask=sv)
            prec = (1.0 - tl.sum(write_w, axis=0)) * prec_prev + write_w
            tl.store(ps + (nxt * B + row) * N + nidx, prec, mask=nv)
            tl.debug_barrier()  # the reads' slices read L_t back
            # (iii) the read weightings on M_t and the reads
            norms = _slot_norms(memory)
            for r in range(R):
                read_prev = tl.load(rws_now + r * N + nidx, mask=nv, other=0.0)
                # f = L_t w^r_{t-1}, b = L_t^T w^r_{t-1}, each summed over slices ci: of L_t's rows
                # for b, of its columns (a transposed slice, [a, i] = L_t[i, ci[a]]) for f
                forward = read_prev * 0.0
                backward = read_prev * 0.0
                for i0 in range(0, N, LC):
                    ci, cv = _slice(i0, row, B, N, LC)
                    sv = cv[:, None] & nv[None, :]
                    read_rows = tl.load(rws_now + r * N + ci, mask=cv, other=0.0)
                    backward += tl.sum(_link_tile(links_now, ci, nidx, sv, N) * read_rows[:, None], axis=0)
                    columns = tl.load(links_now + nidx[None, :] * N + ci[:, None], mask=sv, other=0.0)
                    forward += tl.sum(columns * read_rows[:, None], axis=0)
                key = tl.load(pbase + r * W + widx, mask=wv, other=0.0)
                beta = 1.0 + _softplus(tl.load(pbase + O_BETA + r, mask=valid, other=0.0))
                _, content, _ = _content(key, beta, memory, norms, nmask)
                modes = _modes(pbase, r, midx, mv, O_MODES)
                read_w = (
                    _pick(modes, midx, 0) * backward
                    + _pick(modes, midx, 1) * content
                    + _pick(modes, midx, 2) * forward
                )
                tl.store(rws + ((nxt * B + row) * R + r) * N + nidx, read_w, mask=nv)
                read = tl.sum(read_w[:, None] * memory, axis=0)
                tl.store(reads + (nxt * B + row) * RW + r * W + widx, read, mask=wv)
                tl.store(out + (row * T + t) * F + D + r * W + widx, read, mask=wv)  # (iv)
        tl.debug_barrier()  # the next step's tile phase reads r_t, its rows L_t


# ---------------------------------------------------------------- backward


@triton.jit
def dnc_backward_kernel(
    w_read,  # (G, R W)
    w_rec,  # (G, D)
    w_xi,  # (P, D)
    hs,  # (T + 1, B, D)
    cs,  # (T + 1, B, D)
    mem,  # (T + 1, B, N, W)
    rws,  # (T + 1, B, R, N)
    wws,  # (T + 1, B, N)
    us,  # (T + 1, B, N)
    ps,  # (T + 1, B, N)
    link_rec,  # (ceil(T / every), B, N, N) the forward's checkpoints
    scratch,  # (every, B, N, N) a segment's links, recomputed
    vectors,  # (B, R + 5, N) per row, for the slices: d w^r_t (R), L_t d w^r_t, d w^w, the order (3)
    gates_rec,  # (T, B, G)
    params_rec,  # (T, B, P)
    out,  # (B, T, D + R W) the forward's features (h_out for the pnr controllers)
    d_out,  # (B, T, D + R W)
    d_h,  # (B, D) in: of the final h; out: of h_0
    d_c,  # (B, D) likewise
    g_r,  # (B, R W) in: of the final r; out: of r_0 (carried between steps)
    g_m,  # (2, B, N, W) row 0 in: of the final M; rows in turn; row T % 2 out: of M_0
    g_wr,  # (2, B, R, N) likewise for w^r
    g_ww,  # (2, B, N) likewise for w^w
    g_u,  # (2, B, N) likewise for u
    g_p,  # (2, B, N) likewise for p
    g_l,  # (B, N, N) in: of the final L; out: of L_0 (each step's in place)
    d_xp,  # (T, B, G) out: of h'bar
    d_rec,  # (T, B, G) out: of h'bar + W_h h_{t-1} (pnr controllers only)
    d_params,  # (T, B, P) out: of the raw interface vectors
    B,
    T,
    every,
    D: tl.constexpr,
    G: tl.constexpr,
    R: tl.constexpr,
    N: tl.constexpr,
    W: tl.constexpr,
    P: tl.constexpr,
    DP: tl.constexpr,
    RWP: tl.constexpr,
    PP: tl.constexpr,
    NP: tl.constexpr,
    WP: tl.constexpr,
    KIND: tl.constexpr,
    ACT: tl.constexpr,
    PNR: tl.constexpr,
    BLOCK_B: tl.constexpr,
    KC: tl.constexpr,
    LC: tl.constexpr,
):
    RW: tl.constexpr = R * W
    F: tl.constexpr = D + R * W
    O_VEC: tl.constexpr = RW + W
    O_BETA: tl.constexpr = O_VEC + W
    O_ERASE: tl.constexpr = O_BETA + R + 1
    O_FREE: tl.constexpr = O_ERASE + W
    O_GA: tl.constexpr = O_FREE + R
    O_MODES: tl.constexpr = O_GA + 2
    B = _wide(B)  # every offset made with it is int64
    pid = tl.program_id(0)
    rows, rmask, dcol, dmask, rcol, rwmask, pcol, pmask, nidx, nmask, widx, wmask = _columns(
        pid, B, D, RW, P, N, W, DP, RWP, PP, NP, WP, BLOCK_B
    )
    midx = tl.arange(0, 4)
    slot = nidx[:, None] * W + widx[None, :]
    grad_h_next = _tile_load(d_h, rows, rmask, D, 0, dcol, dmask)
    grad_c_next = _tile_load(d_c, rows, rmask, D, 0, dcol, dmask)
    for back in range(T):
        t = T - 1 - back
        src = back % 2  # the carried gradients: read row src, write row 1 - src
        dst = 1 - src
        t0 = (t // every) * every  # the segment of the links' checkpoint
        # ---- (iii) and (ii) backwards, row by row
        for bi in range(BLOCK_B):
            row, valid, nv, wv, mv, tv = _row_masks(pid, bi, B, nidx, nmask, widx, wmask, midx, BLOCK_B)
            if (t == T - 1) | (t % every == every - 1):  # a new segment: its links from the checkpoint
                for i0 in range(0, N, LC):  # each slice of rows through the segment
                    ci, cv = _slice(i0, row, B, N, LC)
                    sv = cv[:, None] & nv[None, :]
                    lnk = _link_tile(link_rec + ((t // every) * B + row) * N * N, ci, nidx, sv, N)
                    tl.store(scratch + row * N * N + ci[:, None] * N + nidx[None, :], lnk, mask=sv)
                    for s in range(t0 + 1, t + 1):
                        write_s = tl.load(wws + (s * B + row) * N + nidx, mask=nv, other=0.0)
                        write_rows = tl.load(wws + (s * B + row) * N + ci, mask=cv, other=0.0)
                        prec_s = tl.load(ps + ((s - 1) * B + row) * N + nidx, mask=nv, other=0.0)
                        lnk = _link_update(lnk, write_rows, write_s, prec_s, ci, nidx, sv)
                        tl.store(
                            scratch + ((s - t0) * B + row) * N * N + ci[:, None] * N + nidx[None, :],
                            lnk,
                            mask=sv,
                        )
                tl.debug_barrier()
            pbase = params_rec + (t * B + row) * P
            dpbase = d_params + (t * B + row) * P
            rws_now = rws + (t * B + row) * R * N
            gwr_dst = g_wr + (dst * B + row) * R * N
            vec = vectors + row * (R + 5) * N  # the row's vectors, read back in slices
            ww_new = wws + ((t + 1) * B + row) * N
            links_prev = scratch + ((t - t0) * B + row) * N * N  # L_{t-1}
            old = tl.load(mem + (t * B + row) * N * W + slot, mask=tv, other=0.0)
            new = tl.load(mem + ((t + 1) * B + row) * N * W + slot, mask=tv, other=0.0)
            norms_old = _slot_norms(old)
            norms_new = _slot_norms(new)
            write_w = tl.load(ww_new + nidx, mask=nv, other=0.0)
            prec_prev = tl.load(ps + (t * B + row) * N + nidx, mask=nv, other=0.0)
            grad_new = tl.load(g_m + (src * B + row) * N * W + slot, mask=tv, other=0.0)
            # (iii) r = M_t^T w^r, w^r = pi . (b, c^r, f)
            for r in range(R):
                read_w = tl.load(rws + (((t + 1) * B + row) * R + r) * N + nidx, mask=nv, other=0.0)
                read_prev = tl.load(rws_now + r * N + nidx, mask=nv, other=0.0)
                grad_read = tl.load(d_out + (row * T + t) * F + D + r * W + widx, mask=wv, other=0.0)
                grad_read += tl.load(g_r + row * RW + r * W + widx, mask=wv, other=0.0)
                grad_w = tl.load(g_wr + ((src * B + row) * R + r) * N + nidx, mask=nv, other=0.0)
                grad_w += tl.sum(new * grad_read[None, :], axis=1)
                tl.store(vec + r * N + nidx, grad_w, mask=nv)  # for the links' slices
                grad_new += read_w[:, None] * grad_read[None, :]
                key = tl.load(pbase + r * W + widx, mask=wv, other=0.0)
                beta_raw = tl.load(pbase + O_BETA + r, mask=valid, other=0.0)
                beta = 1.0 + _softplus(beta_raw)
                similarity, content, key_norm = _content(key, beta, new, norms_new, nmask)
                modes = _modes(pbase, r, midx, mv, O_MODES)
                grad_key, grad_beta, grad_mem = _content_backward(
                    _pick(modes, midx, 1) * grad_w, content, similarity, key, key_norm, beta, new, norms_new
                )
                tl.store(dpbase + r * W + widx, grad_key, mask=wv)
                tl.store(dpbase + O_BETA + r, grad_beta * _sigmoid(beta_raw), mask=valid)
                grad_new += grad_mem
                tl.debug_barrier()  # d w^r_t, stored above, is read back in slices
                # f = L_t w^r_{t-1}, b = L_t^T w^r_{t-1}, over slices of L_t's rows i:
                # grad_w . f and b (summed over the slices), and d w^r_{t-1} = L_t^T (pi_f grad_w)
                # (summed) + L_t (pi_b grad_w) (its rows i, stored in the row's vectors)
                forward_dot = tl.sum(grad_w, axis=0) * 0.0
                backward = grad_w * 0.0
                grad_prev = grad_w * 0.0
                for i0 in range(0, N, LC):
                    ci, cv = _slice(i0, row, B, N, LC)
                    sv = cv[:, None] & nv[None, :]
                    lnk = _link_update(
                        _link_tile(links_prev, ci, nidx, sv, N),
                        tl.load(ww_new + ci, mask=cv, other=0.0), write_w, prec_prev, ci, nidx, sv,
                    )  # fmt: skip
                    grad_w_rows = tl.load(vec + r * N + ci, mask=cv, other=0.0)
                    forward_dot += tl.sum(grad_w_rows * tl.sum(lnk * read_prev[None, :], axis=1), axis=0)
                    backward += tl.sum(
                        lnk * tl.load(rws_now + r * N + ci, mask=cv, other=0.0)[:, None], axis=0
                    )
                    grad_prev += tl.sum(lnk * grad_w_rows[:, None], axis=0)
                    tl.store(vec + R * N + ci, tl.sum(lnk * grad_w[None, :], axis=1), mask=cv)
                grad_modes = tl.where(
                    midx == 0,
                    tl.sum(grad_w * backward, axis=0),
                    tl.where(midx == 1, tl.sum(grad_w * content, axis=0), forward_dot),
                )
                grad_modes = tl.where(midx < 3, grad_modes, 0.0)
                tl.store(
                    dpbase + O_MODES + 3 * r + midx,
                    modes * (grad_modes - tl.sum(modes * grad_modes, axis=0)),
                    mask=mv,
                )
                tl.debug_barrier()  # the rows of L_t grad_w, stored above
                grad_prev = _pick(modes, midx, 2) * grad_prev + _pick(modes, midx, 0) * tl.load(
                    vec + R * N + nidx, mask=nv, other=0.0
                )
                tl.store(gwr_dst + r * N + nidx, grad_prev, mask=nv)
            # (ii) links: L_t = (1 - w_i - w_j) L_{t-1} + w_i p_{t-1, j}, zero diagonal; dL_t over
            # slices of its rows i: what came in (g_l) and the reads' outer products
            # pi_f grad_w_i w^r_{t-1, j} + pi_b w^r_{t-1, i} grad_w_j
            grad_ww_cols = write_w * 0.0  # -sum_i dL_t L_{t-1}: the columns' part of d w^w
            grad_prec_prev = write_w * 0.0
            for i0 in range(0, N, LC):
                ci, cv = _slice(i0, row, B, N, LC)
                sv = cv[:, None] & nv[None, :]
                cell = ci[:, None] * N + nidx[None, :]
                grad_links = tl.load(g_l + row * N * N + cell, mask=sv, other=0.0)
                for r in range(R):
                    modes = _modes(pbase, r, midx, mv, O_MODES)
                    grad_w = tl.load(vec + r * N + nidx, mask=nv, other=0.0)
                    read_prev = tl.load(rws_now + r * N + nidx, mask=nv, other=0.0)
                    grad_w_rows = tl.load(vec + r * N + ci, mask=cv, other=0.0)
                    read_prev_rows = tl.load(rws_now + r * N + ci, mask=cv, other=0.0)
                    grad_links += _pick(modes, midx, 2) * grad_w_rows[:, None] * read_prev[None, :]
                    grad_links += _pick(modes, midx, 0) * read_prev_rows[:, None] * grad_w[None, :]
                grad_links = tl.where(sv & (ci[:, None] != nidx[None, :]), grad_links, 0.0)
                lnk_prev = _link_tile(links_prev, ci, nidx, sv, N)
                write_rows = tl.load(ww_new + ci, mask=cv, other=0.0)
                tl.store(
                    vec + (R + 1) * N + ci,
                    tl.sum(grad_links * (prec_prev[None, :] - lnk_prev), axis=1),
                    mask=cv,
                )  # the rows' part of d w^w
                grad_ww_cols -= tl.sum(grad_links * lnk_prev, axis=0)
                grad_prec_prev += tl.sum(grad_links * write_rows[:, None], axis=0)
                keep = (1.0 - write_rows[:, None]) - write_w[None, :]
                tl.store(g_l + row * N * N + cell, grad_links * keep, mask=sv)  # dL_{t-1}
            tl.debug_barrier()  # the rows' part of d w^w, stored above
            grad_ww = tl.load(g_ww + (src * B + row) * N + nidx, mask=nv, other=0.0)
            grad_ww += tl.load(vec + (R + 1) * N + nidx, mask=nv, other=0.0) + grad_ww_cols
            # precedence: p_t = (1 - sum w) p_{t-1} + w
            grad_prec = tl.load(g_p + (src * B + row) * N + nidx, mask=nv, other=0.0)
            grad_prec_prev += (1.0 - tl.sum(write_w, axis=0)) * grad_prec
            grad_ww += grad_prec - tl.sum(grad_prec * prec_prev, axis=0)
            tl.store(g_p + (dst * B + row) * N + nidx, grad_prec_prev, mask=nv)
            # the write: M_t = M_{t-1} o (1 - w e^T) + w v^T
            erase = _sigmoid(tl.load(pbase + O_ERASE + widx, mask=wv, other=0.0))
            vector = tl.load(pbase + O_VEC + widx, mask=wv, other=0.0)
            grad_old = grad_new * (1.0 - write_w[:, None] * erase[None, :])
            grad_ww += tl.sum(grad_new * (vector[None, :] - old * erase[None, :]), axis=1)
            grad_erase = -tl.sum(grad_new * old * write_w[:, None], axis=0)
            tl.store(dpbase + O_ERASE + widx, grad_erase * erase * (1.0 - erase), mask=wv)
            tl.store(dpbase + O_VEC + widx, tl.sum(grad_new * write_w[:, None], axis=0), mask=wv)
            # the write weighting w = g^w (c^w + g^a (a - c^w)), c^w on M_{t-1}
            usage = tl.load(us + ((t + 1) * B + row) * N + nidx, mask=nv, other=0.0)
            before, count = _before(us + ((t + 1) * B + row) * N, usage, row, B, N, nidx, nmask, LC)
            alloc = _allocation(before, usage, nmask)
            key = tl.load(pbase + RW + widx, mask=wv, other=0.0)
            beta_raw = tl.load(pbase + O_BETA + R, mask=valid, other=0.0)
            beta = 1.0 + _softplus(beta_raw)
            similarity, content, key_norm = _content(key, beta, old, norms_old, nmask)
            alloc_gate = _sigmoid(tl.load(pbase + O_GA, mask=valid, other=0.0))
            write_gate = _sigmoid(tl.load(pbase + O_GA + 1, mask=valid, other=0.0))
            grad_write_gate = tl.sum(grad_ww * (content + alloc_gate * (alloc - content)), axis=0)
            tl.store(dpbase + O_GA + 1, grad_write_gate * write_gate * (1.0 - write_gate), mask=valid)
            grad_mix = write_gate * grad_ww
            grad_alloc_gate = tl.sum(grad_mix * (alloc - content), axis=0)
            tl.store(dpbase + O_GA, grad_alloc_gate * alloc_gate * (1.0 - alloc_gate), mask=valid)
            grad_key, grad_beta, grad_mem = _content_backward(
                (1.0 - alloc_gate) * grad_mix, content, similarity, key, key_norm, beta, old, norms_old
            )
            tl.store(dpbase + RW + widx, grad_key, mask=wv)
            tl.store(dpbase + O_BETA + R, grad_beta * _sigmoid(beta_raw), mask=valid)
            grad_old += grad_mem
            tl.store(g_m + (dst * B + row) * N * W + slot, grad_old, mask=tv)
            # allocation (the order a constant), usage u = (u' + w' - u' w') psi, retention
            grad_usage = tl.load(g_u + (src * B + row) * N + nidx, mask=nv, other=0.0)
            grad_usage += _allocation_backward(
                alloc_gate * grad_mix, usage, before, count, vec + (R + 2) * N, nidx, nv, N
            )
            usage_prev = tl.load(us + (t * B + row) * N + nidx, mask=nv, other=0.0)
            write_prev = tl.load(wws + (t * B + row) * N + nidx, mask=nv, other=0.0)
            psi = _retention(pbase, rws_now, valid, nidx, nv, O_FREE, R, N)
            tl.store(g_u + (dst * B + row) * N + nidx, grad_usage * psi * (1.0 - write_prev), mask=nv)
            tl.store(g_ww + (dst * B + row) * N + nidx, grad_usage * psi * (1.0 - usage_prev), mask=nv)
            grad_psi = grad_usage * (usage_prev + write_prev - usage_prev * write_prev)
            tl.debug_barrier()  # d w^r_{t-1} from the links was stored above, by other threads
            for r in range(R):
                free = _sigmoid(tl.load(pbase + O_FREE + r, mask=valid, other=0.0))
                read_prev = tl.load(rws_now + r * N + nidx, mask=nv, other=0.0)
                others = tl.where(nv, 1.0, 0.0).to(read_prev.dtype)  # prod over the other heads
                for o in range(R):
                    f_o = _sigmoid(tl.load(pbase + O_FREE + o, mask=valid, other=0.0))
                    factor = 1.0 - f_o * tl.load(rws_now + o * N + nidx, mask=nv, other=0.0)
                    others = others * tl.where(o == r, 1.0, factor)
                grad_free = -tl.sum(grad_psi * read_prev * others, axis=0)
                tl.store(dpbase + O_FREE + r, grad_free * free * (1.0 - free), mask=valid)
                grad_prev = tl.load(gwr_dst + r * N + nidx, mask=nv, other=0.0) - grad_psi * free * others
                tl.store(gwr_dst + r * N + nidx, grad_prev, mask=nv)
        tl.debug_barrier()  # the tile phase reads d p_t
        # ---- (i) the interface layer and the controller backwards, for the tile; the products
        # read their input back from the gradients this program wrote (behind a barrier)
        grad_h_next, grad_c_next, grad_r = _controller_backward(
            grad_h_next, grad_c_next, d_params + t * B * P, w_xi, d_out + t * F, out + t * F, T * F,
            gates_rec + t * B * G, cs + t * B * D, cs + (t + 1) * B * D, d_xp + t * B * G,
            d_rec + t * B * G, w_read, w_rec, rows, rmask, dcol, dmask,
            D, G, RW, P, DP, RWP, PP, KIND, ACT, PNR, KC,
        )  # fmt: skip
        _tile_store(g_r, rows, rmask, RW, 0, rcol, rwmask, grad_r)
        tl.debug_barrier()  # the rows' phase of the step before reads d r_{t-1}
    _tile_store(d_h, rows, rmask, D, 0, dcol, dmask, grad_h_next)
    _tile_store(d_c, rows, rmask, D, 0, dcol, dmask, grad_c_next)
