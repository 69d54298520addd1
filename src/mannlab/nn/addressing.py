"""Memory addressing primitives: pure tensor functions, no parameters.

Notation (Graves et al. 2014, "Neural Turing Machines"; equations as written in
the NTM section of Taguchi & Tsuruoka, "Partially Non-Recurrent Controllers"):

    B  batch size          N  memory slots (rows of M)
    W  memory width        H  number of heads addressed together
    S  number of allowed shifts, S = 2 * shift_range + 1

Every function works on a batch of heads at once: weightings are (B, H, N),
keys (B, H, W), per-head scalars (B, H), memory (B, N, W). Nothing loops over
batch, heads or slots.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

#: Guard for cosine similarity of (near-)zero vectors and for 0^gamma gradients.
EPS = 1e-8


def cosine_similarity(keys: torch.Tensor, memory: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """K[k, M(i)] = k . M(i) / (|k| |M(i)|) for every head and slot.

    keys (B, H, W), memory (B, N, W) -> (B, H, N). Norms are clamped below by
    ``eps`` so an all-zero key or slot gives similarity 0 instead of NaN.
    """
    eps = representable(eps, memory.dtype)
    return F.normalize(keys, dim=-1, eps=eps) @ F.normalize(memory, dim=-1, eps=eps).transpose(1, 2)


def representable(eps: float, dtype: torch.dtype) -> float:
    """``eps``, raised to the smallest normal number of ``dtype`` where it is below it: in
    float16 1e-8 rounds to 0, and a zero guard makes an all-zero slot's norm 0 / 0."""
    return max(eps, torch.finfo(dtype).tiny) if dtype.is_floating_point else eps


def content_weights(
    keys: torch.Tensor, memory: torch.Tensor, strength: torch.Tensor, eps: float = EPS
) -> torch.Tensor:
    """Content addressing, w^c(i) = exp(beta K[k, M(i)]) / sum_j exp(beta K[k, M(j)]).

    keys k (B, H, W), memory M (B, N, W), key strength beta (B, H) >= 0 -> (B, H, N).
    (Eq. 8 of Taguchi & Tsuruoka prints beta outside the exponential; the NTM
    paper and every implementation put it inside, as here.)
    """
    return torch.softmax(strength.unsqueeze(-1) * cosine_similarity(keys, memory, eps), dim=-1)


def interpolate(content: torch.Tensor, previous: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Interpolation, w^g = g w^c + (1 - g) w_{t-1}.

    content w^c (B, H, N), previous w_{t-1} (B, H, N), gate g (B, H) in [0, 1] -> (B, H, N),
    in the widest of their dtypes (under autocast the gate comes from a layer in the low one).
    """
    previous, content, gate = _common_dtype(previous, content, gate)
    return torch.lerp(previous, content, gate.unsqueeze(-1))


def _common_dtype(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors in the dtype torch's type promotion gives them together: torch.lerp, unlike
    the arithmetic operators, wants one dtype and autocast does not cast for it."""
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return tuple(t.to(dtype) for t in tensors)


@lru_cache(maxsize=64)
def _shift_index(slots: int, shift_range: int, device: torch.device) -> torch.Tensor:
    """index[i, m] = (i - k) mod N with k = m - shift_range: the slot shift k brings to i."""
    i = torch.arange(slots, device=device).unsqueeze(1)
    k = torch.arange(-shift_range, shift_range + 1, device=device).unsqueeze(0)
    return (i - k) % slots


def circular_shift(weights: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotation by a distribution over integer shifts, w~(i) = sum_j w^g(j) s(i - j) (mod N).

    weights w^g (B, H, N); shift s (B, H, S) with S = 2 r + 1 odd, where
    s[..., r + k] is the probability of moving the focus by k slots (k = -r..r;
    k = +1 moves weight from slot i to slot i + 1). Requires S <= N.
    """
    slots, num_shifts = weights.shape[-1], shift.shape[-1]
    if num_shifts % 2 != 1 or num_shifts > slots:
        raise ValueError(f"shift needs an odd size S = 2r+1 <= N = {slots}, got S = {num_shifts}")
    index = _shift_index(slots, num_shifts // 2, weights.device)
    # weights[..., index] is (B, H, N, S): entry [i, m] = w^g(i - k), then sum over k.
    return (weights[..., index] @ shift.unsqueeze(-1)).squeeze(-1)


def sharpen(weights: torch.Tensor, gamma: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Sharpening, w(i) = w~(i)^gamma / sum_j w~(j)^gamma with gamma >= 1.

    weights w~ (B, H, N), gamma (B, H) -> (B, H, N). ``eps`` is added before the
    power so the gradient with respect to gamma (w^gamma log w) is finite at w = 0.
    Computed as softmax(gamma log(w~ + eps)), the same value as the ratio of
    powers but safe from underflow (every w~^gamma can underflow to 0 for large
    gamma) and cheaper to differentiate than a tensor-exponent pow.
    """
    return torch.softmax(gamma.unsqueeze(-1) * torch.log(weights + eps), dim=-1)


def write(
    memory: torch.Tensor, weights: torch.Tensor, erase: torch.Tensor, add: torch.Tensor
) -> torch.Tensor:
    """Erase then add, M_t(i) = M_{t-1}(i) prod_h [1 - w_h(i) e_h] + sum_h w_h(i) a_h.

    memory M_{t-1} (B, N, W), write weightings w (B, H, N), erase vectors
    e (B, H, W) in [0, 1], add vectors a (B, H, W) -> M_t (B, N, W). With several
    write heads the erasures multiply and the additions sum, so the order of the
    heads does not matter (NTM paper, section 3.2).
    """
    keep = 1 - weights.unsqueeze(-1) * erase.unsqueeze(-2)  # (B, H, N, W)
    keep = keep.squeeze(1) if keep.shape[1] == 1 else keep.prod(dim=1)
    return memory * keep + weights.transpose(1, 2) @ add


def read(memory: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Read, r = sum_i w(i) M(i) for each head: memory (B, N, W), weights (B, H, N) -> (B, H, W)."""
    return weights @ memory


# ---------------------------------------------------------------------------
# Differentiable Neural Computer (Graves et al. 2016, "Hybrid computing using a
# neural network with dynamic external memory"), equations as written in the DNC
# section of Taguchi & Tsuruoka, with its text corrected as the DNC paper has it:
# u_t = (u_{t-1} + w^w_{t-1} - u_{t-1} w^w_{t-1}) psi_t, and L[i, i] = 0 in the links.
#
#     R  number of read heads        one write head (the DNC's)
#
# Write weightings of the single write head are (B, N); read weightings are
# (B, R, N); the temporal link matrix is (B, N, N) with L[i, j] the degree to
# which slot i was written right after slot j. Content weights c^w, c^{r,i} come
# from ``content_weights`` above; the memory update and the reads are ``write``
# and ``read``.
# ---------------------------------------------------------------------------


def retention(free_gates: torch.Tensor, read_weights: torch.Tensor) -> torch.Tensor:
    """Memory retention, psi_t = prod_i (1 - f^i_t w^{r,i}_{t-1}).

    free gates f_t (B, R) in [0, 1], previous read weightings w^r_{t-1} (B, R, N)
    -> psi_t (B, N) in [0, 1]: how much of each slot the free gates do not release.
    """
    keep = 1 - free_gates.unsqueeze(-1) * read_weights  # (B, R, N)
    return keep.squeeze(1) if keep.shape[1] == 1 else keep.prod(dim=1)


def usage(previous: torch.Tensor, write_weights: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """Usage, u_t = (u_{t-1} + w^w_{t-1} - u_{t-1} o w^w_{t-1}) o psi_t.

    previous usage u_{t-1} (B, N), previous write weighting w^w_{t-1} (B, N),
    retention psi_t (B, N) -> u_t (B, N) in [0, 1].
    """
    return torch.addcmul(previous, write_weights, 1 - previous) * psi


def allocation(usage: torch.Tensor) -> torch.Tensor:
    """Allocation weighting, a_t[phi_t[j]] = (1 - u_t[phi_t[j]]) prod_{i<j} u_t[phi_t[i]].

    usage u_t (B, N) -> a_t (B, N), with sum_j a_t[j] = 1 - prod_j u_t[j].
    phi_t lists the slots by ascending usage (the free list); the sort is
    stable, so equal usages go to the lower slot index first. The order is a
    constant for the gradient (it is piecewise constant in u); the values reach
    a_t through a gather, an exclusive cumulative product and a scatter.
    """
    order = torch.argsort(usage.detach(), dim=-1, stable=True)  # phi_t
    ranked = usage.gather(-1, order)  # u_t[phi_t[j]]
    # exclusive cumprod: prod_{i<j} u_t[phi_t[i]], 1 for j = 0
    before = torch.cumprod(torch.cat([torch.ones_like(ranked[..., :1]), ranked[..., :-1]], -1), -1)
    return torch.zeros_like(usage).scatter(-1, order, (1 - ranked) * before)


def write_weighting(
    allocation: torch.Tensor, content: torch.Tensor, write_gate: torch.Tensor, allocation_gate: torch.Tensor
) -> torch.Tensor:
    """Write weighting, w^w_t = g^w [g^a a_t + (1 - g^a) c^w_t].

    allocation a_t (B, N), content weighting c^w_t (B, N), write gate g^w (B,)
    and allocation gate g^a (B,) in [0, 1] -> w^w_t (B, N), summing to <= 1.
    """
    content, allocation, allocation_gate = _common_dtype(content, allocation, allocation_gate)
    return write_gate.unsqueeze(-1) * torch.lerp(content, allocation, allocation_gate.unsqueeze(-1))


def precedence(previous: torch.Tensor, write_weights: torch.Tensor) -> torch.Tensor:
    """Precedence, p_t = (1 - sum_i w^w_t[i]) p_{t-1} + w^w_t  (p_0 = 0).

    previous precedence p_{t-1} (B, N), write weighting w^w_t (B, N) -> p_t (B, N):
    where the last write went, fading only when something is written again.
    """
    return torch.addcmul(write_weights, 1 - write_weights.sum(-1, keepdim=True), previous)


def link_matrix(
    previous: torch.Tensor, write_weights: torch.Tensor, previous_precedence: torch.Tensor
) -> torch.Tensor:
    """Temporal links, L_t[i,j] = (1 - w^w_t[i] - w^w_t[j]) L_{t-1}[i,j] + w^w_t[i] p_{t-1}[j].

    previous links L_{t-1} (B, N, N), write weighting w^w_t (B, N), previous
    precedence p_{t-1} (B, N) -> L_t (B, N, N) with L_t[i, i] = 0 (the diagonal is
    masked, so a slot never links to itself). Rows and columns sum to <= 1.
    """
    w_i, w_j = write_weights.unsqueeze(-1), write_weights.unsqueeze(-2)
    keep = (1 - w_i) - w_j  # (B, N, N)
    links = torch.addcmul(w_i * previous_precedence.unsqueeze(-2), keep, previous)
    # In place on a fresh tensor (addcmul does not save its output for backward):
    # half the forward time of masked_fill, which copies the whole (B, N, N).
    links.diagonal(dim1=-2, dim2=-1).zero_()
    return links


def directional_weights(links: torch.Tensor, read_weights: torch.Tensor):
    """Forward and backward weightings, f^i_t = L_t w^{r,i}_{t-1}, b^i_t = L_t^T w^{r,i}_{t-1}.

    links L_t (B, N, N), previous read weightings w^r_{t-1} (B, R, N) ->
    (f_t, b_t), each (B, R, N): f moves each head to the slots written after
    the ones it read, b to those written before. (The summary writes w^r_t;
    that would be circular, so the previous weighting is used, as in the DNC paper.)
    """
    forward = read_weights @ links.transpose(1, 2)  # f[r, i] = sum_j L[i, j] w[r, j]
    backward = read_weights @ links  # b[r, j] = sum_i L[i, j] w[r, i]
    return forward, backward


def read_weighting(
    backward: torch.Tensor, content: torch.Tensor, forward: torch.Tensor, modes: torch.Tensor
) -> torch.Tensor:
    """Read weighting, w^{r,i}_t = pi^i_t[0] b^i_t + pi^i_t[1] c^{r,i}_t + pi^i_t[2] f^i_t.

    backward b_t, content c^r_t and forward f_t weightings (B, R, N); read modes
    pi_t (B, R, 3), a distribution over (backward, content, forward) -> w^r_t (B, R, N).
    """
    return (torch.stack([backward, content, forward], dim=-1) @ modes.unsqueeze(-1)).squeeze(-1)
