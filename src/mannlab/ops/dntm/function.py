"""The D-NTM's compiled path: a whole sequence (eqs. 1-13, section 4's discrete weightings)
as one autograd node over the kernels of ops/dntm/kernels.py. mannlab.models.dntm
(``DNTMCell.run_fused``) feeds it; tests/test_dntm.py checks values, samples and every
gradient against the cell's per-step tensor path.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch
from mannlab.ops.bridge import as_array, limit_blas_threads

#: The kernels' addressing modes (ops/dntm/kernels.py: SOFT, SAMPLE, ARGMAX).
SOFT, SAMPLE, ARGMAX = 0, 1, 2


class DNTMSequence(torch.autograd.Function):
    """A whole D-NTM sequence (eqs. 1-13, section 4's discrete weightings) as one autograd node
    whose forward and backward are single calls of ops/dntm/kernels.py. Inputs: the
    precomputed inputs xp (B, T, P), the Exp(1) draws of the samples (or a dummy), the initial
    state (h_0, φ_0 (B, R W), C_0, v^r_0, v^w_0), the controller's read and recurrent weights,
    the head layer and the address part A. Outputs: the features (B, T, d_h + R W), the final
    h, φ, C, v^r, v^w, and the records the trace is built from: probabilities (B, T J, K, N),
    head activations (B, T J, P_heads), the memory [A; C_t] after each time step (B, T, N, W;
    with the trace only) and the chosen cells (B, T J, K; no gradient). The weight gradients
    are one matrix product each over all B T J steps."""

    @staticmethod
    def forward(ctx, xp, noise, h0, phi0, c0, vr0, vw0, w_r, w_h, b_hh, w_p, b_p, address, options):
        R, H, J, gru, lru, nop, memory_keys, mode, keep, trace, every, constants = options
        similarity_eps, lru_decay = constants
        a = as_array
        dummy = np.zeros((1, 1), a(xp).dtype)
        compiled = dispatch.load("dntm")
        limit_blas_threads(torch.get_num_threads())
        out, h, phi, c, vr, vw, records, saved = compiled.sequence_forward(
            a(xp),
            a(noise),
            a(h0),
            a(phi0),
            a(c0),
            a(vr0),
            a(vw0),
            a(w_r.t()),
            a(w_h.t()) if gru else dummy,
            a(b_hh) if gru else dummy[0],
            a(w_p.t()),
            a(b_p),
            a(address),
            R,
            H,
            J,
            gru,
            lru,
            nop,
            memory_keys,
            mode,
            similarity_eps,
            lru_decay,
            keep,
            trace,
            every,
        )
        records = tuple(torch.from_numpy(r) for r in records)
        # everything through save_for_backward (a tensor kept on ctx would make a cycle)
        if keep:
            ctx.save_for_backward(
                xp, h0, w_r, w_h, w_p, address, *records, *(torch.from_numpy(v) for v in saved)
            )
        ctx.options = options
        hnew, act, beta_pre, probs, index, memory = records
        ctx.mark_non_differentiable(index)
        ctx.set_materialize_grads(False)
        return (*(torch.from_numpy(v) for v in (out, h, phi, c, vr, vw)), probs, act, memory, index)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_phi, d_c, d_vr, d_vw, d_probs, d_act, d_memory, _):
        R, H, J, gru, lru, nop, memory_keys, mode, keep, trace, every, constants = ctx.options
        similarity_eps, lru_decay = constants
        xp, h0, w_r, w_h, w_p, address, *rest = ctx.saved_tensors
        records, saved = rest[:6], rest[6:]
        hnew = records[0]
        a = as_array
        B, T = xp.shape[:2]
        N, dc = address.shape[0], saved[3].shape[2]  # checkpoints of C: (B, ., d_c, N)
        dtype = a(xp).dtype

        def given(grad, *shape):  # a gradient autograd did not materialise: zeros
            return a(grad) if grad is not None else np.zeros(shape, dtype)

        dummy = np.zeros((1, 1), dtype)
        grads = dispatch.load("dntm").sequence_backward(
            a(xp),
            a(h0),
            tuple(a(v) for v in records),
            tuple(a(v) for v in saved),
            a(w_r),
            a(w_h) if gru else dummy,
            a(w_p),
            a(address),
            R,
            H,
            J,
            gru,
            lru,
            nop,
            memory_keys,
            mode,
            similarity_eps,
            lru_decay,
            every,
            given(d_out, B, T, w_p.shape[1] + w_r.shape[1]),
            given(d_h, B, w_p.shape[1]),
            given(d_phi, B, w_r.shape[1]),
            given(d_c, B, N, dc),
            given(d_vr, B, R, N),
            given(d_vw, B, H, N),
            given(d_probs, 1, 1, 1, 1),
            d_probs is not None,
            given(d_act, 1, 1, 1),
            d_act is not None,
            given(d_memory, 1, 1, 1, 1),
            d_memory is not None,
        )
        d_xp, d_a, d_g, d_p, d_address, d_h0, d_phi0, d_c0, d_vr0, d_vw0 = (
            torch.from_numpy(g) for g in grads
        )
        phiprev = saved[0]
        hprev = (
            torch.cat([h0.unsqueeze(1), hnew[:, :-1]], 1)  # h_{s-1}
            if gru and ctx.needs_input_grad[8]
            else None
        )

        def outer(grad, value):  # sum over batch and steps of grad ⊗ value
            return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])

        need = ctx.needs_input_grad
        return (
            d_xp,
            None,
            d_h0 if gru else None,
            d_phi0,
            d_c0,
            d_vr0,
            d_vw0,
            outer(d_a, phiprev) if need[7] else None,
            outer(d_g, hprev) if gru and need[8] else None,
            d_g.sum((0, 1)) if gru and need[9] else None,
            outer(d_p, hnew) if need[10] else None,
            d_p.sum((0, 1)) if need[11] else None,
            d_address,
            None,
        )
