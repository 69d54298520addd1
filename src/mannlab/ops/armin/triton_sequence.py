"""ARMIN's Triton path: a whole sequence of steps (eqs. 3-10, the write of section 3.3) as one
autograd node over the kernels of ops/armin/triton_kernels.py, and their launchers. Reached through
mannlab.ops.armin.armin_sequence (backend "triton"); tests/ops/test_armin_kernels.py checks it
against reference.py (in Triton's interpreter where there is no GPU).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import triton
from torch.autograd.function import once_differentiable

from mannlab.ops.armin import triton_kernels
from mannlab.ops.armin.gradients import parameter_grads
from mannlab.ops.armin.records import (
    MODES,
    ARMINOptions,
    ARMINWeights,
    PreactivationGrads,
    WeightRecords,
)
from mannlab.ops.armin.triton_kernels import BLOCK_B, BLOCK_K
from mannlab.ops.fields import split_records


class TritonRecords(NamedTuple):
    """What the forward keeps for the backward, (B, T, .) each: h_{t-1}, s_t, the relaxed sample
    y (zeros for argmax), r_t, [g^h; g^r], h^g, r^g, the normalised inputs x̂ of the three layer
    norms, their 1/σ (B, T, 3), the gate activations [i, f, g, o^h, o^r], h_t (after zoneout),
    the written value v, the write weights w and the memory before each step (B, T + 1, n, d_r:
    the last is M_T)."""

    hprev: torch.Tensor
    s: torch.Tensor
    y: torch.Tensor
    r: torch.Tensor
    c: torch.Tensor
    hg: torch.Tensor
    rg: torch.Tensor
    xhat_c: torch.Tensor
    xhat_g: torch.Tensor
    xhat_h: torch.Tensor
    rstd: torch.Tensor
    act: torch.Tensor
    hs: torch.Tensor
    v: torch.Tensor
    w: torch.Tensor
    memory: torch.Tensor


def _launch(hidden: int, width: int, slots: int, mode: str, zone, write_map) -> dict:
    """What both kernels are compiled for: the sizes, padded block sizes (powers of two, at
    least 16), the mode and flags, and the warps and stages of a program."""
    blocks = {
        name: max(16, triton.next_power_of_2(n)) for name, n in (("BH", hidden), ("BR", width), ("BN", slots))
    }
    return dict(
        H=hidden,
        R=width,
        N=slots,
        **blocks,
        BLOCK_B=BLOCK_B,
        MODE=MODES.index(mode),
        USE_ZONE=zone is not None,
        USE_MAP=write_map is not None,
        KC=BLOCK_K,
        num_warps=8 if max(blocks.values()) >= 128 else 4,
        num_stages=1,
    )


def _sequence_forward(
    xp: torch.Tensor,
    noise: Optional[torch.Tensor],
    zone: Optional[torch.Tensor],
    h0: torch.Tensor,
    m0: torch.Tensor,
    steps0: torch.Tensor,
    weights: ARMINWeights,
    mode: str,
    inv_tau: float,
    eps: float,
    keep: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[TritonRecords]]:
    """o (B, T, C), h_T, M_T and (with ``keep``) the records of the backward."""
    xp = xp.contiguous()
    B, T, P = xp.shape
    H, N, R = h0.shape[1], m0.shape[1], m0.shape[2]
    C, G = H + R, 4 * H + R
    new = xp.new_empty
    memory = new(B, T + 1 if keep else 1, N, R)
    memory[:, 0] = m0
    out, h_t = new(B, T, C), new(B, H)
    if keep:
        records = TritonRecords(
            hprev=new(B, T, H),
            s=new(B, T, N),
            y=new(B, T, N),
            r=new(B, T, R),
            c=new(B, T, C),
            hg=new(B, T, H),
            rg=new(B, T, R),
            xhat_c=new(B, T, C),
            xhat_g=new(B, T, G),
            xhat_h=new(B, T, H),
            rstd=new(B, T, 3),
            act=new(B, T, G),
            hs=new(B, T, H),
            v=new(B, T, R),
            w=new(B, T, N),
            memory=memory,
        )
    else:
        records = None
    placeholder = out  # never read: its flag is off
    fields = records[:-1] if records is not None else (placeholder,) * (len(TritonRecords._fields) - 1)
    write_map = weights.write_map
    launch = _launch(H, R, N, mode, zone, write_map)
    scratch = new(triton.cdiv(B, BLOCK_B) * BLOCK_B, launch["BH"] + launch["BR"])
    triton_kernels.forward_kernel[(triton.cdiv(B, BLOCK_B),)](
        xp,
        placeholder if noise is None else noise.contiguous(),
        placeholder if zone is None else zone.contiguous(),
        h0.contiguous(),
        steps0.contiguous(),
        weights.control_h.contiguous(),
        weights.control_r.contiguous(),
        weights.gates_h.contiguous(),
        weights.gates_r.contiguous(),
        placeholder if write_map is None else write_map.contiguous(),
        weights.ln_control_weight.contiguous(),
        weights.ln_control_bias.contiguous(),
        weights.ln_gates_weight.contiguous(),
        weights.ln_gates_bias.contiguous(),
        weights.ln_hidden_weight.contiguous(),
        weights.ln_hidden_bias.contiguous(),
        out,
        h_t,
        memory,
        *fields,
        scratch,
        B,
        T,
        P,
        memory.shape[1] * N * R,
        N * R if keep else 0,
        float(eps),
        float(inv_tau),
        KEEP=keep,
        GATHER_READ=mode in ("gumbel", "argmax"),
        SCATTER_WRITE=mode in ("gumbel", "argmax") and not keep,
        **launch,
    )
    return out, h_t, memory[:, -1].clone(), records  # a copy: the record stays as the backward reads it


def _sequence_backward(
    records: TritonRecords,
    zone: Optional[torch.Tensor],
    steps0: torch.Tensor,
    weights: ARMINWeights,
    mode: str,
    inv_tau: float,
    d_out: torch.Tensor,
    d_ht: torch.Tensor,
    d_mt: torch.Tensor,
) -> PreactivationGrads:
    """The pre-activation gradients (records.PreactivationGrads) from the forward's records and
    the gradients of o, h_T and M_T."""
    B, T, H = records.hprev.shape
    N, R = records.memory.shape[2], records.memory.shape[3]
    C, G = H + R, 4 * H + R
    new = d_out.new_empty
    grads = PreactivationGrads(
        d_xc=new(B, T, C),
        d_xg=new(B, T, G),
        d_xs=new(B, T, N),
        d_v=new(B, T, R),
        d_yc=new(B, T, C),
        d_yg=new(B, T, G),
        d_yh=new(B, T, H),
        d_h0=new(B, H),
        d_m0=d_mt.contiguous().clone(),
    )
    write_map = weights.write_map
    triton_kernels.backward_kernel[(triton.cdiv(B, BLOCK_B),)](
        d_out.contiguous(),
        d_ht.contiguous(),
        grads.d_m0,
        grads.d_xc if zone is None else zone.contiguous(),
        steps0.contiguous(),
        weights.control_h.contiguous(),
        weights.control_r.contiguous(),
        weights.gates_h.contiguous(),
        weights.gates_r.contiguous(),
        grads.d_xc if write_map is None else write_map.contiguous(),
        weights.ln_control_weight.contiguous(),
        weights.ln_gates_weight.contiguous(),
        weights.ln_hidden_weight.contiguous(),
        weights.ln_hidden_bias.contiguous(),
        records.hprev,
        records.s,
        records.y,
        records.r,
        records.c,
        records.xhat_c,
        records.xhat_g,
        records.xhat_h,
        records.rstd,
        records.act,
        records.v,
        records.w,
        records.memory,
        grads.d_xc,
        grads.d_xg,
        grads.d_xs,
        grads.d_v,
        grads.d_yc,
        grads.d_yg,
        grads.d_yh,
        grads.d_h0,
        B,
        T,
        float(inv_tau),
        **_launch(H, R, N, mode, zone, write_map),
    )
    return grads


class ARMINTritonSequence(torch.autograd.Function):
    """Called by armin_sequence with the options, the fields of the ARMINInputs, h_0, M_0, the
    steps taken, and the fields of the ARMINWeights; returns o (B, T, C), h_T, M_T. The backward kernel gives
    the pre-activation gradients; the weight gradients are one matrix product each over all
    B * T steps (gradients.py)."""

    @staticmethod
    def forward(ctx, options: ARMINOptions, xp, noise, zone, h0, m0, steps0, *weight_list):
        weights = ARMINWeights(*weight_list)
        out, h_t, m_t, records = _sequence_forward(
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
            options.backward,
        )
        if records is not None:  # options.backward
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
        weights, records, _ = split_records(rest, ARMINWeights, TritonRecords)
        grads = _sequence_backward(
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
