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
missing) the step is that composition under ordinary autograd: the reference,
ops/dnc/reference.py's ``memory_step`` (the layout of the raw interface vector is there).
Both paths give the same values and gradients (tests/ops/test_fused_dnc_step.py).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch
from mannlab.ops.bridge import as_array
from mannlab.ops.dnc.records import DNCStepResult, DNCStepTrace
from mannlab.ops.dnc.reference import interface_sizes, memory_step

__all__ = ["DNCMemoryStep", "dnc_memory_step", "interface_sizes"]


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
        reads, new_memory, new_read_w, new_write_w, new_usage, new_precedence, new_links = (
            torch.from_numpy(out) for out in outputs
        )
        saved = tuple(torch.from_numpy(value) for value in saved)
        # Everything through save_for_backward: an output kept as a plain ctx attribute
        # would make a reference cycle (output -> graph node -> ctx -> output) and leak.
        # The backward reads the inputs, then M_t, w^r_t, w^w_t, u_t, then the kernel's scratch.
        ctx.save_for_backward(*inputs, new_memory, new_read_w, new_write_w, new_usage, *saved)
        step = (reads, new_memory, new_read_w, new_write_w, new_usage, new_precedence, new_links)
        if not with_trace:
            return step
        heads, width = read_w.shape[1], memory.shape[2]
        sizes = interface_sizes(heads, width)
        act, free = saved[0], sizes[0] + sizes[1] + width  # f, g^a, g^w follow e
        trace = DNCStepTrace(
            allocation=saved[1][:, 1].to(raw.dtype, copy=True),
            read_modes=act[:, -sizes[3] :].reshape(-1, heads, 3).clone(),
            free_gates=act[:, free : free + heads].clone(),
            allocation_gate=act[:, free + heads].clone(),
            write_gate=act[:, free + heads + 1].clone(),
        )
        ctx.mark_non_differentiable(*trace)
        return step + tuple(trace)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_reads, d_memory, d_read_w, d_write_w, d_usage, d_precedence, d_links, *_trace):
        raw, memory, read_w, write_w, usage, precedence, links, *after = map(as_array, ctx.saved_tensors)
        new_memory, new_read_w, new_write_w, new_usage, *scratch = after
        grads = _kernels().memory_step_backward(
            (raw, memory, read_w, write_w, usage, precedence, links),
            (new_memory, new_read_w, new_write_w, new_usage),
            tuple(scratch),
            tuple(
                as_array(g) for g in (d_reads, d_memory, d_read_w, d_write_w, d_usage, d_precedence, d_links)
            ),
        )
        return tuple(torch.from_numpy(grad) for grad in grads) + (None,)


def dnc_memory_step(
    raw, memory, read_w, write_w, usage, precedence, links, with_trace: bool = False
) -> DNCStepResult:
    """Steps (ii) and (iii) of the DNC from the raw interface vector, with a fused backward.

    raw (B, P) (layout above), M_{t-1} (B, N, W), w^r_{t-1} (B, R, N), w^w_{t-1} (B, 1, N),
    u_{t-1} (B, N), p_{t-1} (B, N), L_{t-1} (B, N, N) -> a :class:`DNCStepResult`: r_t (B, R, W),
    M_t (B, N, W), w^r_t (B, R, N), w^w_t (B, 1, N), u_t (B, N), p_t (B, N), L_t (B, N, N), and
    with ``with_trace``, for inspection only (no gradient), the :class:`DNCStepTrace`
    (a_t (B, N), pi_t (B, R, 3), f_t (B, R), g^a_t (B,), g^w_t (B,)), else None.
    """
    if dispatch.autocast_active(memory):
        return dispatch.in_state_precision(
            dnc_memory_step, raw, memory, read_w, write_w, usage, precedence, links, with_trace
        )
    state = (memory, read_w, write_w, usage, precedence, links)
    if dispatch.kernels_apply("dnc", raw):
        reads, memory, read_w, write_w, usage, precedence, links, *trace = DNCMemoryStep.apply(
            raw, *state, with_trace
        )
        step = DNCStepResult(reads, memory, read_w, write_w, usage, precedence, links)
        return step._replace(trace=DNCStepTrace(*trace)) if with_trace else step
    step = memory_step(raw, *state)
    assert step.trace is not None  # the reference always returns it
    trace = DNCStepTrace(*(value.detach() for value in step.trace)) if with_trace else None
    return step._replace(trace=trace)
