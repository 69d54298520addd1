"""ARMIN's Triton path: a whole sequence of steps (eqs. 3-10, the write of section 3.3) as one
autograd node over the kernels of ops/armin/triton_kernels.py. Reached through
mannlab.ops.armin.armin_sequence (backend "triton"); tests/ops/test_armin_kernels.py checks it
against reference.py (in Triton's interpreter where there is no GPU).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from mannlab.ops.armin import triton_kernels
from mannlab.ops.armin.gradients import parameter_grads
from mannlab.ops.armin.records import ARMINOptions, ARMINWeights, WeightRecords
from mannlab.ops.armin.triton_kernels import TritonRecords


class ARMINTritonSequence(torch.autograd.Function):
    """Called with the fields of armin_sequence's records in order (options, the ARMINInputs,
    the ARMINCarry, the ARMINWeights); returns o (B, T, C), h_T, M_T. The backward kernel gives
    the pre-activation gradients; the weight gradients are one matrix product each over all
    B * T steps (gradients.py)."""

    @staticmethod
    def forward(ctx, options: ARMINOptions, xp, noise, zone, h0, m0, steps0, *weight_list):
        weights = ARMINWeights(*weight_list)
        out, h_t, m_t, records = triton_kernels.sequence_forward(
            xp,
            noise,
            zone,
            h0,
            m0,
            steps0,
            weights,
            options.mode,
            options.inverse_temperature,
            options.eps,
            options.keep,
        )
        if records is not None:  # options.keep
            # everything through save_for_backward (a tensor kept on ctx would make a cycle)
            ctx.save_for_backward(zone, steps0, *weights, *records)
        ctx.options = options
        ctx.width = xp.shape[-1]
        return out, h_t, m_t

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_m):
        options = ctx.options
        zone, steps0, *rest = ctx.saved_tensors
        count = len(ARMINWeights._fields)
        weights = ARMINWeights(*rest[:count])
        records = TritonRecords(*rest[count:])
        grads = triton_kernels.sequence_backward(
            records, zone, steps0, weights, options.mode, options.inverse_temperature, d_out, d_h, d_m
        )
        named = records._asdict()
        d_xp, d_weights = parameter_grads(
            grads,
            WeightRecords(*(named[name] for name in WeightRecords._fields)),
            weights.write_map is not None,
            ctx.width,
        )
        return None, d_xp, None, None, grads.d_h0, grads.d_m0, None, *d_weights
