"""ARMIN's numba path: a whole sequence of steps (eqs. 3-10, the write of section 3.3) as one
autograd node over the kernels of ops/armin/kernels.py (where that pays: records.pays). Reached through
mannlab.ops.armin.armin_sequence (backend "numba"); tests/models/test_armin.py checks values, samples
and every gradient against the cell's per-step tensor path, tests/ops/ against reference.py.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.armin.gradients import parameter_grads
from mannlab.ops.armin.records import (
    MODES,
    ARMINOptions,
    ARMINWeights,
    PreactivationGrads,
    WeightRecords,
)
from mannlab.ops.bridge import as_array
from mannlab.ops.fields import split_records
from mannlab.ops.threads import KEEP, Blocks, Rows


class NumbaRecords(NamedTuple):
    """What kernels.sequence_forward keeps for its backward, per row block, in its order
    (arrays (B, T, ...); see kernels.py)."""

    hprev: np.ndarray
    s: np.ndarray
    y: np.ndarray
    r: np.ndarray
    c: np.ndarray
    hg: np.ndarray
    rg: np.ndarray
    xhat_c: np.ndarray
    xhat_g: np.ndarray
    xhat_h: np.ndarray
    rstd: np.ndarray
    act: np.ndarray
    hs: np.ndarray
    v: np.ndarray
    w: np.ndarray
    memory: np.ndarray
    tanh: np.ndarray
    zone: np.ndarray


class ARMINSequence(torch.autograd.Function):
    """A whole sequence of ARMIN steps (eqs. 3-10, the write of section 3.3) as one autograd
    node whose forward and backward are single calls of ops/armin/kernels.py. Called by
    mannlab.ops.armin.armin_sequence with the options, the fields of the ARMINInputs, h_0, M_0,
    the steps taken, and the fields of the ARMINWeights; returns o (B, T, C), h_T, M_T. The weight
    gradients are one matrix product each over all B * T steps (gradients.py)."""

    @staticmethod
    def forward(ctx, options: ARMINOptions, xp, noise, zone, h0, m0, steps0, *weight_list):
        a = as_array
        weights = ARMINWeights(*weight_list)
        mode = MODES.index(options.mode)
        C = weights.control_r.shape[0]
        use_map, use_zone, noisy = weights.write_map is not None, zone is not None, noise is not None
        noise = noise if noisy else xp.new_zeros(1, 1, 1)
        zone = zone if use_zone else xp.new_zeros(1, 1, 1)
        map_t = a(weights.write_map.t()) if weights.write_map is not None else np.zeros((1, 1), a(xp).dtype)
        kernels = dispatch.load("armin")
        assert kernels is not None  # dispatch chose this path: they loaded
        out, h, m, saved = threads.call(
            kernels.sequence_forward,
            (
                Rows(a(xp)),
                Rows(a(noise), 1) if noisy else a(noise),
                Rows(a(zone), 1) if use_zone else a(zone),
                use_zone,
                Rows(a(h0)),
                Rows(a(m0)),
                Rows(a(steps0)),
                a(weights.control_h[:C].t()),
                a(weights.control_h[C:].t()),
                a(weights.control_r.t()),
                a(weights.gates_h.t()),
                a(weights.gates_r.t()),
                map_t,
                use_map,
                a(weights.ln_control_weight),
                a(weights.ln_control_bias),
                a(weights.ln_gates_weight),
                a(weights.ln_gates_bias),
                a(weights.ln_hidden_weight),
                a(weights.ln_hidden_bias),
                options.eps,
                options.inverse_temperature,
                mode,
                options.backward,
            ),
            (0, 0, 0, KEEP),  # what the backward reads stays in its row blocks: never copied
            xp.shape[0],
        )
        # everything through save_for_backward (a tensor kept on ctx would make a cycle)
        if options.backward:
            ctx.save_for_backward(
                steps0, *weights, *(torch.from_numpy(v) for block in saved.values for v in block)
            )
        ctx.options = (use_map, use_zone, float(options.inverse_temperature), mode, xp.shape[-1], saved.parts)
        return torch.from_numpy(out), torch.from_numpy(h), torch.from_numpy(m)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_m):
        use_map, use_zone, inv_tau, mode, width, parts = ctx.options
        steps0, *rest = ctx.saved_tensors
        weights, flat = split_records(rest, ARMINWeights)
        a = as_array
        map_w = a(weights.write_map) if use_map else np.zeros((1, 1), a(weights.control_h).dtype)
        n = len(flat) // len(parts)
        blocks = [flat[i * n : (i + 1) * n] for i in range(len(parts))]  # the forward's saved, per block
        grads = threads.call(
            dispatch.load("armin").sequence_backward,
            (
                Blocks([tuple(a(v) for v in block) for block in blocks], parts),
                Rows(a(steps0)),
                a(weights.control_h),
                a(weights.control_r),
                a(weights.gates_h),
                a(weights.gates_r),
                map_w,
                use_map,
                use_zone,
                a(weights.ln_control_weight),
                a(weights.ln_gates_weight),
                a(weights.ln_hidden_weight),
                inv_tau,
                mode,
                Rows(a(d_out)),
                Rows(a(d_h)),
                Rows(a(d_m)),
            ),
            (0,) * 9,
            d_out.shape[0],
        )
        grads = PreactivationGrads(*(torch.from_numpy(g) for g in grads))

        def rows(name):  # one saved record over the whole batch
            i = NumbaRecords._fields.index(name)
            return blocks[0][i] if len(blocks) == 1 else torch.cat([block[i] for block in blocks])

        records = WeightRecords(*(rows(name) for name in WeightRecords._fields))
        d_xp, d_weights = parameter_grads(grads, records, use_map, width)
        return None, d_xp, None, None, grads.d_h0, grads.d_m0, None, *d_weights
