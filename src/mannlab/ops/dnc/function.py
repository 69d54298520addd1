"""The memory half of a DNC step as one autograd function with a hand-written backward.

From the raw interface vector that DNCCell's interface layer emits, it computes
steps (ii) and (iii) of the DNC step (models/dnc.py): retention psi, usage u,
allocation a (stable sort, ties to the lower slot), write weighting w^w, the
erase/add write, links L (zero diagonal), precedence p, forward/backward
weightings f, b, content read weightings, read weightings w^r and reads r.

Why: on a CPU the step is bound by per-operation overhead (a few microseconds a
call) and, at larger batches, by the (B, N, N) temporaries of the link matrix.
Autograd over the composition of mannlab.nn.addressing primitives records about 60
nodes per step; on CPU float32/float64 tensors this function records one, whose
forward and backward are single calls of the compiled kernels of ops/dnc/kernels.py.
Elsewhere (other devices or dtypes, kernels switched off (ops/dispatch.py), numba
missing) the step is that composition under ordinary autograd: the reference, below.
Both paths give the same values and gradients (tests/test_fused_dnc_step.py).

Layout of the raw interface vector (B, P), grouped by activation:
    [k^r (R*W), k^w (W), v (W) | beta^r (R), beta^w | e (W), f (R), g^a, g^w | pi (3R)]
     identity                  | oneplus            | sigmoid                | softmax per head
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from mannlab.nn import addressing
from mannlab.ops import dispatch
from mannlab.ops.bridge import as_array


def interface_sizes(read_heads: int, width: int) -> list[int]:
    """Sizes of the four activation groups of the raw interface vector (layout above)."""
    return [read_heads * width + 2 * width, read_heads + 1, width + read_heads + 2, 3 * read_heads]


def activate_interface(raw: torch.Tensor, read_heads: int, width: int):
    """Raw interface vector (B, P) -> (k^r (B, R, W), beta^r (B, R), k^w (B, 1, W),
    beta^w (B, 1), e (B, 1, W), v (B, 1, W), f (B, R), g^a (B,), g^w (B,), pi (B, R, 3))."""
    R, W = read_heads, width
    linear, strengths, gates, modes = raw.split(interface_sizes(R, W), dim=-1)
    read_keys, write_key, write_vector = linear.split([R * W, W, W], dim=-1)
    strengths = 1 + F.softplus(strengths)  # oneplus: beta >= 1
    erase, free, alloc_gate, write_gate = torch.sigmoid(gates).split([W, R, 1, 1], dim=-1)
    modes = torch.softmax(modes.view(-1, R, 3), dim=-1)  # pi over (b, c, f)
    return (
        read_keys.view(-1, R, W),
        strengths[:, :R],
        write_key.unsqueeze(1),
        strengths[:, R:],
        erase.unsqueeze(1),
        write_vector.unsqueeze(1),
        free,
        alloc_gate.squeeze(-1),
        write_gate.squeeze(-1),
        modes,
    )


def _composition(raw, memory, read_w, write_w, usage, precedence, links):
    """Steps (ii)-(iii) as the composition of mannlab.nn.addressing primitives (any device).

    Returns (r, M_t, w^r_t, w^w_t, u_t, p_t, L_t) and the trace values (a, pi, f, g^a, g^w).
    """
    read_heads, width = read_w.shape[1], memory.shape[2]
    (
        read_keys,
        read_strengths,
        write_key,
        write_strength,
        erase,
        write_vector,
        free,
        alloc_gate,
        write_gate,
        modes,
    ) = activate_interface(raw, read_heads, width)
    # (ii) dynamic allocation and the write, addressed on M_{t-1}
    psi = addressing.retention(free, read_w)
    usage = addressing.usage(usage, write_w.squeeze(1), psi)
    alloc = addressing.allocation(usage)
    write_content = addressing.content_weights(write_key, memory, write_strength)  # c^w
    write_vec = addressing.write_weighting(alloc, write_content.squeeze(1), write_gate, alloc_gate)  # (B, N)
    memory = addressing.write(memory, write_vec.unsqueeze(1), erase, write_vector)
    links = addressing.link_matrix(links, write_vec, precedence)  # uses p_{t-1}
    precedence = addressing.precedence(precedence, write_vec)
    # (iii) temporal and content read weightings, read from M_t
    forward, backward = addressing.directional_weights(links, read_w)  # w^r_{t-1}
    read_content = addressing.content_weights(read_keys, memory, read_strengths)  # c^r
    read_w = addressing.read_weighting(backward, read_content, forward, modes)
    reads = addressing.read(memory, read_w)
    outputs = (reads, memory, read_w, write_vec.unsqueeze(1), usage, precedence, links)
    return outputs, (alloc, modes, free, alloc_gate, write_gate)


def _kernels():
    return dispatch.load("dnc")


class DNCMemoryStep(torch.autograd.Function):
    """(raw interface, M_{t-1}, w^r_{t-1}, w^w_{t-1}, u_{t-1}, p_{t-1}, L_{t-1}) ->
    (r_t, M_t, w^r_t, w^w_t, u_t, p_t, L_t) in the compiled kernels (CPU only).

    With ``with_trace`` the values (a, pi, f, g^a, g^w) follow, without gradient.
    """

    @staticmethod
    def forward(ctx, raw, memory, read_w, write_w, usage, precedence, links, with_trace):
        inputs = (raw, memory, read_w, write_w, usage, precedence, links)
        outputs, saved = _kernels().memory_step_forward(*(as_array(t) for t in inputs))
        outputs = tuple(torch.from_numpy(out) for out in outputs)
        saved = tuple(torch.from_numpy(value) for value in saved)
        # Everything through save_for_backward: an output kept as a plain ctx attribute
        # would make a reference cycle (output -> graph node -> ctx -> output) and leak.
        ctx.save_for_backward(*inputs, *outputs[1:5], *saved)
        if not with_trace:
            return outputs
        heads, width = read_w.shape[1], memory.shape[2]
        sizes = interface_sizes(heads, width)
        act, free = saved[0], sizes[0] + sizes[1] + width  # f, g^a, g^w follow e
        trace = (
            saved[1][:, 1].to(raw.dtype, copy=True),
            act[:, -sizes[3] :].reshape(-1, heads, 3).clone(),
            act[:, free : free + heads].clone(),
            act[:, free + heads].clone(),
            act[:, free + heads + 1].clone(),
        )
        ctx.mark_non_differentiable(*trace)
        return outputs + trace

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        saved = [as_array(t) for t in ctx.saved_tensors]
        grads = _kernels().memory_step_backward(
            tuple(saved[:7]), tuple(saved[7:11]), tuple(saved[11:]), tuple(as_array(g) for g in grads[:7])
        )
        return tuple(torch.from_numpy(grad) for grad in grads) + (None,)


def dnc_memory_step(raw, memory, read_w, write_w, usage, precedence, links, with_trace=False):
    """Steps (ii) and (iii) of the DNC from the raw interface vector, with a fused backward.

    raw (B, P) (layout above), M_{t-1} (B, N, W), w^r_{t-1} (B, R, N), w^w_{t-1} (B, 1, N),
    u_{t-1} (B, N), p_{t-1} (B, N), L_{t-1} (B, N, N) ->
    (r_t (B, R, W), M_t (B, N, W), w^r_t (B, R, N), w^w_t (B, 1, N), u_t (B, N), p_t (B, N),
     L_t (B, N, N), and with ``with_trace``, for inspection only (no gradient):
     a_t (B, N), pi_t (B, R, 3), f_t (B, R), g^a_t (B,), g^w_t (B,)).
    """
    if dispatch.autocast_active(memory):
        return dispatch.in_state_precision(
            dnc_memory_step, raw, memory, read_w, write_w, usage, precedence, links, with_trace
        )
    state = (memory, read_w, write_w, usage, precedence, links)
    if dispatch.kernels_apply("dnc", raw):
        return DNCMemoryStep.apply(raw, *state, with_trace)
    outputs, trace = _composition(raw, *state)
    return outputs + tuple(value.detach() for value in trace) if with_trace else outputs
