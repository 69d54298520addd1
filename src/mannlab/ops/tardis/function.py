"""TARDIS's compiled path: a whole sequence of steps (eqs. 1-10, 18-19, the writes of
algorithm 1) as one autograd node over the kernels of ops/tardis/kernels.py.
mannlab.models.tardis (``TARDISCell.run_kernels``) feeds it; tests/test_tardis.py checks values,
samples and every gradient against the cell's per-step tensor path.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.threads import KEEP, SUM, Blocks, Rows

#: The kernels' addressing modes (ops/tardis/kernels.py: GUMBEL, REINFORCE, ARGMAX).
MODES = {"gumbel": 0, "reinforce": 1, "argmax": 2}


class TARDISSequence(torch.autograd.Function):
    """A whole sequence of TARDIS steps (eqs. 1-10, 18-19, the writes of algorithm 1) as one
    autograd node whose forward and backward are single calls of ops/tardis/kernels.py.
    Outputs: h_t, r_t, p_t = softmax(π_t), the read and write one-hots, [α_t, β_t], 1/τ_t, u_t
    (B, T, .) and the final c, C, read counts, last read. Gradients not asked for are None
    (``set_materialize_grads(False)``), so parameters no gradient reaches stay None as on the
    tensor path (the read MLP under argmax reads, the temperature layer when 1/τ is unused).
    The weight gradients are one matrix product each over all B * T steps."""

    @staticmethod
    def forward(
        ctx,
        xg,
        xr,
        gumbel,
        logistic,
        mask,
        h0,
        c0,
        C0,
        mp0,
        aproj,
        counts0,
        last0,
        steps0,
        address,
        w_hg,
        w_rg,
        w_m,
        w_c,
        w_qh,
        w_qu,
        score,
        w_tau,
        b_tau,
        lng_w,
        lng_b,
        lnc_w,
        lnc_b,
        lnm_w,
        lnm_b,
        options,
    ):
        mode, train, learned, inv_tau, use_ln, eps, keep, constants = options
        last_read_penalty, reset_temperature, usage_eps = constants
        a = as_array
        dtype = a(xg).dtype
        none = np.zeros((1, 1, 1), dtype)
        one = np.ones(1, dtype)
        lnv = [a(p) if use_ln else one for p in (lng_w, lng_b, lnc_w, lnc_b, lnm_w, lnm_b)]
        # everything h_t multiplies, [W_m; W_h; W_h^γ; w^τ] (c + 4d + 2 + m + 1, d): one product
        w_h = torch.cat([w_m, w_hg, w_qh, w_tau.view(1, -1)]).detach()
        (h_all, r_all, probs, read_w, write_w, resets, tau, usage, c, C, counts, last, saved) = threads.call(
            dispatch.load("tardis").sequence_forward,
            (
                Rows(a(xg)),
                Rows(a(xr)),
                none if gumbel is None else Rows(a(gumbel), 1),  # (T, B, .) draws and masks
                none if logistic is None else Rows(a(logistic), 1),
                none if mask is None else Rows(a(mask), 1),
                mask is not None,
                Rows(a(h0)),
                Rows(a(c0)),
                Rows(a(C0)),
                Rows(a(mp0)),
                a(aproj),
                a(address),
                Rows(a(counts0)),
                Rows(a(last0)),
                Rows(a(steps0)),
                a(w_h.t()),
                a(w_rg.t()),
                a(w_c.t()),
                a(w_qu.t()),
                a(score),
                a(b_tau),
                learned,
                inv_tau,
                use_ln,
                *lnv,
                eps,
                last_read_penalty,
                reset_temperature,
                usage_eps,
                mode,
                train,
                keep,
            ),
            (0,) * 12 + (KEEP,),  # what the backward reads stays in its row blocks: never copied
            xg.shape[0],
        )
        outputs = tuple(
            torch.from_numpy(v)
            for v in (h_all, r_all, probs, read_w, write_w, resets, tau, usage, c, C, counts, last)
        )
        h_all, r_all, probs, read_w, write_w, resets, tau, usage, c, C, counts, last = outputs
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(usage, counts, last)
        if mode != MODES["gumbel"]:
            ctx.mark_non_differentiable(read_w, write_w)
        if not learned:
            ctx.mark_non_differentiable(tau)
        # everything through save_for_backward (a tensor kept on ctx would make a cycle)
        if keep:
            ctx.save_for_backward(
                h_all,
                r_all,
                probs,
                resets,
                tau,
                usage,
                C,
                mask,
                address,
                aproj,
                steps0,
                w_h,
                w_rg,
                w_c,
                score,
                lng_w,
                lnc_w,
                lnm_w,
                *(torch.from_numpy(v) for block in saved.values for v in block),
            )
        ctx.options, ctx.parts = options, saved.parts
        return outputs

    @staticmethod
    @once_differentiable
    def backward(
        ctx,
        d_h_all,
        d_r_all,
        d_probs,
        d_read_w,
        d_write_w,
        d_resets,
        d_tau,
        d_usage,
        d_c,
        d_C,
        d_counts,
        d_last,
    ):
        mode, train, learned, inv_tau, use_ln, eps, keep, constants = ctx.options
        reset_temperature = constants[1]
        (
            h_all,
            r_all,
            probs,
            resets,
            tau,
            usage,
            C,
            mask,
            address,
            aproj,
            steps0,
            w_h,
            w_rg,
            w_c,
            score,
            lng_w,
            lnc_w,
            lnm_w,
            *flat,
        ) = ctx.saved_tensors
        n = len(flat) // len(ctx.parts)
        blocks = [flat[i * n : (i + 1) * n] for i in range(len(ctx.parts))]  # the forward's, per block
        a = as_array
        gumbel = mode == MODES["gumbel"]
        read_grad = gumbel or d_probs is not None  # does any gradient reach π?
        tau_grad = learned and (gumbel or d_tau is not None)

        def given(grad, like):
            return a(grad) if grad is not None else np.zeros(like.shape, a(like).dtype)

        one = np.ones(1, a(h_all).dtype)
        grads = threads.call(
            dispatch.load("tardis").sequence_backward,
            (
                Blocks([tuple(a(v) for v in block) for block in blocks], ctx.parts),
                Rows(a(h_all)),
                Rows(a(r_all)),
                Rows(a(probs)),
                Rows(a(resets)),
                Rows(a(tau)),
                Rows(a(C)),
                Rows(a(mask), 1) if mask is not None else np.zeros((1, 1, 1), a(h_all).dtype),
                mask is not None,
                a(address),
                a(aproj),
                Rows(a(steps0)),
                a(w_h),
                a(w_rg),
                a(w_c),
                a(score),
                learned,
                use_ln,
                *(a(p) if use_ln else one for p in (lng_w, lnc_w, lnm_w)),
                reset_temperature,
                mode,
                read_grad,
                Rows(given(d_h_all, h_all)),
                Rows(given(d_r_all, r_all)),
                Rows(given(d_probs, probs)),
                d_probs is not None,
                Rows(given(d_read_w, probs)),
                Rows(given(d_write_w, probs)),
                Rows(given(d_resets, resets)),
                Rows(given(d_tau, tau)),
                Rows(given(d_c, h_all[:, 0])),  # c_T is (B, d) as h_t
                Rows(given(d_C, C)),
            ),
            # per row, but the gradients of aproj, of the score vector and of the layer norms
            (0,) * 6 + (SUM, 0, 0, 0) + (SUM,) * 7,
            h_all.shape[0],
        )
        (d_xg, d_xr, d_h0, d_c0, d_C0, d_mp0, d_aproj, dv, dvm, d_taupre, d_score, *d_ln) = (
            torch.from_numpy(g) for g in grads
        )
        hprev, v_all = (
            blocks[0][i] if len(blocks) == 1 else torch.cat([b[i] for b in blocks]) for i in (0, 17)
        )
        d = hprev.shape[-1]

        def outer(grad, value):  # sum over batch and time of grad ⊗ value
            return grad.reshape(-1, grad.shape[-1]).t() @ value.reshape(-1, value.shape[-1])

        cand = slice(3 * d, 4 * d)  # the c̃ block: β W^g_h h, α W^g_r r (eq. 9)
        d_hp, d_rp = d_xg.clone(), d_xg.clone()
        d_hp[..., cand] *= resets[..., 1:]
        d_rp[..., cand] *= resets[..., :1]
        g_hg, g_rg = outer(d_hp, hprev), outer(d_rp, r_all)
        # x_r gets zeros without read gradients, as the tensor path's cat in precompute gives
        read = (
            (d_xr, d_mp0, d_aproj, outer(dvm, v_all), outer(d_xr, hprev), outer(d_xr, usage), d_score)
            if read_grad
            else (d_xr,) + (None,) * 6
        )
        temp = (d_taupre.reshape(1, -1) @ hprev.reshape(-1, d)).view(-1), d_taupre.sum().view(1)
        ln = tuple(d_ln) if use_ln else (None,) * 6
        return (
            d_xg,
            read[0],
            None,
            None,
            None,
            d_h0,
            d_c0,
            d_C0,
            read[1],
            read[2],
            None,
            None,
            None,
            None,
            g_hg,
            g_rg,
            outer(dv, h_all),
            read[3],
            read[4],
            read[5],
            read[6],
            *(temp if tau_grad else (None, None)),
            *ln,
            None,
        )
