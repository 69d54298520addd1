"""The NTM addressing chain as one autograd function with a hand-written backward.

    w = sharpen(circular_shift(interpolate(content_weights(k, M, beta), w_prev, g), s), gamma)

computes exactly the composition of the primitives in mannlab.nn.addressing (the
tests compare values and gradients with it and run gradcheck). Why it exists:
on a CPU the NTM step is bound by per-operation overhead, and autograd over the
composition records about 40 small nodes per step; this function records one
and its backward is about 30 batched tensor operations.

Shapes: keys (B, H, W), memory (B, N, W), w_prev (B, H, N), beta, g, gamma (B, H),
s (B, H, S) -> w (B, H, N).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from mannlab.nn.addressing import EPS, _shift_index


def _normalize(x: torch.Tensor, eps: float):
    """x / max(|x|, eps) along the last axis; returns the unit vectors and the clamped norms."""
    clamped = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)
    return x / clamped, clamped


def _normalize_backward(grad_unit, unit, clamped):
    """Gradient of u = x / max(|x|, eps): (du - u (u . du)) / max(|x|, eps).

    Exact wherever |x| > eps and at x = 0 (where u = 0); in the band 0 < |x| <= eps,
    which float32 training does not reach, the true gradient drops the radial term.
    """
    radial = (unit * grad_unit).sum(-1, keepdim=True)
    return torch.addcmul(grad_unit, unit, radial, value=-1) / clamped


@lru_cache(maxsize=64)
def _flat_shift_index(slots: int, shift_range: int, backward: bool, device: torch.device):
    """_shift_index flattened for index_select: forward (i - k) mod N, backward (j + k) mod N."""
    index = _shift_index(slots, shift_range, device)
    return (index.flip(-1) if backward else index).reshape(-1)


def _rotate(weights: torch.Tensor, num_shifts: int, backward: bool) -> torch.Tensor:
    """(B, H, N) -> (B, H, N, S), entry [i, m] = weights[(i -+ k_m) mod N]."""
    batch, heads, slots = weights.shape
    index = _flat_shift_index(slots, num_shifts // 2, backward, weights.device)
    return weights.index_select(-1, index).view(batch, heads, slots, num_shifts)


def address_forward(keys, memory, previous, beta, gate, shift, gamma):
    """Forward of the chain (no autograd); returns w (B, H, N) and what the backward needs."""
    unit_keys, key_norms = _normalize(keys, EPS)
    unit_mem, mem_norms = _normalize(memory, EPS)
    similarity = torch.bmm(unit_keys, unit_mem.transpose(1, 2))  # K (B, H, N)
    content = torch.softmax(beta.unsqueeze(-1) * similarity, dim=-1)  # w^c
    gated = torch.lerp(previous, content, gate.unsqueeze(-1))  # w^g
    rotated = _rotate(gated, shift.shape[-1], backward=False)  # (B, H, N, S)
    shift_row = shift.unsqueeze(-2)  # (B, H, 1, S)
    shifted = (rotated * shift_row).sum(-1)  # w~
    log_shifted = torch.log(shifted + EPS)
    weights = torch.softmax(gamma.unsqueeze(-1) * log_shifted, dim=-1)  # w
    saved = (
        unit_keys,
        key_norms,
        unit_mem,
        mem_norms,
        similarity,
        content,
        previous,
        beta,
        gate,
        shift_row,
        rotated,
        shifted,
        log_shifted,
        gamma,
        weights,
    )
    return weights, saved


def address_backward(saved, grad_w):
    """Gradients of the chain with respect to (keys, memory, previous, beta, gate, shift, gamma)."""
    (
        unit_keys,
        key_norms,
        unit_mem,
        mem_norms,
        similarity,
        content,
        previous,
        beta,
        gate,
        shift_row,
        rotated,
        shifted,
        log_shifted,
        gamma,
        weights,
    ) = saved
    # sharpening: w = softmax(gamma log(w~ + eps))
    grad_z = weights * (grad_w - (weights * grad_w).sum(-1, keepdim=True))
    grad_gamma = (grad_z * log_shifted).sum(-1)
    grad_shifted = gamma.unsqueeze(-1) * grad_z / (shifted + EPS)
    # circular shift: w~(i) = sum_m w^g((i - k_m) mod N) s(m)
    grad_shift = (grad_shifted.unsqueeze(-1) * rotated).sum(-2)
    grad_gated = (_rotate(grad_shifted, shift_row.shape[-1], backward=True) * shift_row).sum(-1)
    # interpolation: w^g = w_prev + g (w^c - w_prev)
    grad_content = gate.unsqueeze(-1) * grad_gated
    grad_previous = grad_gated - grad_content
    grad_gate = ((content - previous) * grad_gated).sum(-1)
    # content weights: w^c = softmax(beta K)
    grad_logits = content * (grad_content - (content * grad_content).sum(-1, keepdim=True))
    grad_beta = (grad_logits * similarity).sum(-1)
    grad_sim = beta.unsqueeze(-1) * grad_logits
    # cosine similarity: K = (k / |k|) (M / |M|)^T
    grad_keys = _normalize_backward(torch.bmm(grad_sim, unit_mem), unit_keys, key_norms)
    grad_memory = _normalize_backward(torch.bmm(grad_sim.transpose(1, 2), unit_keys), unit_mem, mem_norms)
    return grad_keys, grad_memory, grad_previous, grad_beta, grad_gate, grad_shift, grad_gamma


class NTMAddress(torch.autograd.Function):
    """Content -> interpolation -> circular shift -> sharpening, fused."""

    @staticmethod
    def forward(ctx, keys, memory, previous, beta, gate, shift, gamma):
        weights, saved = address_forward(keys, memory, previous, beta, gate, shift, gamma)
        ctx.save_for_backward(*saved)
        return weights

    @staticmethod
    def backward(ctx, grad_w):
        return address_backward(ctx.saved_tensors, grad_w)


def ntm_address(keys, memory, previous, beta, gate, shift, gamma) -> torch.Tensor:
    """NTM addressing (content, interpolation, shift, sharpening) with a fused backward."""
    return NTMAddress.apply(keys, memory, previous, beta, gate, shift, gamma)
