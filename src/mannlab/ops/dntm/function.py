"""The D-NTM's compiled path: a whole sequence (eqs. 1-13, section 4's discrete weightings)
as one autograd node over the kernels of ops/dntm/kernels.py. mannlab.models.dntm
(``DNTMCell.run_kernels``) feeds it; tests/test_dntm.py checks values, samples and every
gradient against the cell's per-step tensor path.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.threads import KEEP, SUM, Blocks, Rows

#: The kernels' addressing modes (ops/dntm/kernels.py: SOFT, SAMPLE, ARGMAX, GUMBEL).
SOFT, SAMPLE, ARGMAX, GUMBEL = 0, 1, 2, 3


def _noise_rows(B, R, H, N):
    """Cuts the Exp(1) draws (T J, B K N) to rows [start, stop): each step's row holds the
    read heads' draws (B, R, N), then the write heads' (B, H, N)."""

    def cut(noise, start, stop):
        S = noise.shape[0]
        reads = noise[:, : B * R * N].reshape(S, B, R * N)[:, start:stop]
        writes = noise[:, B * R * N :].reshape(S, B, H * N)[:, start:stop]
        return np.concatenate([reads.reshape(S, -1), writes.reshape(S, -1)], 1)

    return cut


def _rows_if(grad, placeholder):
    """A gradient of the records as a kernel argument: its rows, or (not given) a placeholder."""
    return placeholder if grad is None else Rows(as_array(grad))


class DNTMSequence(torch.autograd.Function):
    """A whole D-NTM sequence (eqs. 1-13, section 4's discrete weightings) as one autograd node
    whose forward and backward are single calls of ops/dntm/kernels.py. Inputs: the
    precomputed inputs xp (B, T, P), the Exp(1) draws of the samples (REINFORCE's and
    straight-through Gumbel's; else a dummy), the initial
    state (h_0, φ_0 (B, R W), C_0, v^r_0, v^w_0), the controller's read and recurrent weights,
    the head layer, the address part A and, with sequential writes, the counts of writes (B,)
    and of reads per cell (B, N) (else ()). Outputs: the features (B, T, d_h + R W), the final
    h, φ, C, v^r, v^w, and the records the trace is built from: probabilities (B, T J, K, N),
    head activations (B, T J, P_heads), the memory [A; C_t] after each time step (B, T, N, W;
    with the trace only) and the chosen cells (B, T J, K; no gradient); last the final counts
    (or ()). The weight gradients
    are one matrix product each over all B T J steps."""

    @staticmethod
    def forward(ctx, xp, noise, h0, phi0, c0, vr0, vw0, w_r, w_h, b_hh, w_p, b_p, address, counts, options):
        R, H, J, gru, lru, nop, memory_keys, fixed_writes, mode, keep, trace, every, constants = options
        similarity_eps, lru_decay, _ = constants
        a = as_array
        dummy = np.zeros((1, 1), a(xp).dtype)
        B, N = xp.shape[0], address.shape[0]
        drawn = mode in (SAMPLE, GUMBEL)
        written0, reads0 = counts if fixed_writes else (xp.new_zeros(B), xp.new_zeros(B, N))
        out, h, phi, c, vr, vw, written, reads, records, saved = threads.call(
            dispatch.load("dntm").sequence_forward,
            (
                Rows(a(xp)),
                Rows(a(noise), _noise_rows(B, R, H, N)) if drawn else a(noise),
                Rows(a(h0)),
                Rows(a(phi0)),
                Rows(a(c0)),
                Rows(a(vr0)),
                Rows(a(vw0)),
                a(w_r.t()),
                a(w_h.t()) if gru else dummy,
                a(b_hh) if gru else dummy[0],
                a(w_p.t()),
                a(b_p),
                a(address),
                Rows(a(written0)),
                Rows(a(reads0)),
                R,
                H,
                J,
                gru,
                lru,
                nop,
                memory_keys,
                fixed_writes,
                mode,
                similarity_eps,
                lru_decay,
                keep,
                trace,
                every,
            ),
            # (B, ...) results; what only the backward reads stays in its row blocks (never copied)
            (0,) * 8 + ((0,) * 6, KEEP),
            B,
        )
        records = tuple(torch.from_numpy(r) for r in records)
        # everything through save_for_backward (a tensor kept on ctx would make a cycle)
        if keep:
            ctx.save_for_backward(
                xp,
                h0,
                w_r,
                w_h,
                w_p,
                address,
                noise,
                *records,
                *(torch.from_numpy(v) for block in saved.values for v in block),
            )
        ctx.options, ctx.parts = options, saved.parts
        hnew, act, beta_pre, probs, index, memory = records
        ctx.mark_non_differentiable(index)
        ctx.set_materialize_grads(False)
        counts = (torch.from_numpy(written), torch.from_numpy(reads)) if fixed_writes else ()
        return (*(torch.from_numpy(v) for v in (out, h, phi, c, vr, vw)), probs, act, memory, index, counts)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_phi, d_c, d_vr, d_vw, d_probs, d_act, d_memory, *_):
        R, H, J, gru, lru, nop, memory_keys, fixed_writes, mode, keep, trace, every, constants = ctx.options
        similarity_eps, lru_decay, inverse_temperature = constants
        xp, h0, w_r, w_h, w_p, address, noise, *rest = ctx.saved_tensors
        records, flat = rest[:6], rest[6:]
        n = len(flat) // len(ctx.parts)
        blocks = [flat[i * n : (i + 1) * n] for i in range(len(ctx.parts))]  # the forward's, per block
        hnew = records[0]
        a = as_array
        B, T = xp.shape[:2]
        N, dc = address.shape[0], blocks[0][3].shape[2]  # checkpoints of C: (B, ., d_c, N)
        dtype = a(xp).dtype

        def given(grad, *shape):  # a gradient autograd did not materialise: zeros
            return a(grad) if grad is not None else np.zeros(shape, dtype)

        dummy = np.zeros((1, 1), dtype)
        grads = threads.call(
            dispatch.load("dntm").sequence_backward,
            (
                Rows(a(xp)),
                Rows(a(h0)),
                tuple(Rows(a(v)) for v in records),
                Blocks([tuple(a(v) for v in block) for block in blocks], ctx.parts),
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
                fixed_writes,
                mode,
                similarity_eps,
                lru_decay,
                every,
                Rows(given(d_out, B, T, w_p.shape[1] + w_r.shape[1])),
                Rows(given(d_h, B, w_p.shape[1])),
                Rows(given(d_phi, B, w_r.shape[1])),
                Rows(given(d_c, B, N, dc)),
                Rows(given(d_vr, B, R, N)),
                Rows(given(d_vw, B, H, N)),
                _rows_if(d_probs, np.zeros((1, 1, 1, 1), dtype)),
                d_probs is not None,
                _rows_if(d_act, np.zeros((1, 1, 1), dtype)),
                d_act is not None,
                _rows_if(d_memory, np.zeros((1, 1, 1, 1), dtype)),
                d_memory is not None,
                Rows(a(noise), _noise_rows(B, R, H, N)) if mode == GUMBEL else dummy,
                inverse_temperature,
            ),
            (0,) * 4 + (SUM,) + (0,) * 5,  # per row, but the gradient of A
            B,
        )
        d_xp, d_a, d_g, d_p, d_address, d_h0, d_phi0, d_c0, d_vr0, d_vw0 = (
            torch.from_numpy(g) for g in grads
        )
        phiprev = blocks[0][0] if len(blocks) == 1 else torch.cat([block[0] for block in blocks])
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
            None,
        )
