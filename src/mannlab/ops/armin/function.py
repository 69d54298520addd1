"""ARMIN's compiled path: a whole sequence of steps (eqs. 3-10, the write of section 3.3)
as one autograd node over the kernels of ops/armin/kernels.py, and where that pays.
mannlab.models.armin (``ARMINCell.run_kernels``) feeds it; tests/test_armin.py checks values,
samples and every gradient against the cell's per-step tensor path.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.threads import KEEP, Blocks, Rows

#: The kernels' addressing modes (ops/armin/kernels.py: SOFT, GUMBEL_RELAXED, ...).
MODES = {"soft": 0, "gumbel-relaxed": 1, "gumbel": 2, "argmax": 3}
#: Where the compiled path pays (measured on the 2-core test machine, one thread, table-5
#: and char-LM sizes): the kernels' per-row work is scalar (no vectorised exp/tanh) and their
#: BLAS (SciPy's OpenBLAS) is up to 2x slower than torch's for few rows, so large batches
#: times hidden sizes run faster on the tensor path. Training (a backward follows): kernels
#: while batch * d_h <= 4096 (1.2-14x faster there; 0.92x at 32 x 256, 0.70x at 128 x 128).
#: Inference: at batch 1 (1.3-8x faster), else while batch * d_h <= 3200 and d_h <= 128
#: (1.0-1.3x; 0.7-0.8x at d_h = 256 with 4-32 rows).
KERNEL_MAX_TRAIN_ROWS_X_HIDDEN = 4096
KERNEL_MAX_INFER_ROWS_X_HIDDEN, KERNEL_MAX_INFER_HIDDEN = 3200, 128


def kernels_pay(batch: int, hidden_size: int, backward: bool) -> bool:
    """Whether the compiled path is expected to be faster than the tensor path for this
    batch and d_h (see KERNEL_MAX_* above); ``backward``: a training pass."""
    rows_x_hidden = batch * hidden_size
    if backward:
        return rows_x_hidden <= KERNEL_MAX_TRAIN_ROWS_X_HIDDEN
    return batch == 1 or (
        rows_x_hidden <= KERNEL_MAX_INFER_ROWS_X_HIDDEN and hidden_size <= KERNEL_MAX_INFER_HIDDEN
    )


class ARMINSequence(torch.autograd.Function):
    """A whole sequence of ARMIN steps (eqs. 3-10, the write of section 3.3) as one autograd
    node whose forward and backward are single calls of ops/armin/kernels.py. Inputs: the
    precomputed input projection xp (B, T, P), Gumbel noise (T, B, n) (or a dummy), h_0,
    M_0, the step counters, the weights and layer-norm parameters; outputs o (B, T, C),
    h_T, M_T. The weight gradients are one matrix product each over all B * T steps."""

    @staticmethod
    def forward(
        ctx,
        xp,
        noise,
        zone,
        h0,
        m0,
        steps0,
        w_ch,
        w_cr,
        w_gh,
        w_gr,
        w_map,
        lnc_w,
        lnc_b,
        lng_w,
        lng_b,
        lnh_w,
        lnh_b,
        eps,
        inv_tau,
        mode,
        keep,
    ):
        a = as_array
        C = w_cr.shape[0]
        use_map, use_zone = w_map is not None, zone is not None
        zone = zone if use_zone else xp.new_zeros(1, 1, 1)
        map_t = a(w_map.t()) if use_map else np.zeros((1, 1), a(xp).dtype)
        noisy = mode in (MODES["gumbel-relaxed"], MODES["gumbel"])  # else noise is a placeholder
        out, h, m, saved = threads.call(
            dispatch.load("armin").sequence_forward,
            (
                Rows(a(xp)),
                Rows(a(noise), 1) if noisy else a(noise),
                Rows(a(zone), 1) if use_zone else a(zone),
                use_zone,
                Rows(a(h0)),
                Rows(a(m0)),
                Rows(a(steps0)),
                a(w_ch[:C].t()),
                a(w_ch[C:].t()),
                a(w_cr.t()),
                a(w_gh.t()),
                a(w_gr.t()),
                map_t,
                use_map,
                a(lnc_w),
                a(lnc_b),
                a(lng_w),
                a(lng_b),
                a(lnh_w),
                a(lnh_b),
                eps,
                inv_tau,
                mode,
                keep,
            ),
            (0, 0, 0, KEEP),  # what the backward reads stays in its row blocks: never copied
            xp.shape[0],
        )
        # everything through save_for_backward (a tensor kept on ctx would make a cycle)
        if keep:
            ctx.save_for_backward(
                steps0,
                w_ch,
                w_cr,
                w_gh,
                w_gr,
                w_map,
                lnc_w,
                lng_w,
                lnh_w,
                *(torch.from_numpy(v) for block in saved.values for v in block),
            )
        ctx.options = (use_map, use_zone, float(inv_tau), int(mode), xp.shape[-1], saved.parts)
        return torch.from_numpy(out), torch.from_numpy(h), torch.from_numpy(m)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h, d_m):
        use_map, use_zone, inv_tau, mode, width, parts = ctx.options
        steps0, w_ch, w_cr, w_gh, w_gr, w_map, lnc_w, lng_w, lnh_w, *flat = ctx.saved_tensors
        a = as_array
        map_w = a(w_map) if use_map else np.zeros((1, 1), a(w_ch).dtype)
        n = len(flat) // len(parts)
        blocks = [flat[i * n : (i + 1) * n] for i in range(len(parts))]  # the forward's saved, per block
        grads = threads.call(
            dispatch.load("armin").sequence_backward,
            (
                Blocks([tuple(a(v) for v in block) for block in blocks], parts),
                Rows(a(steps0)),
                a(w_ch),
                a(w_cr),
                a(w_gh),
                a(w_gr),
                map_w,
                use_map,
                use_zone,
                a(lnc_w),
                a(lng_w),
                a(lnh_w),
                inv_tau,
                mode,
                Rows(a(d_out)),
                Rows(a(d_h)),
                Rows(a(d_m)),
            ),
            (0,) * 9,
            d_out.shape[0],
        )
        d_xc, d_xg, d_xs, d_v, d_yc, d_yg, d_yh, d_h0, d_m0 = (torch.from_numpy(g) for g in grads)

        def rows(i):  # saved array i over the whole batch
            return blocks[0][i] if len(blocks) == 1 else torch.cat([block[i] for block in blocks])

        hprev, r_all, hg_all, rg_all, xc_all, xg_all, xh_all, hs_all = (
            rows(i) for i in (0, 3, 5, 6, 7, 8, 9, 12)
        )

        def outer(grad, value):  # sum over batch and time of grad ⊗ value
            return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])

        g_ch = outer(torch.cat([d_xc, d_xs], -1), hprev)
        g_map = outer(d_v, hs_all) if use_map else None
        ln = [
            ((d_y * x_hat).sum((0, 1)), d_y.sum((0, 1)))
            for d_y, x_hat in ((d_yc, xc_all), (d_yg, xg_all), (d_yh, xh_all))
        ]
        rest = width - d_xc.shape[-1] - d_xg.shape[-1] - d_xs.shape[-1]
        d_xp = torch.cat([d_xc, d_xg, d_xs, d_xs.new_zeros(*d_xs.shape[:2], rest)], -1)
        return (
            d_xp,
            None,
            None,
            d_h0,
            d_m0,
            None,
            g_ch,
            outer(d_xc, r_all),
            outer(d_xg, hg_all),
            outer(d_xg, rg_all),
            g_map,
            *ln[0],
            *ln[1],
            *ln[2],
            None,
            None,
            None,
            None,
        )
