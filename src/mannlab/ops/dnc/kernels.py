"""Compiled CPU kernels for the DNC (numba): the memory step, the equations of
mannlab.models.dnc steps (ii)-(iii), in loops that numba compiles to machine code
(``memory_step_forward``/``_backward``, run by ops/dnc/memory_step.py); and, at the end of
this file, whole sequences: controller, interface layer and memory step of every time step
(``sequence_forward``/``_backward``, run by ops/dnc/numba_sequence.py).

Why: on a CPU the DNC step is about 60 small tensor operations forward and 100
backward, each a few microseconds of dispatch, plus several (B, N, N) link-matrix
temporaries. Here the whole step is one call each way and the link matrix is
touched in one pass forward and one backward (plus the recomputation of the links
between checkpoints, in the sequence backward). The results equal the composition
of mannlab.nn.addressing primitives to rounding (tests/ops/test_fused_dnc_step.py).

What keeps the loops on the vector units (each measured; numba cannot tell LLVM that two
arrays do not alias, so a loop that reads one array and writes another that may overlap
it, or keeps a sum in an array, runs one value at a time): the memory is kept transposed,
(W, N), so that its loops run along the N slots and not along a slot's W entries; the link
matrix's arithmetic runs in the state's dtype (float32 vectors are twice as wide and need
no conversions), its column sums in scratch of that dtype; the links and their gradient
are updated in place through one array (entry by entry, which vectorises), never through
the same array passed twice; tanh_array and sigmoid_array never run in place.

Layout of one batch element's raw interface vector (P,), as DNCCell emits it:
    [k^r (R*W), k^w (W), v (W) | beta^r (R), beta^w | e (W), f (R), g^a, g^w | pi (3R)]
     identity                  | oneplus            | sigmoid                | softmax per head

Per element (paper symbols; phi = stable ascending sort of u_t, ties to the lower slot):
    psi = prod_i (1 - f^i w^{r,i}_{t-1})                 u = (u' + w' - u' w') psi
    a[phi[j]] = (1 - u[phi[j]]) prod_{i<j} u[phi[i]]     c^w = C(M_{t-1}, k^w, beta^w)
    w^w = g^w (c^w + g^a (a - c^w))                      M = M_{t-1} o (1 - w^w e^T) + w^w v^T
    L[i,j] = (1 - w^w[i] - w^w[j]) L'[i,j] + w^w[i] p'[j], L[i,i] = 0
    p = (1 - sum w^w) p' + w^w
    f^i = L w^{r,i}_{t-1}, b^i = L^T w^{r,i}_{t-1},  c^{r,i} = C(M, k^{r,i}, beta^{r,i})
    w^{r,i} = pi^i[0] b^i + pi^i[1] c^{r,i} + pi^i[2] f^i,   r^i = M^T w^{r,i}
with C(M, k, beta) = softmax(beta K(k, M)), K the eps-guarded cosine (primes: t-1).

The forward also returns the intermediates that the backward reads: the activated
interface vector, psi, a, c^w, K^w, the read paths (K^r, c^r, f, b), the slot and
key norms and the sort order phi (a constant for the gradient).
"""

from __future__ import annotations

import math

import numpy as np

from mannlab.ops.numba_cache import njit
from mannlab.ops.numba_math import (
    EPS,
    FAST,
    assign,
    dot,
    prefetch,
    scaled_softmax_into,
    sigmoid,
    sigmoid_array,
    softmax_into,
    softplus,
    softplus_grad,
    tanh_array,
)


@njit(fastmath={"reassoc"})
def _fast_dot(a, b):
    """a . b summed in any order, so that LLVM vectorises it: the N x N loops would
    otherwise wait on one chain of dependent additions (the results differ by rounding)."""
    total = 0.0
    for j in range(a.shape[0]):
        total += a[j] * b[j]
    return total


@njit(fastmath=FAST)
def _column_norms(memory, out):
    """max(|M(i)|, eps) for every slot of a memory stored transposed, (W, N) (see
    _element_forward): the sums run along the slots, so that the loops vectorise."""
    width, slots = memory.shape
    squares = np.zeros(slots)
    for j in range(width):
        for i in range(slots):
            squares[i] += memory[j, i] * memory[j, i]
    for i in range(slots):
        out[i] = max(math.sqrt(squares[i]), EPS)


@njit
def _offsets(read_heads, width):
    """Start of each group of the interface vector: k^r, k^w, v, beta, e, f, g^a, g^w, pi."""
    keys = read_heads * width
    beta = keys + 2 * width
    erase = beta + read_heads + 1
    free = erase + width
    return (
        0,
        keys,
        keys + width,
        beta,
        erase,
        free,
        free + read_heads,
        free + read_heads + 1,
        free + read_heads + 2,
    )


@njit
def _activate(raw, read_heads, width, act):
    """Raw interface vector -> activated (same layout) in act."""
    _, _, _, beta, erase, _, _, _, modes = _offsets(read_heads, width)
    assign(act[:beta], raw[:beta])
    for i in range(beta, erase):
        act[i] = 1.0 + softplus(raw[i])  # oneplus: beta >= 1
    for i in range(erase, modes):
        act[i] = sigmoid(raw[i])
    for r in range(read_heads):
        softmax_into(raw[modes + 3 * r : modes + 3 * r + 3], act[modes + 3 * r : modes + 3 * r + 3])


@njit
def _activate_backward(grad_act, raw, act, read_heads, width, grad_raw):
    """Gradient of the raw interface vector from that of the activated one."""
    _, _, _, beta, erase, _, _, _, modes = _offsets(read_heads, width)
    assign(grad_raw[:beta], grad_act[:beta])
    for i in range(beta, erase):
        grad_raw[i] = grad_act[i] * softplus_grad(raw[i])
    for i in range(erase, modes):
        grad_raw[i] = grad_act[i] * act[i] * (1.0 - act[i])
    for r in range(read_heads):
        head = slice(modes + 3 * r, modes + 3 * r + 3)
        pi, grad_pi = act[head], grad_act[head]
        assign(grad_raw[head], pi * (grad_pi - dot(pi, grad_pi)))


@njit(fastmath=FAST)
def _content(key, memory, norms, strength, similarity, weights):
    """C(M, k, beta) into weights, K into similarity, M transposed (W, N); returns
    max(|k|, eps)."""
    key_norm = max(math.sqrt(dot(key, key)), EPS)
    width, slots = memory.shape
    similarity[:] = 0.0
    for j in range(width):
        entry = key[j]
        for i in range(slots):
            similarity[i] += entry * memory[j, i]
    for i in range(slots):
        similarity[i] = similarity[i] / (key_norm * norms[i])
    scaled_softmax_into(strength, similarity, weights)  # vectorised exp: libm's costs ~25 ns
    return key_norm


@njit(fastmath=FAST)
def _content_backward(
    grad_w, key, key_norm, memory, norms, strength, similarity, weights, grad_key, grad_memory
):
    """Backward of ``_content``: writes grad_key, adds into grad_memory (both memories
    transposed, (W, N), grad_memory in the memory's dtype: its loop then runs on float32
    vectors for a float32 memory, as the tensor path computes it), returns grad beta."""
    width, slots = memory.shape
    dtype = memory.dtype
    mean, grad_beta = dot(weights, grad_w), 0.0
    scale, shrink = np.empty(slots, dtype), np.empty(slots, dtype)  # the only scratch
    for i in range(slots):
        grad_logit = weights[i] * (grad_w[i] - mean)
        grad_beta += grad_logit * similarity[i]
        inverse = 1.0 / norms[i]  # one division per slot, not per entry
        scale[i], shrink[i] = strength * grad_logit * inverse, similarity[i] * inverse
    along = 0.0  # unit key . its gradient; grad_key holds the latter meanwhile
    for j in range(width):
        unit = key[j] / key_norm
        entry, total = dtype.type(unit), dtype.type(0.0)
        for i in range(slots):
            value = memory[j, i]
            total += scale[i] * value
            grad_memory[j, i] += scale[i] * (entry - shrink[i] * value)
        grad_key[j] = total
        along += unit * total
    for j in range(width):
        grad_key[j] = (grad_key[j] - key[j] / key_norm * along) / key_norm
    return grad_beta


@njit
def _allocation(usage, order, alloc):
    """a[phi[j]] = (1 - u[phi[j]]) prod_{i<j} u[phi[i]], phi = stable ascending argsort of u
    (ties to the lower slot). ``order`` holds a permutation of the slots on entry and phi on
    return: an insertion sort from the previous step's phi, which the usage mostly keeps, so
    that few slots move (a fraction of a general sort's time; the same result, as the order
    by (u, slot) is total)."""
    for k in range(1, usage.shape[0]):
        slot = order[k]
        value = usage[slot]
        m = k
        while m > 0:
            other = order[m - 1]
            if usage[other] > value or (usage[other] == value and other > slot):
                order[m] = other
                m -= 1
            else:
                break
        order[m] = slot
    before = 1.0
    for j in range(usage.shape[0]):
        slot = order[j]
        alloc[slot] = (1.0 - usage[slot]) * before
        before *= usage[slot]


@njit
def _allocation_backward(grad_alloc, usage, order, grad_usage):
    """Adds d(a . grad_alloc)/du into grad_usage, phi constant, without dividing by u:
    du[phi[j]] = prod_{i<j} u[phi[i]] (Q_j - ga[phi[j]]) with the suffix recursion
    Q_{N-1} = 0, Q_{j-1} = ga[phi[j]] (1 - u[phi[j]]) + u[phi[j]] Q_j."""
    slots = usage.shape[0]
    before = np.empty(slots)
    product = 1.0
    for j in range(slots):
        before[j] = product
        product *= usage[order[j]]
    suffix = 0.0
    for j in range(slots - 1, -1, -1):
        slot = order[j]
        grad_usage[slot] += before[j] * (suffix - grad_alloc[slot])
        suffix = grad_alloc[slot] * (1.0 - usage[slot]) + usage[slot] * suffix


@njit(fastmath=FAST, inline="always")
def _link_row(row_prev, write_w, prec_prev, weight, keep, i, row):
    """Row i of L_t: (1 - w^w[i] - w^w[j]) L_{t-1}[i, j] + w^w[i] p_{t-1}[j], zero at j = i,
    in the links' dtype (keep = 1 - w^w[i]), into another array (the backward's recomputed
    segment). _link_row_in_place (the forward) and _links_backward write out the same
    expression, so that they round alike."""
    for j in range(row.shape[0]):
        row[j] = (keep - write_w[j]) * row_prev[j] + weight * prec_prev[j]
    row[i] = 0.0


@njit(fastmath=FAST, inline="always")
def _link_row_in_place(row, write_w, prec_prev, weight, keep, i):
    """_link_row with L_{t-1}'s row i replaced by L_t's: row i of L_t needs only row i of
    L_{t-1}, and one (N, N) array per element instead of two keeps the forward's links in
    L2. (The same array passed to _link_row as both rows would not vectorise: LLVM then
    sees two arrays that overlap.)"""
    for j in range(row.shape[0]):
        row[j] = (keep - write_w[j]) * row[j] + weight * prec_prev[j]
    row[i] = 0.0


@njit(fastmath=FAST)
def _memory_write(memory, write_w, erase, vector, new_memory):
    """The erase/add write M_t = M_{t-1} o (1 - w^w e^T) + w^w v^T in the memory's dtype, both
    memories transposed (W, N). The forward and the backward's recomputed segment call this
    one function, so that they round alike."""
    one = memory.dtype.type(1.0)
    for j in range(memory.shape[0]):
        entry_e, entry_v = erase[j], vector[j]
        for i in range(memory.shape[1]):
            weight = write_w[i]
            new_memory[j, i] = memory[j, i] * (one - weight * entry_e) + weight * entry_v


@njit(fastmath=FAST)
def _links_forward(links, write_w, prec_prev, read_prev, forward, backward):
    """L_t (zero diagonal) from L_{t-1}, w^w_t and p_{t-1}, in place (``links`` holds L_{t-1}
    on entry), with f = L_t w^r_{t-1} and b = L_t^T w^r_{t-1}, in one pass over the rows of
    L, two rows at a time (the column sums of b loaded and stored once per two rows). The
    arithmetic is in the links' dtype (float32 vectors are twice as wide as float64 and need
    no conversions); the columns of b are summed in a scratch of that dtype, so that every
    loop reads and writes one dtype and vectorises."""
    slots, read_heads = write_w.shape[0], read_prev.shape[0]
    one, zero = links.dtype.type(1.0), links.dtype.type(0.0)
    column = np.zeros((read_heads, slots), links.dtype)
    a = 0
    while a + 2 <= slots:  # rows a and c = a + 1
        c = a + 1
        weight_a, weight_c = write_w[a], write_w[c]
        _link_row_in_place(links[a], write_w, prec_prev, weight_a, one - weight_a, a)
        _link_row_in_place(links[c], write_w, prec_prev, weight_c, one - weight_c, c)
        for r in range(read_heads):
            read_a, read_c, total_a, total_c = read_prev[r, a], read_prev[r, c], zero, zero
            for j in range(slots):
                link_a, link_c, read = links[a, j], links[c, j], read_prev[r, j]
                total_a += link_a * read
                total_c += link_c * read
                column[r, j] += link_a * read_a + link_c * read_c
            forward[r, a], forward[r, c] = total_a, total_c
        a += 2
    for i in range(a, slots):  # the last row of an odd N
        weight = write_w[i]
        _link_row_in_place(links[i], write_w, prec_prev, weight, one - weight, i)
        for r in range(read_heads):
            read, total = read_prev[r, i], zero
            for j in range(slots):
                total += links[i, j] * read_prev[r, j]
                column[r, j] += links[i, j] * read
            forward[r, i] = total
    for r in range(read_heads):
        for j in range(slots):
            backward[r, j] = column[r, j]


@njit(fastmath=FAST)
def _links_backward(
    links_prev,
    write_w,
    prec_prev,
    read_prev,
    grad_fwd,
    grad_bwd,
    grad_links,
    g_read_prev,
    g_prec_prev,
    grad_ww,
):
    """Backward of _links_forward through L_t and w^r_{t-1}: adds into g_read_prev,
    g_prec_prev and grad_ww, and turns grad_links, dL_t, into dL_{t-1} in place (each entry
    of dL_{t-1} needs only the same entry of dL_t). One pass over the rows: each row of
    L_t is recomputed from L_{t-1} (cheaper than reading a second (N, N) array) and its
    gradient dL'[i, :] = dL_t[i, :] + the directional weightings' outer products formed and
    used in the same loop; heads after the first take one more loop each. As in the forward,
    the arithmetic is in the links' dtype and the column sums (L_t^T df, and those of
    dL' o L_{t-1} and of w^w_t dL') go to scratch of that dtype, added to the float64
    gradients at the end."""
    slots, read_heads = write_w.shape[0], read_prev.shape[0]
    dtype = links_prev.dtype
    one, zero = dtype.type(1.0), dtype.type(0.0)
    grad_f, grad_b = grad_fwd.astype(dtype), grad_bwd.astype(dtype)
    columns = np.zeros((read_heads, slots), dtype)  # L_t^T df per head
    col_links = np.zeros(slots, dtype)  # sum_i dL'[i, j] L_{t-1}[i, j]
    col_prec = np.zeros(slots, dtype)  # sum_i w^w[i] dL'[i, j]
    others = np.zeros(slots, dtype)  # the other heads' part of dL'[i, :]
    reads0, g_b0, sums0 = read_prev[0], grad_b[0], columns[0]
    for i in range(slots):
        weight = write_w[i]
        keep = one - weight
        for r in range(1, read_heads):
            g_f, read = grad_f[r, i], read_prev[r, i]
            if r == 1:
                others[:] = 0.0
            for j in range(slots):
                others[j] += g_f * read_prev[r, j] + grad_b[r, j] * read
        g_f0, read0, total0, total = grad_f[0, i], reads0[i], zero, zero
        for j in range(slots):
            prev = links_prev[i, j]
            link = (keep - write_w[j]) * prev + weight * prec_prev[j]
            grad = grad_links[i, j] + g_f0 * reads0[j] + g_b0[j] * read0
            if read_heads > 1:  # loop-invariant: LLVM makes two loops, one without the load
                grad += others[j]
            link = zero if j == i else link  # L[i, i] = 0, a constant
            grad = zero if j == i else grad
            sums0[j] += g_f0 * link
            total0 += g_b0[j] * link
            total += grad * (prec_prev[j] - prev)
            grad_links[i, j] = grad * (keep - write_w[j])
            col_links[j] += grad * prev
            col_prec[j] += grad * weight
        g_read_prev[0, i] += total0
        grad_ww[i] += total
        for r in range(1, read_heads):
            g_f, total_r = grad_f[r, i], zero
            for j in range(slots):
                link = (keep - write_w[j]) * links_prev[i, j] + weight * prec_prev[j]
                link = zero if j == i else link
                columns[r, j] += g_f * link
                total_r += grad_b[r, j] * link
            g_read_prev[r, i] += total_r
    for j in range(slots):
        grad_ww[j] -= col_links[j]
        g_prec_prev[j] += col_prec[j]
        for r in range(read_heads):
            g_read_prev[r, j] += columns[r, j]


@njit(fastmath=FAST)
def _element_forward(
    raw,
    memory,
    read_prev,
    write_prev,
    usage_prev,
    prec_prev,
    links,
    reads,
    new_memory,
    read_w,
    write_w,
    usage,
    prec,
    act,
    vectors,
    paths,
    norms,
    key_norms,
    order,
    norms_known,
):
    """Forward of one batch element; outputs and intermediates are written in place.
    The memories M_{t-1} and M_t come transposed, (W, N): every loop over a memory then
    runs along the N slots, not along the W (20) entries of a slot, too short a loop for
    the vector units (2-4x faster). vectors (4, N): psi, a, c^w, K^w; paths (4, R, N):
    K^r, c^r, f, b; norms (2, N) of M_{t-1} and M_t; key_norms (R + 1,): read keys, then
    the write key. With ``norms_known`` norms[0] already holds M_{t-1}'s slot norms (the
    previous step's norms[1]: a sequence computes each memory's norms once)."""
    width, slots, read_heads = memory.shape[0], memory.shape[1], read_prev.shape[0]
    offsets = _offsets(read_heads, width)
    o_rkey, o_wkey, o_vec, o_beta, o_erase, o_free, o_ga, o_gw, o_modes = offsets
    _activate(raw, read_heads, width, act)
    psi, alloc, write_content, write_sim = vectors[0], vectors[1], vectors[2], vectors[3]
    # (ii) retention, usage, allocation
    for i in range(slots):
        keep = 1.0
        for r in range(read_heads):
            keep *= 1.0 - act[o_free + r] * read_prev[r, i]
        psi[i] = keep
        usage[i] = (usage_prev[i] + write_prev[i] - usage_prev[i] * write_prev[i]) * keep
    _allocation(usage, order, alloc)
    # write weighting, on M_{t-1}
    if not norms_known:
        _column_norms(memory, norms[0])
    key_norms[read_heads] = _content(
        act[o_wkey:o_vec], memory, norms[0], act[o_beta + read_heads], write_sim, write_content
    )
    alloc_gate, write_gate = act[o_ga], act[o_gw]
    for i in range(slots):
        write_w[i] = write_gate * (write_content[i] + alloc_gate * (alloc[i] - write_content[i]))
    _memory_write(memory, write_w, act[o_erase : o_erase + width], act[o_vec : o_vec + width], new_memory)
    # precedence, then links (from p_{t-1}) with f = L w^r_{t-1} and b = L^T w^r_{t-1}
    # in the same pass over the rows of L
    total = write_w.sum()
    for i in range(slots):
        prec[i] = (1.0 - total) * prec_prev[i] + write_w[i]
    sims, contents, forward, backward = paths[0], paths[1], paths[2], paths[3]
    _links_forward(links, write_w, prec_prev, read_prev, forward, backward)
    # content read weightings on M_t, read modes, reads
    _column_norms(new_memory, norms[1])
    for r in range(read_heads):
        key_norms[r] = _content(
            act[o_rkey + r * width : o_rkey + (r + 1) * width],
            new_memory,
            norms[1],
            act[o_beta + r],
            sims[r],
            contents[r],
        )
        m = o_modes + 3 * r
        for i in range(slots):
            read_w[r, i] = act[m] * backward[r, i] + act[m + 1] * contents[r, i] + act[m + 2] * forward[r, i]
        for j in range(width):
            reads[r, j] = _fast_dot(read_w[r], new_memory[j])


@njit
def memory_step_forward(raw, memory, read_prev, write_prev, usage_prev, prec_prev, links_prev):
    """raw (B, P), M_{t-1} (B, N, W), w^r_{t-1} (B, R, N), w^w_{t-1} (B, 1, N), u_{t-1},
    p_{t-1} (B, N), L_{t-1} (B, N, N) ->
    outputs: r (B, R, W), M_t, w^r_t, w^w_t, u_t, p_t, L_t (shapes as the inputs);
    saved: act (B, P), vectors (B, 4, N), paths (B, 4, R, N), norms (B, 2, N),
           key_norms (B, R + 1), order (B, N) (see _element_forward)."""
    batch, slots, width = memory.shape
    read_heads, dtype = read_prev.shape[1], memory.dtype
    reads = np.empty((batch, read_heads, width), dtype)
    new_memory, read_w = np.empty_like(memory), np.empty_like(read_prev)
    write_w, usage = np.empty_like(write_prev), np.empty_like(usage_prev)
    prec, links = np.empty_like(prec_prev), links_prev.copy()  # updated in place to L_t
    act = np.empty_like(raw)
    vectors, paths = np.empty((batch, 4, slots)), np.empty((batch, 4, read_heads, slots))
    norms, key_norms = np.empty((batch, 2, slots)), np.empty((batch, read_heads + 1))
    order = np.empty((batch, slots), np.int64)
    memory_t, new_t = np.empty((width, slots), dtype), np.empty((width, slots), dtype)
    for b in range(batch):
        assign(order[b], np.arange(slots))  # the sort's starting permutation
        assign(memory_t, memory[b].T)  # the element step works on (W, N)
        _element_forward(
            raw[b],
            memory_t,
            read_prev[b],
            write_prev[b, 0],
            usage_prev[b],
            prec_prev[b],
            links[b],
            reads[b],
            new_t,
            read_w[b],
            write_w[b, 0],
            usage[b],
            prec[b],
            act[b],
            vectors[b],
            paths[b],
            norms[b],
            key_norms[b],
            order[b],
            False,
        )
        assign(new_memory[b], new_t.T)
    return (
        (reads, new_memory, read_w, write_w, usage, prec, links),
        (act, vectors, paths, norms, key_norms, order),
    )


@njit(fastmath=FAST)
def _element_backward(inputs, outputs, saved, grads_out, grads_in, grad_act):
    """Backward of one batch element (tuples as in memory_step_forward/backward, indexed
    at the element); fills grads_in = gradients of (raw, M_{t-1}, w^r_{t-1}, w^w_{t-1},
    u_{t-1}, p_{t-1}), and turns the links' gradient in grads_out (of L_t) into that of
    L_{t-1} in place."""
    raw, memory, read_prev, write_prev, usage_prev, prec_prev, links_prev = inputs
    new_memory, read_w, write_w, usage = outputs
    act, vectors, paths, norms, key_norms, order = saved
    grad_reads, grad_new, grad_read_w, grad_write_w, grad_usage, grad_prec, grad_links = grads_out
    g_raw, g_memory, g_read_prev, g_write_prev, g_usage_prev, g_prec_prev = grads_in
    width, slots, read_heads = memory.shape[0], memory.shape[1], read_prev.shape[0]
    offsets = _offsets(read_heads, width)
    o_rkey, o_wkey, o_vec, o_beta, o_erase, o_free, o_ga, o_gw, o_modes = offsets
    psi, alloc, write_content, write_sim = vectors[0], vectors[1], vectors[2], vectors[3]
    sims, contents, forward, backward = paths[0], paths[1], paths[2], paths[3]
    grad_act[:] = 0.0  # the memories and their gradients transposed, (W, N), as the forward
    # (the memories' gradients in the memory's dtype, as the links': their (W, N) loops then
    # run on float32 vectors for a float32 memory)
    dtype = memory.dtype
    one, zero = dtype.type(1.0), dtype.type(0.0)
    # (iii) r = M^T w^r, read weighting, content on M_t
    grad_rw = np.empty(slots, dtype)
    grad_fwd, grad_bwd = np.empty((read_heads, slots)), np.empty((read_heads, slots))
    for r in range(read_heads):
        m = o_modes + 3 * r
        assign(grad_rw, grad_read_w[r])
        for j in range(width):
            grad_read = dtype.type(grad_reads[r, j])
            for i in range(slots):
                grad_rw[i] += new_memory[j, i] * grad_read
                grad_new[j, i] += read_w[r, i] * grad_read
        grad_act[m] = dot(grad_rw, backward[r])
        grad_act[m + 1] = dot(grad_rw, contents[r])
        grad_act[m + 2] = dot(grad_rw, forward[r])
        assign(grad_bwd[r, :], act[m] * grad_rw)
        assign(grad_fwd[r, :], act[m + 2] * grad_rw)
        key = o_rkey + r * width
        grad_act[o_beta + r] = _content_backward(
            act[m + 1] * grad_rw,
            act[key : key + width],
            key_norms[r],
            new_memory,
            norms[1],
            act[o_beta + r],
            sims[r],
            contents[r],
            grad_act[key : key + width],
            grad_new,
        )
    # directional weightings (through L_t and w^r_{t-1}) and the link update, one pass
    # over the rows of L; each row of L_t is recomputed from L_{t-1} (cheaper than
    # reading a second (N, N) array), and the loops are kept simple so that they vectorise
    grad_ww = grad_write_w.astype(np.float64)
    g_read_prev[:] = 0.0
    g_prec_prev[:] = 0.0
    _links_backward(
        links_prev,
        write_w,
        prec_prev,
        read_prev,
        grad_fwd,
        grad_bwd,
        grad_links,
        g_read_prev,
        g_prec_prev,
        grad_ww,
    )
    # precedence
    total, dot_prec = write_w.sum(), dot(grad_prec, prec_prev)
    for i in range(slots):
        g_prec_prev[i] += (1.0 - total) * grad_prec[i]
        grad_ww[i] += grad_prec[i] - dot_prec
    # erase/add write (sums along the slots, so that the loops vectorise)
    erase, vector = act[o_erase : o_erase + width], act[o_vec : o_vec + width]
    sums_ww = np.zeros(slots, dtype)
    for j in range(width):
        entry_e, entry_v, grad_erase, grad_vector = erase[j], vector[j], zero, zero
        for i in range(slots):
            grad, value, weight = grad_new[j, i], memory[j, i], write_w[i]
            g_memory[j, i] = grad * (one - weight * entry_e)
            sums_ww[i] += grad * (entry_v - value * entry_e)
            grad_erase -= grad * value * weight
            grad_vector += grad * weight
        grad_act[o_erase + j] += grad_erase
        grad_act[o_vec + j] += grad_vector
    for i in range(slots):
        grad_ww[i] += sums_ww[i]
    # write weighting w^w = g^w (c^w + g^a (a - c^w)), then content on M_{t-1}
    alloc_gate, write_gate = act[o_ga], act[o_gw]
    grad_act[o_gw] = dot(grad_ww, write_content + alloc_gate * (alloc - write_content))
    grad_mix = write_gate * grad_ww
    grad_act[o_ga] = dot(grad_mix, alloc - write_content)
    grad_act[o_beta + read_heads] = _content_backward(
        (1.0 - alloc_gate) * grad_mix,
        act[o_wkey:o_vec],
        key_norms[read_heads],
        memory,
        norms[0],
        act[o_beta + read_heads],
        write_sim,
        write_content,
        grad_act[o_wkey:o_vec],
        g_memory,
    )
    # allocation, usage, retention
    grad_u = grad_usage.astype(np.float64)
    _allocation_backward(alloc_gate * grad_mix, usage, order, grad_u)
    for i in range(slots):
        g_usage_prev[i] = grad_u[i] * psi[i] * (1.0 - write_prev[i])
        g_write_prev[i] = grad_u[i] * psi[i] * (1.0 - usage_prev[i])
        grad_psi = grad_u[i] * (usage_prev[i] + write_prev[i] - usage_prev[i] * write_prev[i])
        for r in range(read_heads):
            others = 1.0  # prod over the other heads, no division
            for o in range(read_heads):
                if o != r:
                    others *= 1.0 - act[o_free + o] * read_prev[o, i]
            grad_act[o_free + r] -= grad_psi * read_prev[r, i] * others
            g_read_prev[r, i] -= grad_psi * act[o_free + r] * others
    _activate_backward(grad_act, raw, act, read_heads, width, g_raw)


@njit
def memory_step_backward(inputs, outputs, saved, grads_out):
    """Gradients of the step with respect to its seven inputs, given those of its seven
    outputs, the inputs, the outputs (M_t, w^r_t, w^w_t, u_t) and the saved values."""
    raw, memory, read_prev, write_prev, usage_prev, prec_prev, links_prev = inputs
    grads_in = (
        np.empty_like(raw),
        np.empty_like(memory),
        np.empty_like(read_prev),
        np.empty_like(write_prev),
        np.empty_like(usage_prev),
        np.empty_like(prec_prev),
        grads_out[6].copy(),  # L_t's gradient, turned into L_{t-1}'s in place
    )
    grad_act = np.empty(raw.shape[1])
    width, slots = memory.shape[2], memory.shape[1]  # the element step's memories: (W, N)
    memory_t, new_t = np.empty((width, slots), memory.dtype), np.empty((width, slots), memory.dtype)
    grad_new, g_memory = np.empty((width, slots), memory.dtype), np.empty((width, slots), memory.dtype)
    for b in range(memory.shape[0]):
        assign(grad_new, grads_out[1][b].T)  # accumulates M_t's gradient
        assign(memory_t, memory[b].T)
        assign(new_t, outputs[0][b].T)
        _element_backward(
            (raw[b], memory_t, read_prev[b], write_prev[b, 0], usage_prev[b], prec_prev[b], links_prev[b]),
            (new_t, outputs[1][b], outputs[2][b, 0], outputs[3][b]),
            (saved[0][b], saved[1][b], saved[2][b], saved[3][b], saved[4][b], saved[5][b]),
            (
                grads_out[0][b],
                grad_new,
                grads_out[2][b],
                grads_out[3][b, 0],
                grads_out[4][b],
                grads_out[5][b],
                grads_in[6][b],
            ),
            (grads_in[0][b], g_memory, grads_in[2][b], grads_in[3][b, 0], grads_in[4][b], grads_in[5][b]),
            grad_act,
        )
        assign(grads_in[1][b], g_memory.T)
    return grads_in


# ----------------------------------------------------------------- whole sequence
#
# A whole sequence in one call each way: the controller (step (i) of models/dnc.py, the
# controllers of mannlab.nn.controllers), the interface layer and the memory step above, for
# every time step. Each batch element is one independent loop over time that reads the shared
# weights and writes only its own rows, so row blocks run on threads (ops/threads.py); the
# forward steps GROUP elements together so that they share the controller's weight reads
# (groups of 4 took 4 % off the training step at batch 32; 8, once each element's links were
# one array updated in place, as fast or a little faster; the same in the backward, groups
# of 2 or 4, was no faster: each element there also holds a segment of recomputed links).
# The weight gradients are left to the caller (one matrix product each over all steps).

#: batch elements sequence_forward runs in step together, so that each weight row read
#: from L2 serves all of them (the controller's W_h alone is 256 kB at 128 x 512 float32)
GROUP = 8

#: controller kinds and feed-forward activations of sequence_forward/backward
FNN, ELMAN, LSTM = 0, 1, 2
TANH, SIGMOID, RELU = 0, 1, 2


@njit(fastmath=FAST)
def _matvec_t_add(weight, vector, out):
    """out += weight^T @ vector, weight (G, K) row-major: _matmat_add on one row, summing in
    the weight's dtype, then added to out (which may be float64: 2x faster than summing into
    it directly at 512 x 128 float32)."""
    sums = np.zeros((1, weight.shape[1]), weight.dtype)
    _matmat_add(weight, vector.reshape((1, vector.shape[0])), sums)
    for k in range(sums.shape[1]):
        out[k] += sums[0, k]


@njit(fastmath=FAST)
def _matmat_add(weight_t, vectors, out):
    """out[e] += weight @ vectors[e] for each of the g rows of vectors (g, K), out (g, G),
    from weight_t = weight^T (K, G) row-major, accumulated in out's dtype (as torch's addmm):
    four rows of weight_t per pass over out, so that out is loaded and stored a quarter as
    often (1.4x faster at 128 x 512 float32), each pass serving all g vectors, so that the
    weight is read from L2 once per group and not once per element."""
    rows, cols = weight_t.shape
    dtype = out.dtype
    k = 0
    while k + 4 <= rows:
        for e in range(vectors.shape[0]):
            v0, v1 = dtype.type(vectors[e, k]), dtype.type(vectors[e, k + 1])
            v2, v3 = dtype.type(vectors[e, k + 2]), dtype.type(vectors[e, k + 3])
            row = out[e]
            for g in range(cols):
                row[g] += (weight_t[k, g] * v0 + weight_t[k + 1, g] * v1) + (
                    weight_t[k + 2, g] * v2 + weight_t[k + 3, g] * v3
                )
        k += 4
    for k in range(k, rows):
        for e in range(vectors.shape[0]):
            value, row = dtype.type(vectors[e, k]), out[e]
            for g in range(cols):
                row[g] += weight_t[k, g] * value


@njit(fastmath=FAST)
def _link_update(links_prev, write_w, prec_prev, links):
    """L_t from L_{t-1}, w^w_t and p_{t-1}, row by row as _links_forward computes it."""
    one = links.dtype.type(1.0)
    for i in range(write_w.shape[0]):
        weight = write_w[i]
        _link_row(links_prev[i], write_w, prec_prev, weight, one - weight, i, links[i])


@njit(fastmath=FAST)
def _controller_forward(kind, activation, pnr, hbar, pre, c_prev, gates, h, c, h_out):
    """Step (i) from its products: hbar = W_x x_t + b + W_r r_{t-1} (eqs. 9, 12) and, for the
    recurrent kinds, pre = hbar + W_h h_{t-1} (the caller forms both for a group of elements,
    _matmat_add); then fnn h = phi(hbar); elman h = tanh(pre) (eqs. 1, 11); lstm eqs. 2-7 on
    pre, gates (z, i, f, o). h_out = tanh(hbar[:H]) (eq. 10) when ``pnr``, else h.
    ``gates`` keeps the activated pre-activations for the backward. The pre-activation is
    its own array: tanh_array and sigmoid_array vectorise only when their input and output
    differ (in place: 4x slower)."""
    hidden = h.shape[0]
    if kind == FNN:
        if activation == TANH:
            tanh_array(hbar, gates)
        elif activation == SIGMOID:
            sigmoid_array(hbar, gates)
        else:
            for k in range(hidden):
                gates[k] = max(hbar[k], 0.0)
        assign(h, gates)
        assign(c, c_prev)
    elif kind == ELMAN:
        tanh_array(pre, gates)
        assign(h, gates)
        assign(c, c_prev)
    else:
        tanh_array(pre[:hidden], gates[:hidden])  # eq. 2
        sigmoid_array(pre[hidden:], gates[hidden:])  # eqs. 3-5
        for k in range(hidden):
            c[k] = gates[2 * hidden + k] * c_prev[k] + gates[hidden + k] * gates[k]  # eq. 6
        tanh_array(c, h)
        for k in range(hidden):
            h[k] *= gates[3 * hidden + k]  # eq. 7
    if pnr:
        tanh_array(hbar[:hidden], h_out)
    else:
        assign(h_out, h)


@njit(fastmath=FAST)
def _controller_backward(kind, activation, gates, h, c, c_prev, d_h, d_c, d_pre, scratch):
    """Backward of _controller_forward's recurrent part: from d_h (of h_t) and d_c (of c_t,
    replaced by that of c_{t-1}), the gradient d_pre of the pre-activation (hbar, plus
    W_h h_{t-1} for the recurrent kinds)."""
    hidden = h.shape[0]
    if kind == LSTM:
        tanh_array(c, scratch)
        for k in range(hidden):
            z, i, f, o = gates[k], gates[hidden + k], gates[2 * hidden + k], gates[3 * hidden + k]
            tc = scratch[k]
            grad_c = d_c[k] + d_h[k] * o * (1.0 - tc * tc)
            d_pre[k] = grad_c * i * (1.0 - z * z)
            d_pre[hidden + k] = grad_c * z * i * (1.0 - i)
            d_pre[2 * hidden + k] = grad_c * c_prev[k] * f * (1.0 - f)
            d_pre[3 * hidden + k] = d_h[k] * tc * o * (1.0 - o)
            d_c[k] = grad_c * f
    elif kind == ELMAN or activation == TANH:
        for k in range(hidden):
            d_pre[k] = d_h[k] * (1.0 - h[k] * h[k])
    elif activation == SIGMOID:
        for k in range(hidden):
            d_pre[k] = d_h[k] * h[k] * (1.0 - h[k])
    else:
        for k in range(hidden):
            d_pre[k] = d_h[k] if h[k] > 0.0 else 0.0


@njit
def _state_slots(t, keep):
    """Slots of the states before and after step t, and of step t's records: every step's
    when ``keep`` (a backward follows), else two alternating slots and one record."""
    if keep:
        return t, t + 1, t
    return t % 2, 1 - t % 2, 0


def record_shapes(B, T, G, H, N, W, R, P, keep, every):
    """(shape, float dtype: True for the state's, False for float64, None for int64) of each
    record of sequence_forward, in its order: every step's (T + 1 states) with ``keep``,
    else two alternating state slots and one step's scratch."""
    Ts, S = (T, T + 1) if keep else (1, 2)
    checkpoints = (T + every - 1) // every if keep else 1
    state, f64, i64 = True, False, None
    return (
        ((B, S, H), state),
        ((B, S, H), state),
        ((B, checkpoints, W, N), state),  # memories transposed (_element_forward), as L
        ((B, S, R, N), state),
        ((B, S, N), state),
        ((B, S, N), state),
        ((B, S, N), state),
        ((B, checkpoints, N, N), state),
        ((B, Ts, G), state),
        ((B, Ts, P), state),
        ((B, Ts, P), state),
        ((B, Ts, 4, N), state),  # the intermediates in the state's dtype: a quarter of
        ((B, Ts, 4, R, N), state),  # the records' bytes, written and read once a step
        ((B, Ts, 2, N), state),
        ((B, Ts, R + 1), f64),
        ((B, Ts, N), i64),
    )


@njit(fastmath=FAST, nogil=True)  # row blocks run on threads at once (ops/threads.py)
def sequence_forward(
    xp,
    h0,
    c0,
    r0,
    m0,
    wr0,
    ww0,
    u0,
    p0,
    l0,
    w_r_t,
    w_h_t,
    w_xi_t,
    b_xi,
    kind,
    activation,
    pnr,
    keep,
    every,
    records,
):
    """A whole DNC sequence. xp (B, T, G) = W_x x_t + b of the controller; initial state
    h0, c0 (B, H) (zeros where the controller has none), r0 (B, R W), M_0 (B, N, W),
    w^r_0 (B, R, N), w^w_0 (B, N), u_0, p_0 (B, N), L_0 (B, N, N); transposed (in, out):
    the controller's W_r (R W, G) and W_h (H, G) (a dummy for fnn) and the interface
    layer's W_xi (H, P); its bias b_xi (P).
    Returns the features (B, T, H + R W), the final state (h, c, r, M, w^r, w^w, u, p, L)
    and the records the backward reads: every step's with ``keep`` (else scratch), but of
    the links L and the memory M only every ``every``-th state (the backward recomputes
    the others from w^w, p, e and v: the (B, T, N, N) of all links would be most of the
    memory, and the memories read back from DRAM cost more than their recomputation). The
    records are passed in (``record_shapes`` gives their shapes; the caller reuses them
    between calls: fresh pages cost more than the arithmetic) and filled here."""
    B, T = xp.shape[0], xp.shape[1]
    G, H, RW = xp.shape[2], h0.shape[1], r0.shape[1]
    N, W, R, P = m0.shape[1], m0.shape[2], wr0.shape[1], b_xi.shape[0]
    dtype = xp.dtype
    hs, cs, ms, wrs, wws, us, ps, ls, gates, raws, acts, vectors, paths, norms, key_norms, order = records
    S = hs.shape[1]
    out = np.empty((B, T, H + RW), dtype)
    rs, l_last = np.empty((B, S, RW), dtype), np.empty((B, N, N), dtype)
    m_last = np.empty((B, N, W), dtype)
    for b0 in range(0, B, GROUP):  # independent elements, in groups that share weight reads
        g = min(GROUP, B - b0)
        hbar, pre, h_prev = np.empty((g, G), dtype), np.empty((g, G), dtype), np.empty((g, H), dtype)
        r_prev, h_new, raw = np.empty((g, RW), dtype), np.empty((g, H), dtype), np.empty((g, P), dtype)
        links, mems = np.empty((g, N, N), dtype), np.empty((g, 2, W, N), dtype)  # L updated in place
        for e in range(g):
            b = b0 + e
            assign(hs[b, 0], h0[b])
            assign(cs[b, 0], c0[b])
            assign(rs[b, 0], r0[b])
            assign(mems[e, 0], m0[b].T)
            assign(wrs[b, 0], wr0[b])
            assign(wws[b, 0], ww0[b])
            assign(us[b, 0], u0[b])
            assign(ps[b, 0], p0[b])
            assign(links[e], l0[b])
        for t in range(T):
            s, s1, st = _state_slots(t, keep)
            for e in range(g):
                b = b0 + e
                if keep and t % every == 0:
                    assign(ls[b, t // every], links[e])
                    assign(ms[b, t // every], mems[e, t % 2])
                # the allocation's sort starts from the previous step's order (same slot
                # without keep) and M_{t-1}'s slot norms are those step t - 1 computed for
                # its M_t
                if t == 0:
                    assign(order[b, st], np.arange(N))
                elif keep:
                    assign(order[b, st], order[b, st - 1])
                    assign(norms[b, st, 0], norms[b, st - 1, 1])
                else:
                    assign(norms[b, st, 0], norms[b, st, 1])
                assign(hbar[e], xp[b, t])
                assign(r_prev[e], rs[b, s])
                assign(h_prev[e], hs[b, s])
            _matmat_add(w_r_t, r_prev, hbar)
            if kind != FNN:
                assign(pre, hbar)
                _matmat_add(w_h_t, h_prev, pre)
            for e in range(g):
                b = b0 + e
                _controller_forward(
                    kind,
                    activation,
                    pnr,
                    hbar[e],
                    pre[e],
                    cs[b, s],
                    gates[b, st],
                    hs[b, s1],
                    cs[b, s1],
                    out[b, t, :H],
                )
                assign(h_new[e], hs[b, s1])
                assign(raw[e], b_xi)
            _matmat_add(w_xi_t, h_new, raw)  # the interface vectors W_xi h_t + b_i
            for e in range(g):
                b = b0 + e
                assign(raws[b, st], raw[e])
                _element_forward(
                    raws[b, st],
                    mems[e, t % 2],
                    wrs[b, s],
                    wws[b, s],
                    us[b, s],
                    ps[b, s],
                    links[e],
                    rs[b, s1].reshape((R, W)),
                    mems[e, 1 - t % 2],
                    wrs[b, s1],
                    wws[b, s1],
                    us[b, s1],
                    ps[b, s1],
                    acts[b, st],
                    vectors[b, st],
                    paths[b, st],
                    norms[b, st],
                    key_norms[b, st],
                    order[b, st],
                    t > 0,
                )
                assign(out[b, t, H:], rs[b, s1])
        for e in range(g):
            assign(l_last[b0 + e], links[e])
            assign(m_last[b0 + e], mems[e, T % 2].T)
    last = T if keep else T % 2
    finals = (
        hs[:, last].copy(),
        cs[:, last].copy(),
        rs[:, last].copy(),
        m_last,
        wrs[:, last].copy(),
        wws[:, last].copy(),
        us[:, last].copy(),
        ps[:, last].copy(),
        l_last,
    )
    return out, finals


@njit
def _prefetch_step(records, b, t):
    """Prefetch the records of element b that sequence_backward reads at step t."""
    hs, cs, _, wrs, wws, us, ps, _, gates, raws, acts, vectors, paths, norms, key_norms, order = records
    for row in (raws[b, t], wws[b, t], us[b, t], ps[b, t], acts[b, t], gates[b, t], hs[b, t + 1], cs[b, t]):
        prefetch(row)
    for block in (wrs[b, t], vectors[b, t], norms[b, t]):
        prefetch(block)
    prefetch(paths[b, t])
    prefetch(order[b, t])
    prefetch(key_norms[b, t])


@njit(fastmath=FAST, nogil=True)
def sequence_backward(out, records, w_r, w_h, w_xi, kind, activation, pnr, every, d_out, d_finals):
    """Gradients of sequence_forward (with ``keep``, the same ``every``) given those of its
    features and final state d_finals = (d_h, d_c, d_r, d_M, d_w^r, d_w^w, d_u, d_p, d_L);
    the weights as stored (out, in). Returns the gradients of the controller's
    pre-activation hbar (B, T, G) (= that of xp), of the recurrent pre-activation (B, T, G)
    (= d hbar but for the z block of a pnr controller), of the raw interface vector
    (B, T, P), and of the initial state (as sequence_forward's inputs). Each element goes
    back over segments of ``every`` steps, first recomputing the segment's links and
    memories from its checkpoint (into scratch that stays in cache)."""
    hs, cs, ms, wrs, wws, us, ps, ls, gates, raws, acts, vectors, paths, norms, key_norms, order = records
    B, T, G = gates.shape[0], gates.shape[1], gates.shape[2]
    H, W, N, R, P = hs.shape[2], ms.shape[2], ms.shape[3], wrs.shape[2], raws.shape[2]
    o_erase, o_vec = _offsets(R, W)[4], _offsets(R, W)[2]
    RW = R * W
    dtype = out.dtype
    w_r_t = np.ascontiguousarray(w_r.T)
    d_hbar, d_pre, d_raw = np.empty((B, T, G), dtype), np.empty((B, T, G), dtype), np.empty((B, T, P), dtype)
    d_h0, d_c0, d_r0 = np.empty((B, H), dtype), np.empty((B, H), dtype), np.empty((B, RW), dtype)
    d_m0, d_wr0 = np.empty((B, N, W), dtype), np.empty((B, R, N), dtype)
    d_ww0, d_u0, d_p0 = np.empty((B, N), dtype), np.empty((B, N), dtype), np.empty((B, N), dtype)
    d_l0 = np.empty((B, N, N), dtype)
    for b in range(B):  # independent elements: own rows, own scratch
        # gradients of the state after step t (carried back, in float64 but for the memory's
        # and the links', in the state's dtype), and of the one before
        dh, dc, dr = d_finals[0][b].astype(np.float64), d_finals[1][b].astype(np.float64), np.empty(RW)
        assign(dr, d_finals[2][b])
        dm, dwr = np.empty((W, N), dtype), d_finals[4][b].astype(np.float64)
        assign(dm, d_finals[3][b].T)  # the memories transposed, as in the records
        dww, du = d_finals[5][b].astype(np.float64), d_finals[6][b].astype(np.float64)
        # the links' gradient in the state's dtype, one buffer that each step turns from
        # dL_t into dL_{t-1} in place
        dp, dl = d_finals[7][b].astype(np.float64), d_finals[8][b].copy()
        dm2, dwr2, dww2 = np.empty((W, N), dtype), np.empty((R, N)), np.empty(N)
        du2, dp2 = np.empty(N), np.empty(N)
        d_reads, g_raw, grad_act = np.empty((R, W)), np.empty(P), np.empty(P)
        d_state, d_pre_t, d_hbar_t, scratch = np.empty(H), np.empty(G), np.empty(G), np.empty(H)
        segment, memories = np.empty((every, N, N), dtype), np.empty((every + 1, W, N), dtype)
        for k in range((T + every - 1) // every - 1, -1, -1):
            t0, t1 = k * every, min(T, (k + 1) * every)
            assign(segment[0], ls[b, k])
            assign(memories[0], ms[b, k])
            for t in range(t0, t1 - 1):
                _link_update(segment[t - t0], wws[b, t + 1], ps[b, t], segment[t - t0 + 1])
            for t in range(t0, t1):
                act = acts[b, t]
                erase, vector = act[o_erase : o_erase + W], act[o_vec : o_vec + W]
                _memory_write(memories[t - t0], wws[b, t + 1], erase, vector, memories[t - t0 + 1])
            for t in range(t1 - 1, t0 - 1, -1):
                s, s1 = t, t + 1
                if t > 0:  # step t - 1's records (from memory at large B), while this step runs
                    _prefetch_step(records, b, t - 1)
                for j in range(RW):
                    d_reads[j // W, j % W] = d_out[b, t, H + j] + dr[j]
                _element_backward(
                    (raws[b, t], memories[t - t0], wrs[b, s], wws[b, s], us[b, s], ps[b, s], segment[t - t0]),
                    (memories[t - t0 + 1], wrs[b, s1], wws[b, s1], us[b, s1]),
                    (acts[b, t], vectors[b, t], paths[b, t], norms[b, t], key_norms[b, t], order[b, t]),
                    (d_reads, dm, dwr, dww, du, dp, dl),
                    (g_raw, dm2, dwr2, dww2, du2, dp2),
                    grad_act,
                )
                dm, dm2, dwr, dwr2, dww, dww2 = dm2, dm, dwr2, dwr, dww2, dww
                du, du2, dp, dp2 = du2, du, dp2, dp
                assign(d_raw[b, t], g_raw)
                # h_t feeds the interface, the next step's controller and (standard) the output
                assign(d_state, dh)
                _matvec_t_add(w_xi, g_raw, d_state)
                if not pnr:
                    d_state += d_out[b, t, :H]
                _controller_backward(
                    kind,
                    activation,
                    gates[b, t],
                    hs[b, s1],
                    cs[b, s1],
                    cs[b, s],
                    d_state,
                    dc,
                    d_pre_t,
                    scratch,
                )
                assign(d_hbar_t, d_pre_t)
                if pnr:  # h_out = tanh(hbar[:H]), eq. 10
                    for j in range(H):
                        d_hbar_t[j] += d_out[b, t, j] * (1.0 - out[b, t, j] * out[b, t, j])
                dh[:] = 0.0
                if kind != FNN:
                    _matvec_t_add(w_h, d_pre_t, dh)
                for j in range(RW):  # R W dots along G (the rows of w_r are only R W long)
                    dr[j] = _fast_dot(w_r_t[j], d_hbar_t)
                assign(d_pre[b, t], d_pre_t)
                assign(d_hbar[b, t], d_hbar_t)
        assign(d_h0[b], dh)
        assign(d_c0[b], dc)
        assign(d_r0[b], dr)
        assign(d_m0[b], dm.T)
        assign(d_wr0[b], dwr)
        assign(d_ww0[b], dww)
        assign(d_u0[b], du)
        assign(d_p0[b], dp)
        assign(d_l0[b], dl)
    return d_hbar, d_pre, d_raw, (d_h0, d_c0, d_r0, d_m0, d_wr0, d_ww0, d_u0, d_p0, d_l0)
