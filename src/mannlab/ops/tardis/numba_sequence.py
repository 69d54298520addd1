"""TARDIS's numba path: a whole sequence of steps (eqs. 1-10, 18-19, the writes of algorithm 1)
as one autograd node over the kernels of ops/tardis/kernels.py. Reached through
mannlab.ops.tardis.tardis_sequence (backend "numba"); tests/ops/test_tardis_ops.py checks it
against reference.py, tests/models/test_tardis.py the model on it against the cell's step loop.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch, threads
from mannlab.ops.bridge import as_array
from mannlab.ops.fields import split_records
from mannlab.ops.tardis.records import (
    MODES,
    TARDISInputs,
    TARDISOptions,
    TARDISOutputs,
    TARDISResult,
    TARDISState,
    TARDISWeights,
    sequence_result,
)
from mannlab.ops.threads import KEEP, SUM, Blocks, Rows


class KernelWeights(NamedTuple):
    """:class:`TARDISWeights` as the kernels take them. The kernels keep P = W_m^γ M (k x m)
    up to date one written row at a time instead of multiplying the whole memory at every
    step, so they take W_m^γ split at the address columns and its products with M_0 and A,
    which autograd differentiates back into W_m^γ and C_0; the score a and w^τ as vectors."""

    memory_projection: torch.Tensor  # W_m^γ M_0 (B, k, m)
    address_projection: torch.Tensor  # W_m^γ[:, :a] A (k, m)
    address: torch.Tensor  # A (k, a)
    hidden_gates: torch.Tensor
    read_gates: torch.Tensor
    micro_state: torch.Tensor
    read_content: torch.Tensor  # W_m^γ[:, a:] (m, c)
    read_hidden: torch.Tensor
    read_usage: torch.Tensor
    read_score: torch.Tensor  # a (m,)
    temperature_weight: torch.Tensor  # w^τ (d,)
    temperature_bias: torch.Tensor
    ln_gates_weight: Optional[torch.Tensor]
    ln_gates_bias: Optional[torch.Tensor]
    ln_candidate_weight: Optional[torch.Tensor]
    ln_candidate_bias: Optional[torch.Tensor]
    ln_cell_weight: Optional[torch.Tensor]
    ln_cell_bias: Optional[torch.Tensor]


def kernel_weights(inputs: TARDISInputs, content: torch.Tensor, weights: TARDISWeights) -> KernelWeights:
    """The kernels' weights from the records (the products by autograd, before the node)."""
    a = weights.address.shape[1]
    w_mem = weights.read_memory
    memory = torch.cat([weights.address.to(content.dtype).expand(content.shape[0], -1, -1), content], -1)
    memory_projection = F.linear(memory, w_mem)  # W_m^γ M_0
    address = weights.address.to(inputs.gates.dtype)
    return KernelWeights(
        memory_projection=memory_projection,
        address_projection=address @ w_mem[:, :a].t(),
        address=address,
        hidden_gates=weights.hidden_gates,
        read_gates=weights.read_gates,
        micro_state=weights.micro_state,
        read_content=w_mem[:, a:],
        read_hidden=weights.read_hidden,
        read_usage=weights.read_usage,
        read_score=weights.read_score.view(-1),
        temperature_weight=weights.temperature_weight.view(-1),
        temperature_bias=weights.temperature_bias,
        ln_gates_weight=weights.ln_gates_weight,
        ln_gates_bias=weights.ln_gates_bias,
        ln_candidate_weight=weights.ln_candidate_weight,
        ln_candidate_bias=weights.ln_candidate_bias,
        ln_cell_weight=weights.ln_cell_weight,
        ln_cell_bias=weights.ln_cell_bias,
    )


def numba_sequence(
    inputs: TARDISInputs, state: TARDISState, weights: TARDISWeights, options: TARDISOptions
) -> TARDISResult:
    """The whole-sequence op on the numba kernels (CPU float32/float64 tensors)."""
    outputs = TARDISSequence.apply(options, *inputs, *state, *kernel_weights(inputs, state.content, weights))
    return sequence_result(TARDISOutputs(*outputs), state, options, inputs.logistic is not None)


class NumbaRecords(NamedTuple):
    """What kernels.sequence_forward keeps for its backward, per row block, in its order
    (arrays (B, T, ...); see kernels.py)."""

    hprev: np.ndarray
    cprev: np.ndarray
    pre: np.ndarray
    pg: np.ndarray
    y: np.ndarray
    sig_tau: np.ndarray
    jr: np.ndarray
    jw: np.ndarray
    act: np.ndarray
    cand: np.ndarray
    th: np.ndarray
    xhat_g: np.ndarray
    xhat_c: np.ndarray
    xhat_m: np.ndarray
    rstd: np.ndarray
    hpc: np.ndarray
    rpc: np.ndarray
    v: np.ndarray
    vm: np.ndarray
    old_content: np.ndarray
    old_mp: np.ndarray
    mp: np.ndarray


class SavedTensors(NamedTuple):
    """The tensors the forward keeps for its backward beside the kernels' records (through
    save_for_backward: a tensor kept on ctx would make a reference cycle)."""

    h_all: Optional[torch.Tensor]
    r_all: Optional[torch.Tensor]
    probs: Optional[torch.Tensor]
    resets: Optional[torch.Tensor]
    tau: Optional[torch.Tensor]
    usage: Optional[torch.Tensor]
    C: Optional[torch.Tensor]
    mask: Optional[torch.Tensor]
    address: Optional[torch.Tensor]
    aproj: Optional[torch.Tensor]
    steps0: Optional[torch.Tensor]
    w_h: Optional[torch.Tensor]
    w_rg: Optional[torch.Tensor]
    w_c: Optional[torch.Tensor]
    score: Optional[torch.Tensor]
    lng_w: Optional[torch.Tensor]
    lnc_w: Optional[torch.Tensor]
    lnm_w: Optional[torch.Tensor]


class TARDISSequence(torch.autograd.Function):
    """A whole sequence of TARDIS steps (eqs. 1-10, 18-19, the writes of algorithm 1) as one
    autograd node whose forward and backward are single calls of ops/tardis/kernels.py.
    Inputs: the fields of :class:`TARDISInputs`, :class:`TARDISState` and :class:`KernelWeights`
    side by side; outputs: the fields of :class:`TARDISOutputs`. Gradients not asked for are None
    (``set_materialize_grads(False)``), so parameters no gradient reaches stay None as on the
    tensor path (the read MLP under argmax reads, the temperature layer when 1/τ is unused).
    The weight gradients are one matrix product each over all B * T steps."""

    @staticmethod
    def forward(ctx, options: TARDISOptions, *tensors):
        inputs, state, w, _ = split_records(tensors, TARDISInputs, TARDISState, KernelWeights)
        xg, xr, gumbel, logistic, mask = inputs
        h0, c0, C0, counts0, last0, steps0 = state
        mode, train, learned = MODES.index(options.mode), logistic is not None, options.learned_temperature
        use_ln, keep = w.ln_gates_weight is not None, options.keep
        a = as_array
        dtype = a(xg).dtype
        none = np.zeros((1, 1, 1), dtype)
        one = np.ones(1, dtype)
        norms = (
            w.ln_gates_weight,
            w.ln_gates_bias,
            w.ln_candidate_weight,
            w.ln_candidate_bias,
            w.ln_cell_weight,
            w.ln_cell_bias,
        )
        lnv = [a(p) if p is not None else one for p in norms]
        # everything h_t multiplies, [W_m; W_h; W_h^γ; w^τ] (c + 4d + 2 + m + 1, d): one product
        h_rows = (w.micro_state, w.hidden_gates, w.read_hidden, w.temperature_weight.view(1, -1))
        w_h = torch.cat(h_rows).detach()
        kernels = dispatch.load("tardis")
        assert kernels is not None  # dispatch chose this path: they loaded
        (h_all, r_all, probs, read_w, write_w, resets, tau, usage, c, C, counts, last, saved) = threads.call(
            kernels.sequence_forward,
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
                Rows(a(w.memory_projection)),
                a(w.address_projection),
                a(w.address),
                Rows(a(counts0)),
                Rows(a(last0)),
                Rows(a(steps0)),
                a(w_h.t()),
                a(w.read_gates.t()),
                a(w.read_content.t()),
                a(w.read_usage.t()),
                a(w.read_score),
                a(w.temperature_bias),
                learned,
                float(options.inverse_temperature),
                use_ln,
                *lnv,
                options.eps,
                options.last_read_penalty,
                options.reset_temperature,
                options.usage_eps,
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
        if options.mode != "gumbel":
            ctx.mark_non_differentiable(read_w, write_w)
        if not learned:
            ctx.mark_non_differentiable(tau)
        if keep:
            kept = SavedTensors(
                h_all=h_all,
                r_all=r_all,
                probs=probs,
                resets=resets,
                tau=tau,
                usage=usage,
                C=C,
                mask=mask,
                address=w.address,
                aproj=w.address_projection,
                steps0=steps0,
                w_h=w_h,
                w_rg=w.read_gates,
                w_c=w.read_content,
                score=w.read_score,
                lng_w=w.ln_gates_weight,
                lnc_w=w.ln_candidate_weight,
                lnm_w=w.ln_cell_weight,
            )
            ctx.save_for_backward(*kept, *(torch.from_numpy(v) for block in saved.values for v in block))
        ctx.options, ctx.parts = (mode, learned, use_ln, options.reset_temperature), saved.parts
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
        mode, learned, use_ln, reset_temperature = ctx.options
        # then the kernels' records, block after block
        kept, flat = split_records(ctx.saved_tensors, SavedTensors)
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
        ) = kept
        n = len(flat) // len(ctx.parts)
        blocks = [flat[i * n : (i + 1) * n] for i in range(len(ctx.parts))]  # the forward's, per block
        a = as_array
        gumbel = mode == MODES.index("gumbel")
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

        def rows(name):  # one saved record over the whole batch
            i = NumbaRecords._fields.index(name)
            return blocks[0][i] if len(blocks) == 1 else torch.cat([block[i] for block in blocks])

        hprev, v_all = rows("hprev"), rows("v")
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
        weights = KernelWeights(
            memory_projection=read[1],
            address_projection=read[2],
            address=None,
            hidden_gates=g_hg,
            read_gates=g_rg,
            micro_state=outer(dv, h_all),
            read_content=read[3],
            read_hidden=read[4],
            read_usage=read[5],
            read_score=read[6],
            temperature_weight=temp[0] if tau_grad else None,
            temperature_bias=temp[1] if tau_grad else None,
            ln_gates_weight=ln[0],
            ln_gates_bias=ln[1],
            ln_candidate_weight=ln[2],
            ln_candidate_bias=ln[3],
            ln_cell_weight=ln[4],
            ln_cell_bias=ln[5],
        )
        inputs = TARDISInputs(d_xg, read[0], None, None, None)
        state = TARDISState(d_h0, d_c0, d_C0, None, None, None)
        return None, *inputs, *state, *weights
