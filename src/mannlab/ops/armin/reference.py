"""The plain tensor time loop of exactly what ARMIN's kernels compute, to read beside the paper
("Sequence Modelling with Auto-Addressing and Recurrent Memory Integrating Networks", ICLR 2019
submission): eqs. 9-10 (read), 3-8 (cell, with appendix C's layer norms and optional zoneout)
and the write of section 3.3, for the paper's configuration (auto-addressing read, tied write,
control gates, layer norm). Autograd differentiates it; the numba and Triton kernels are
tested against it (tests/ops/test_armin_kernels.py). It takes the records of
mannlab.ops.armin.armin_sequence (backend "reference").
"""

from __future__ import annotations

from typing import Callable, Optional

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


def read_weights(logits: torch.Tensor, noise, inverse_temperature, options: ARMINOptions) -> torch.Tensor:
    """s_t from the read logits l = W_s [x_t, h_{t-1}] + b_s (B, n) and 1/τ (a number, or a
    0-dim tensor):
    soft: s = softmax(l) (table 7's smooth read); gumbel-relaxed: s = y = softmax((l + g) / τ)
    (eq. 1); gumbel: s = one-hot(argmax y) with y's gradient (eq. 9, straight-through);
    argmax: s = one-hot(argmax l), no gradient to l."""
    if options.mode == "soft":
        return torch.softmax(logits, -1)
    if options.mode == "argmax":
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    y = torch.softmax((logits + noise) * inverse_temperature, -1)  # eq. 1
    if options.mode == "gumbel-relaxed":
        return y
    hard = F.one_hot(y.argmax(-1), y.shape[-1]).to(y.dtype)
    return y + (hard - y).detach()  # straight-through


def sequence_step(inputs_t, inverse_temperature, row, control, weights: ARMINWeights, options: ARMINOptions):
    """One step (eqs. 9-10, 3-8, the write of section 3.3) from the step's slices of the
    projected input [x_c | x_g | x_s] and its draws (``inputs_t``: (B, C), (B, G), (B, n), the
    Gumbel noise (B, n) or None, the zoneout mask (B, d_h) or None), 1/τ (a number, or a 0-dim
    tensor), the state ``row`` before the step (h (B, d_h), M (B, n, d_r), the steps before
    this one (B,)) and the rows of W_c and W_s that read h (``control``) -> (o_t (B, d_h + d_r),
    the state after the step, the step's :class:`ARMINTrace` (detached) or None). The reference
    loop runs it as it is; the "compiled" backend runs it under torch.compile
    (ops/compiled.py)."""
    x_c, x_g, x_s, noise, zone = inputs_t
    h_prev, memory, step = row
    w_ig_h, w_s_h = control
    dh, dr, n = h_prev.shape[-1], memory.shape[-1], memory.shape[1]

    def layer_norm(a, gain, bias):
        return F.layer_norm(a, a.shape[-1:], gain, bias, options.eps)

    logits = x_s + h_prev @ w_s_h.T  # eq. 9
    s = read_weights(logits, noise, inverse_temperature, options)
    r = (s.unsqueeze(1) @ memory).squeeze(1)  # eq. 10
    pre = x_c + h_prev @ w_ig_h.T + r @ weights.control_r.T
    control_gates = torch.sigmoid(
        layer_norm(pre, weights.ln_control_weight, weights.ln_control_bias)
    )  # eq. 3
    h_g, r_g = control_gates[:, :dh] * h_prev, control_gates[:, dh:] * r  # eqs. 4-5
    pre = x_g + h_g @ weights.gates_h.T + r_g @ weights.gates_r.T
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
    output = torch.cat([o_h * torch.tanh(h_hat), o_r * torch.tanh(r)], -1)  # eq. 8
    h = (
        zone * h_prev + (1 - zone) * h_hat if zone is not None else h_hat
    )  # zoneout: keep h_{t-1} where z says
    value = h @ weights.write_map.T if weights.write_map is not None else h  # section 3.3
    # the next empty slot while any is left, then the slot just read
    fill = F.one_hot(step.clamp(max=n - 1), n).to(s.dtype)
    w = torch.where((step < n).unsqueeze(-1), fill, s)
    memory = memory + w.unsqueeze(-1) * (value.unsqueeze(1) - memory)
    trace = None
    if options.trace:
        gates = torch.cat([i, f, cand, o_h, o_r], -1)
        step_trace = (s.unsqueeze(1), w.unsqueeze(1), logits.unsqueeze(1), r, control_gates, gates, h)
        trace = ARMINTrace(*(value.detach() for value in step_trace))
    return output, (h, memory, step + 1), trace


def armin_reference(
    inputs: ARMINInputs,
    state: ARMINState,
    weights: ARMINWeights,
    options: ARMINOptions,
    step_function: Callable = sequence_step,
    inverse_temperature: Optional[torch.Tensor] = None,
) -> ARMINResult:
    """o (B, T, d_h + d_r), the final state (h_T, M_T, steps + T; the read counts and last read
    passed through) and, with ``options.trace``, the trace (detached) of a whole sequence.
    ``step_function``: :func:`sequence_step`, or the same under torch.compile, which takes 1/τ
    as ``inverse_temperature`` (a 0-dim tensor; else ``options``' number)."""
    memory, steps = state.memory, state.steps
    dh, n = state.hidden.shape[-1], memory.shape[1]
    C, G = dh + memory.shape[-1], 4 * dh + memory.shape[-1]
    x = inputs.projected
    x_c, x_g, x_s = x[..., :C], x[..., C : C + G], x[..., C + G : C + G + n]  # [x_c | x_g | x_s | ...]
    control = weights.control_h[:C], weights.control_h[C:]
    T = x.shape[1]
    draws = [(None,) * T if v is None else v.unbind(0) for v in (inputs.noise, inputs.zoneout)]
    temperature = options.inverse_temperature if inverse_temperature is None else inverse_temperature
    row, outputs, traces = (state.hidden, memory, steps), [], []
    for inputs_t in zip(x_c.unbind(1), x_g.unbind(1), x_s.unbind(1), *draws):
        output, row, trace = step_function(inputs_t, temperature, row, control, weights, options=options)
        outputs.append(output)
        traces.append(trace)
    trace = ARMINTrace(*(torch.stack(field, 1) for field in zip(*traces))) if options.trace else None
    final = state._replace(hidden=row[0], memory=row[1], steps=steps + T)
    return ARMINResult(torch.stack(outputs, 1), final, trace)
