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
    return F.normalize(keys, dim=-1, eps=eps) @ F.normalize(memory, dim=-1, eps=eps).transpose(1, 2)


def content_weights(keys: torch.Tensor, memory: torch.Tensor, strength: torch.Tensor,
                    eps: float = EPS) -> torch.Tensor:
    """Content addressing, w^c(i) = exp(beta K[k, M(i)]) / sum_j exp(beta K[k, M(j)]).

    keys k (B, H, W), memory M (B, N, W), key strength beta (B, H) >= 0 -> (B, H, N).
    (Eq. 8 of Taguchi & Tsuruoka prints beta outside the exponential; the NTM
    paper and every implementation put it inside, as here.)
    """
    return torch.softmax(strength.unsqueeze(-1) * cosine_similarity(keys, memory, eps), dim=-1)


def interpolate(content: torch.Tensor, previous: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Interpolation, w^g = g w^c + (1 - g) w_{t-1}.

    content w^c (B, H, N), previous w_{t-1} (B, H, N), gate g (B, H) in [0, 1] -> (B, H, N).
    """
    return torch.lerp(previous, content, gate.unsqueeze(-1))


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


def write(memory: torch.Tensor, weights: torch.Tensor, erase: torch.Tensor,
          add: torch.Tensor) -> torch.Tensor:
    """Erase then add, M_t(i) = M_{t-1}(i) prod_h [1 - w_h(i) e_h] + sum_h w_h(i) a_h.

    memory M_{t-1} (B, N, W), write weightings w (B, H, N), erase vectors
    e (B, H, W) in [0, 1], add vectors a (B, H, W) -> M_t (B, N, W). With several
    write heads the erasures multiply and the additions sum, so the order of the
    heads does not matter (NTM paper, section 3.2).
    """
    keep = 1 - weights.unsqueeze(-1) * erase.unsqueeze(-2)        # (B, H, N, W)
    keep = keep.squeeze(1) if keep.shape[1] == 1 else keep.prod(dim=1)
    return memory * keep + weights.transpose(1, 2) @ add


def read(memory: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Read, r = sum_i w(i) M(i) for each head: memory (B, N, W), weights (B, H, N) -> (B, H, W)."""
    return weights @ memory
