"""The NTM addressing chain as one autograd function with a hand-written backward.

    w = sharpen(circular_shift(interpolate(content_weights(k, M, beta), w_prev, g), s), gamma)

computes exactly the composition of the primitives in mannlab.addressing (the
tests compare values and gradients with it and run gradcheck). Why it exists:
on a CPU the NTM step is bound by per-operation overhead, and autograd over the
composition records about 40 small nodes per step; this function records one
and its backward is about 30 batched tensor operations.

Shapes: keys (B, H, W), memory (B, N, W), w_prev (B, H, N), beta, g, gamma (B, H),
s (B, H, S) -> w (B, H, N).
"""
from __future__ import annotations

import torch

from mannlab.addressing import EPS, _shift_index


def _normalize(x: torch.Tensor, eps: float):
    """x / max(|x|, eps) along the last axis; returns the unit vectors and the clamped norms."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    clamped = norm.clamp_min(eps)
    return x / clamped, clamped, norm > eps


def _normalize_backward(grad_unit, unit, clamped, active):
    """Gradient of x / max(|x|, eps): (du - u (u . du)) / |x| where |x| > eps, du / eps elsewhere."""
    radial = (unit * grad_unit).sum(-1, keepdim=True) * active
    return (grad_unit - unit * radial) / clamped


class NTMAddress(torch.autograd.Function):
    """Content -> interpolation -> circular shift -> sharpening, fused."""

    @staticmethod
    def forward(ctx, keys, memory, previous, beta, gate, shift, gamma):
        eps = EPS
        unit_keys, key_norms, key_active = _normalize(keys, eps)
        unit_mem, mem_norms, mem_active = _normalize(memory, eps)
        similarity = unit_keys @ unit_mem.transpose(1, 2)                   # K (B, H, N)
        content = torch.softmax(beta.unsqueeze(-1) * similarity, dim=-1)    # w^c
        gated = torch.lerp(previous, content, gate.unsqueeze(-1))           # w^g
        slots, num_shifts = memory.shape[1], shift.shape[-1]
        index = _shift_index(slots, num_shifts // 2, memory.device)
        rotated = gated[..., index]                                         # (B, H, N, S)
        shifted = (rotated @ shift.unsqueeze(-1)).squeeze(-1)               # w~
        log_shifted = torch.log(shifted + eps)
        weights = torch.softmax(gamma.unsqueeze(-1) * log_shifted, dim=-1)  # w
        ctx.save_for_backward(unit_keys, key_norms, key_active, unit_mem, mem_norms, mem_active,
                              similarity, content, previous, beta, gate, shift, rotated,
                              shifted, log_shifted, gamma, weights)
        return weights

    @staticmethod
    def backward(ctx, grad_w):
        (unit_keys, key_norms, key_active, unit_mem, mem_norms, mem_active, similarity, content,
         previous, beta, gate, shift, rotated, shifted, log_shifted, gamma, weights) = ctx.saved_tensors
        # sharpening: w = softmax(gamma log(w~ + eps))
        grad_z = weights * (grad_w - (weights * grad_w).sum(-1, keepdim=True))
        grad_gamma = (grad_z * log_shifted).sum(-1)
        grad_shifted = gamma.unsqueeze(-1) * grad_z / (shifted + EPS)
        # circular shift: w~(i) = sum_m w^g((i - k_m) mod N) s(m)
        grad_shift = (grad_shifted.unsqueeze(-2) @ rotated).squeeze(-2)
        slots, num_shifts = grad_shifted.shape[-1], shift.shape[-1]
        back_index = _shift_index(slots, num_shifts // 2, grad_w.device).flip(-1)  # (j + k_m) mod N
        grad_gated = (grad_shifted[..., back_index] @ shift.unsqueeze(-1)).squeeze(-1)
        # interpolation: w^g = w_prev + g (w^c - w_prev)
        g = gate.unsqueeze(-1)
        grad_content = g * grad_gated
        grad_previous = grad_gated - grad_content
        grad_gate = ((content - previous) * grad_gated).sum(-1)
        # content weights: w^c = softmax(beta K)
        grad_logits = content * (grad_content - (content * grad_content).sum(-1, keepdim=True))
        grad_beta = (grad_logits * similarity).sum(-1)
        grad_sim = beta.unsqueeze(-1) * grad_logits
        # cosine similarity: K = (k / |k|) (M / |M|)^T
        grad_keys = _normalize_backward(grad_sim @ unit_mem, unit_keys, key_norms, key_active)
        grad_memory = _normalize_backward(grad_sim.transpose(1, 2) @ unit_keys, unit_mem,
                                          mem_norms, mem_active)
        return grad_keys, grad_memory, grad_previous, grad_beta, grad_gate, grad_shift, grad_gamma


def ntm_address(keys, memory, previous, beta, gate, shift, gamma) -> torch.Tensor:
    """NTM addressing (content, interpolation, shift, sharpening) with a fused backward."""
    return NTMAddress.apply(keys, memory, previous, beta, gate, shift, gamma)
