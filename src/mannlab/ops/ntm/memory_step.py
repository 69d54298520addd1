"""The memory half of an NTM step as one autograd function with a hand-written backward.

From the raw head parameters that the controller's head layer emits, it computes
steps (ii) and (iii) of the NTM step (models/ntm.py):

    activations   beta = softplus, g = sigmoid, s = softmax, gamma = 1 + softplus, e = sigmoid
    (ii)  w^w_t = address(M_{t-1}, w^w_{t-1});  M_t = M_{t-1} o prod_h (E - w^w_h e_h^T) + sum_h w^w_h a_h^T
    (iii) w^r_t = address(M_t, w^r_{t-1});      r_t = w^r_t M_t

where ``address`` is the chain of ops/ntm/fused_addressing.py (content -> interpolation ->
shift -> sharpening). The values are those of the composition of mannlab.nn.addressing
primitives, and the tests compare values and gradients with it and run gradcheck.

Why: on a CPU the NTM step is bound by per-operation overhead (a few microseconds a
call). Autograd over the composition records about 60 nodes per step, each with
its own dispatch in forward and backward; this function records one node. On CPU
tensors it runs the compiled kernels of ops/ntm/kernels.py (one call each way);
elsewhere (or with the kernels switched off, ops/dispatch.py) the batched tensor algebra
below, without graph bookkeeping in the forward.

Layout of the raw parameters (B, P), as NTMCell's head layer emits them:
    (H + R) blocks of A = W + 3 + S, write heads first: [k (W), beta, g, s (S), gamma]
    then H blocks of 2W: [e (W), a (W)]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from mannlab.ops import dispatch
from mannlab.ops.bridge import as_array
from mannlab.ops.ntm.fused_addressing import address_backward, address_forward


def _split_params(params, write_heads, read_heads, width, num_shifts):
    """Raw (B, P) -> address block (B, H + R, A) and erase/add block (B, H, 2W) (views)."""
    batch, address_size = params.shape[0], width + 3 + num_shifts
    split = (write_heads + read_heads) * address_size
    address = params[:, :split].view(batch, write_heads + read_heads, address_size)
    return address, params[:, split:].view(batch, write_heads, 2 * width)


def _activate(address, width):
    """Raw address block (B, heads, A) -> k, beta, g, s, gamma (activated)."""
    key = address[..., :width]
    beta = F.softplus(address[..., width])  # beta >= 0
    gate = torch.sigmoid(address[..., width + 1])  # g in (0, 1)
    shift = torch.softmax(address[..., width + 2 : -1], dim=-1)  # s over the shifts
    gamma = 1 + F.softplus(address[..., -1])  # gamma >= 1
    return key, beta, gate, shift, gamma


def _write_forward(memory, weights, erase, add):
    """M_t = M_{t-1} o keep + w^T a with keep = prod_h (1 - w_h e_h^T); returns M_t, keep, factors."""
    factors = 1 - weights.unsqueeze(-1) * erase.unsqueeze(-2)  # (B, H, N, W)
    keep = factors[:, 0] if factors.shape[1] == 1 else factors.prod(dim=1)
    return torch.baddbmm(memory * keep, weights.transpose(1, 2), add), keep, factors


def _others_product(factors):
    """prod over heads h' != h of factors[:, h'] (B, H, N, W), without dividing by zero."""
    if factors.shape[1] == 1:
        return torch.ones_like(factors)
    ones = torch.ones_like(factors[:, :1])
    before = torch.cat([ones, factors[:, :-1]], dim=1).cumprod(dim=1)
    after = torch.cat([factors[:, 1:], ones], dim=1).flip(1).cumprod(dim=1).flip(1)
    return before * after


def _write_backward(grad_new, memory, weights, erase, add, keep, factors):
    """Gradients of the erase/add write with respect to (M_{t-1}, w, e, a)."""
    grad_memory = grad_new * keep
    grad_keep = grad_new * memory  # (B, N, W)
    if factors.shape[1] == 1:
        grad_weights = -(erase @ grad_keep.transpose(1, 2))  # (B, 1, N)
        grad_erase = -(weights @ grad_keep)  # (B, 1, W)
    else:
        grad_factor = grad_keep.unsqueeze(1) * _others_product(factors)  # (B, H, N, W)
        grad_weights = -(grad_factor * erase.unsqueeze(-2)).sum(-1)
        grad_erase = -(grad_factor * weights.unsqueeze(-1)).sum(-2)
    grad_weights = torch.baddbmm(grad_weights, add, grad_new.transpose(1, 2))  # + a G^T
    grad_add = weights @ grad_new
    return grad_memory, grad_weights, grad_erase, grad_add


def _activation_backward(grads, address, activated, width):
    """Gradient of the raw address block from the gradients of (k, beta, g, s, gamma)."""
    grad_key, grad_beta, grad_gate, grad_shift, grad_gamma = grads
    _, _, gate, shift, _ = activated
    grad_shift_raw = shift * (grad_shift - (shift * grad_shift).sum(-1, keepdim=True))
    return torch.cat(
        [
            grad_key,
            (grad_beta * torch.sigmoid(address[..., width])).unsqueeze(-1),  # softplus' = sigmoid
            (grad_gate * gate * (1 - gate)).unsqueeze(-1),
            grad_shift_raw,
            (grad_gamma * torch.sigmoid(address[..., -1])).unsqueeze(-1),
        ],
        dim=-1,
    )


def _torch_forward(ctx, params, memory, read_prev, write_prev, width, num_shifts):
    """The step in tensor operations (any device); saves what ``_torch_backward`` needs."""
    write_heads, read_heads = write_prev.shape[1], read_prev.shape[1]
    address, erase_add = _split_params(params, write_heads, read_heads, width, num_shifts)
    activated = _activate(address, width)
    write_args, read_args = zip(*(v.split([write_heads, read_heads], dim=1) for v in activated))
    erase, add = torch.sigmoid(erase_add[..., :width]), erase_add[..., width:]
    # (ii) address on M_{t-1}, then erase and add
    write_w, write_saved = address_forward(write_args[0], memory, write_prev, *write_args[1:])
    new_memory, keep, factors = _write_forward(memory, write_w, erase, add)
    # (iii) address on M_t, then read
    read_w, read_saved = address_forward(read_args[0], new_memory, read_prev, *read_args[1:])
    reads = torch.bmm(read_w, new_memory)
    # Everything through save_for_backward: an output kept as a plain ctx attribute
    # would make a reference cycle (output -> graph node -> ctx -> output) and leak.
    ctx.save_for_backward(
        params, memory, new_memory, erase, add, keep, factors, *activated, *write_saved, *read_saved
    )
    return (reads, new_memory, read_w, write_w, erase, add.clone()) + activated[1:]


def _torch_backward(ctx, grad_reads, grad_memory_out, grad_read_w, grad_write_w):
    saved = ctx.saved_tensors
    params, memory, new_memory, erase, add, keep, factors = saved[:7]
    activated, saved = saved[7:12], saved[12:]
    write_saved, read_saved = saved[: len(saved) // 2], saved[len(saved) // 2 :]
    write_w, read_w = write_saved[-1], read_saved[-1]
    width, (write_heads, read_heads) = ctx.width, ctx.heads
    # (iii) r = w^r M_t, then the read addressing on M_t
    grad_read_w = torch.baddbmm(grad_read_w, grad_reads, new_memory.transpose(1, 2))
    grad_new = torch.baddbmm(grad_memory_out, read_w.transpose(1, 2), grad_reads)
    read_grads = address_backward(read_saved, grad_read_w)
    grad_new = grad_new + read_grads[1]
    # (ii) the write, then the write addressing on M_{t-1}
    grad_memory, grad_write_w2, grad_erase, grad_add = _write_backward(
        grad_new, memory, write_w, erase, add, keep, factors
    )
    write_grads = address_backward(write_saved, grad_write_w + grad_write_w2)
    grad_memory = grad_memory + write_grads[1]
    # activations, back to the raw parameter layout
    head_grads = [
        torch.cat([w, r], dim=1)
        for w, r in zip(write_grads[:1] + write_grads[3:], read_grads[:1] + read_grads[3:])
    ]
    address, _ = _split_params(params, write_heads, read_heads, width, ctx.num_shifts)
    grad_address = _activation_backward(head_grads, address, activated, width)
    grad_erase_add = torch.cat([grad_erase * erase * (1 - erase), grad_add], dim=-1)
    grad_params = torch.cat([grad_address.flatten(1), grad_erase_add.flatten(1)], dim=1)
    return grad_params, grad_memory, read_grads[2], write_grads[2]


def _kernel_forward(ctx, params, memory, read_prev, write_prev, width, num_shifts):
    """The step in compiled CPU code (ops/ntm/kernels.py)."""
    inputs = (params, memory, read_prev, write_prev)
    outputs, saved = _kernels().memory_step_forward(*(as_array(t) for t in inputs), width, num_shifts)
    outputs = tuple(torch.from_numpy(out) for out in outputs)
    ctx.save_for_backward(*inputs, *outputs, *(torch.from_numpy(a) for a in saved))
    return outputs


def _kernel_backward(ctx, grad_reads, grad_memory_out, grad_read_w, grad_write_w):
    arrays = [as_array(t) for t in ctx.saved_tensors]
    grads = (grad_reads, grad_memory_out, grad_read_w, grad_write_w)
    grads = _kernels().memory_step_backward(
        *arrays[:4],
        ctx.width,
        ctx.num_shifts,
        tuple(arrays[4:14]),
        tuple(arrays[14:]),
        *(as_array(g) for g in grads),
    )
    return tuple(torch.from_numpy(grad) for grad in grads)


def _kernels():
    return dispatch.load("ntm")


class NTMMemoryStep(torch.autograd.Function):
    """(raw head params, M_{t-1}, w^r_{t-1}, w^w_{t-1}) -> (r_t, M_t, w^r_t, w^w_t, head values).

    With ``with_trace`` the head values (e, a, beta, g, s, gamma; write heads first)
    follow, for inspection only: they carry no gradient.
    """

    @staticmethod
    def forward(ctx, params, memory, read_prev, write_prev, width, num_shifts, with_trace):
        ctx.width, ctx.num_shifts = width, num_shifts
        ctx.heads = (write_prev.shape[1], read_prev.shape[1])
        ctx.kernels = dispatch.kernels_apply("ntm", params)
        step = _kernel_forward if ctx.kernels else _torch_forward
        outputs = step(ctx, params, memory, read_prev, write_prev, width, num_shifts)
        if not with_trace:
            return outputs[:4]
        ctx.mark_non_differentiable(*outputs[4:])
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_reads, grad_memory_out, grad_read_w, grad_write_w, *unused):
        if ctx.kernels:  # the kernels never see autocast
            grads = _kernel_backward(ctx, grad_reads, grad_memory_out, grad_read_w, grad_write_w)
        else:
            with dispatch.state_precision(grad_reads):  # a backward called inside autocast
                grads = _torch_backward(ctx, grad_reads, grad_memory_out, grad_read_w, grad_write_w)
        return grads + (None, None, None)


def ntm_memory_step(params, memory, read_prev, write_prev, width, num_shifts, with_trace=False):
    """Steps (ii) and (iii) of the NTM from raw head parameters, with a fused backward.

    params (B, P) raw head-layer output (layout above), memory M_{t-1} (B, N, W),
    read_prev w^r_{t-1} (B, R, N), write_prev w^w_{t-1} (B, H, N) ->
    (r_t (B, R, W), M_t (B, N, W), w^r_t (B, R, N), w^w_t (B, H, N),
     and with ``with_trace``, for inspection only (no gradient): e (B, H, W), a (B, H, W),
     beta (B, H + R), g (B, H + R), s (B, H + R, S), gamma (B, H + R)).
    On CPU float32/float64 tensors it runs the compiled kernels of ops/ntm/kernels.py,
    elsewhere the tensor operations of this module; both give the same values.
    """
    if dispatch.autocast_active(memory):
        return dispatch.in_state_precision(
            ntm_memory_step, params, memory, read_prev, write_prev, width, num_shifts, with_trace
        )
    return NTMMemoryStep.apply(params, memory, read_prev, write_prev, width, num_shifts, with_trace)
