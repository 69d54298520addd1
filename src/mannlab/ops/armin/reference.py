"""The plain tensor time loop of exactly what ARMIN's kernels compute, to read beside the paper
("Sequence Modelling with Auto-Addressing and Recurrent Memory Integrating Networks", ICLR 2019
submission): eqs. 9-10 (read), 3-8 (cell, with appendix C's layer norms and optional zoneout)
and the write of section 3.3, for the paper's configuration (auto-addressing read, tied write,
control gates, layer norm). Autograd differentiates it; the numba and Triton kernels are
tested against it (tests/ops/test_armin_kernels.py). It takes the records of
mannlab.ops.armin.armin_sequence (backend "reference").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mannlab.ops.armin.records import (
    ARMINInputs,
    ARMINOptions,
    ARMINResult,
    ARMINState,
    ARMINTrace,
    ARMINWeights,
)


def read_weights(logits: torch.Tensor, noise, options: ARMINOptions) -> torch.Tensor:
    """s_t from the read logits l = W_s [x_t, h_{t-1}] + b_s (B, n):
    soft: s = softmax(l) (table 7's smooth read); gumbel-relaxed: s = y = softmax((l + g) / τ)
    (eq. 1); gumbel: s = one-hot(argmax y) with y's gradient (eq. 9, straight-through);
    argmax: s = one-hot(argmax l), no gradient to l."""
    if options.mode == "soft":
        return torch.softmax(logits, -1)
    if options.mode == "argmax":
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    y = torch.softmax((logits + noise) * options.inverse_temperature, -1)  # eq. 1
    if options.mode == "gumbel-relaxed":
        return y
    hard = F.one_hot(y.argmax(-1), y.shape[-1]).to(y.dtype)
    return y + (hard - y).detach()  # straight-through


def armin_reference(
    inputs: ARMINInputs, state: ARMINState, weights: ARMINWeights, options: ARMINOptions
) -> ARMINResult:
    """o (B, T, d_h + d_r), the final state (h_T, M_T, steps + T; the read counts and last read
    passed through) and, with ``options.trace``, the trace (detached) of a whole sequence."""
    h, memory, steps = state.hidden, state.memory, state.steps
    dh, dr, n = h.shape[-1], memory.shape[-1], memory.shape[1]
    C, G = dh + dr, 4 * dh + dr
    x = inputs.projected
    x_c, x_g, x_s = x[..., :C], x[..., C : C + G], x[..., C + G : C + G + n]  # [x_c | x_g | x_s | ...]
    w_ig_h, w_s_h = weights.control_h[:C], weights.control_h[C:]

    def layer_norm(a, gain, bias):
        return F.layer_norm(a, a.shape[-1:], gain, bias, options.eps)

    outputs, traces = [], []
    for t in range(x.shape[1]):
        h_prev = h
        logits = x_s[:, t] + h_prev @ w_s_h.T  # eq. 9
        noise = inputs.noise[t] if inputs.noise is not None else None
        s = read_weights(logits, noise, options)
        r = (s.unsqueeze(1) @ memory).squeeze(1)  # eq. 10
        pre = x_c[:, t] + h_prev @ w_ig_h.T + r @ weights.control_r.T
        control = torch.sigmoid(layer_norm(pre, weights.ln_control_weight, weights.ln_control_bias))  # eq. 3
        h_g, r_g = control[:, :dh] * h_prev, control[:, dh:] * r  # eqs. 4-5
        pre = x_g[:, t] + h_g @ weights.gates_h.T + r_g @ weights.gates_r.T
        z = layer_norm(pre, weights.ln_gates_weight, weights.ln_gates_bias)  # eq. 6
        z_i, z_f, z_g, z_oh, z_or = z.split([dh, dh, dh, dh, dr], -1)
        i, f, cand, o_h, o_r = (
            torch.sigmoid(z_i),
            torch.sigmoid(z_f),
            torch.tanh(z_g),
            torch.sigmoid(z_oh),
            torch.sigmoid(z_or),
        )
        h_hat = layer_norm(f * h_prev + i * cand, weights.ln_hidden_weight, weights.ln_hidden_bias)  # eq. 7
        outputs.append(torch.cat([o_h * torch.tanh(h_hat), o_r * torch.tanh(r)], -1))  # eq. 8
        if inputs.zoneout is not None:  # zoneout: keep h_{t-1} where z says
            zone = inputs.zoneout[t]
            h = zone * h_prev + (1 - zone) * h_hat
        else:
            h = h_hat
        value = h @ weights.write_map.T if weights.write_map is not None else h  # section 3.3
        step = steps + t  # the next empty slot while any is left, then the slot just read
        fill = F.one_hot(step.clamp(max=n - 1), n).to(s.dtype)
        w = torch.where((step < n).unsqueeze(-1), fill, s)
        memory = memory + w.unsqueeze(-1) * (value.unsqueeze(1) - memory)
        if options.trace:
            gates = torch.cat([i, f, cand, o_h, o_r], -1)
            step_trace = (s.unsqueeze(1), w.unsqueeze(1), logits.unsqueeze(1), r, control, gates, h)
            traces.append(ARMINTrace(*(value.detach() for value in step_trace)))
    trace = ARMINTrace(*(torch.stack(field, 1) for field in zip(*traces))) if options.trace else None
    final = state._replace(hidden=h, memory=memory, steps=steps + x.shape[1])
    return ARMINResult(torch.stack(outputs, 1), final, trace)
