"""The weight gradients of a whole ARMIN sequence from its pre-activation gradients: one matrix
product per weight over all B * T steps (the kernels' backwards produce only the per-step
gradients; this is the same for the numba and the Triton backward)."""

from __future__ import annotations

import torch

from mannlab.ops.armin.records import ARMINWeights, PreactivationGrads, WeightRecords


def _outer(grad: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """The sum over batch and time of grad ⊗ value: (B, T, O), (B, T, I) -> (O, I)."""
    return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])


def parameter_grads(
    grads: PreactivationGrads, records: WeightRecords, use_map: bool, width: int
) -> tuple[torch.Tensor, ARMINWeights]:
    """(the gradient of the projected input (B, T, width), the weights' gradients). Columns of
    the projected input past x_s get zeros."""
    d_xc, d_xg, d_xs = grads.d_xc, grads.d_xg, grads.d_xs
    g_control_h = _outer(torch.cat([d_xc, d_xs], -1), records.hprev)
    g_map = _outer(grads.d_v, records.hs) if use_map else None
    ln = [
        ((d_y * x_hat).sum((0, 1)), d_y.sum((0, 1)))
        for d_y, x_hat in (
            (grads.d_yc, records.xhat_c),
            (grads.d_yg, records.xhat_g),
            (grads.d_yh, records.xhat_h),
        )
    ]
    rest = width - d_xc.shape[-1] - d_xg.shape[-1] - d_xs.shape[-1]
    d_projected = torch.cat([d_xc, d_xg, d_xs, d_xs.new_zeros(*d_xs.shape[:2], rest)], -1)
    weights = ARMINWeights(
        control_h=g_control_h,
        control_r=_outer(d_xc, records.r),
        gates_h=_outer(d_xg, records.hg),
        gates_r=_outer(d_xg, records.rg),
        write_map=g_map,
        ln_control_weight=ln[0][0],
        ln_control_bias=ln[0][1],
        ln_gates_weight=ln[1][0],
        ln_gates_bias=ln[1][1],
        ln_hidden_weight=ln[2][0],
        ln_hidden_bias=ln[2][1],
    )
    return d_projected, weights
