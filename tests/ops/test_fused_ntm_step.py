"""The fused NTM memory step equals the composition of the primitives, in value and gradient."""

import gc
import weakref

import pytest
import torch

from mannlab.ops import use_kernels
from mannlab.ops.ntm.memory_step import ntm_memory_step
from mannlab.ops.ntm.reference import memory_step as reference


@pytest.fixture(params=["kernels", "tensors"], autouse=True)
def path(request):
    """Every test runs on both paths: the compiled CPU kernels and the tensor operations."""
    with use_kernels(request.param == "kernels"):
        yield request.param


def inputs(B=2, H=1, R=1, N=7, W=4, S=3, seed=0, zero_rows=False):
    g = torch.Generator().manual_seed(seed)
    d = dict(dtype=torch.float64)
    params = torch.randn(B, (H + R) * (W + 3 + S) + H * 2 * W, generator=g, **d) * 1.5
    memory = torch.randn(B, N, W, generator=g, **d)
    if zero_rows:
        memory[:, 2] = 0  # exercises the eps guard of the cosine
    read_prev = torch.softmax(torch.randn(B, R, N, generator=g, **d), -1)
    write_prev = torch.softmax(torch.randn(B, H, N, generator=g, **d), -1)
    return [t.requires_grad_() for t in (params, memory, read_prev, write_prev)], (W, S)


@pytest.mark.parametrize(
    "shape",
    [dict(), dict(H=2, R=3), dict(H=3, R=1, N=5, S=5), dict(B=1, R=2, N=9, W=2, S=1), dict(zero_rows=True)],
)
def test_fused_step_matches_composition(shape):
    tensors, sizes = inputs(**shape)
    fused = ntm_memory_step(*tensors, *sizes)
    ref = reference(*tensors, *sizes)
    for a, b in zip(fused, ref):
        assert torch.allclose(a, b, atol=1e-12)
    upstream = [torch.randn_like(t) for t in ref]
    grads_fused = torch.autograd.grad(fused, tensors, upstream)
    grads_ref = torch.autograd.grad(ref, tensors, upstream)
    for a, b in zip(grads_fused, grads_ref):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("shape", [dict(), dict(H=2, R=2, N=5)])
def test_fused_step_gradcheck(shape):
    tensors, sizes = inputs(seed=3, **shape)
    assert torch.autograd.gradcheck(lambda *t: ntm_memory_step(*t, *sizes), tensors)


def test_unused_outputs_get_zero_gradient():
    # Only r_t feeds the loss (the last step of a sequence): the other outputs' gradients are None.
    tensors, sizes = inputs()
    reads = ntm_memory_step(*tensors, *sizes)[0]
    grads = torch.autograd.grad(reads.sum(), tensors)
    ref_grads = torch.autograd.grad(reference(*tensors, *sizes)[0].sum(), tensors)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-12)


def test_float32_matches_composition():
    tensors, sizes = inputs(H=2, R=2)
    tensors = [t.detach().float().requires_grad_() for t in tensors]
    fused, ref = ntm_memory_step(*tensors, *sizes), reference(*tensors, *sizes)
    for a, b in zip(fused, ref):
        assert a.dtype == torch.float32 and torch.allclose(a, b, atol=1e-5)
    upstream = [torch.randn_like(t) for t in ref]
    for a, b in zip(
        torch.autograd.grad(fused, tensors, upstream), torch.autograd.grad(ref, tensors, upstream)
    ):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_non_contiguous_and_expanded_inputs():
    # The first step's memory and weightings are learned values expanded over the batch.
    tensors, sizes = inputs(B=3)
    params, memory, read_prev, write_prev = tensors
    shared = [
        memory[:1].detach().expand(3, -1, -1).requires_grad_(),
        read_prev[:1].detach().expand(3, -1, -1).requires_grad_(),
    ]
    args = (params, shared[0], shared[1], write_prev.transpose(1, 2).contiguous().transpose(1, 2))
    fused, ref = ntm_memory_step(*args, *sizes), reference(*args, *sizes)
    for a, b in zip(fused, ref):
        assert torch.allclose(a, b, atol=1e-12)
    upstream = [torch.randn_like(t) for t in ref]
    for a, b in zip(
        torch.autograd.grad(fused, args[:3], upstream), torch.autograd.grad(ref, args[:3], upstream)
    ):
        assert torch.allclose(a, b, atol=1e-10)


def test_trace_values_have_no_gradient():
    tensors, sizes = inputs(H=2, R=1)
    outputs = ntm_memory_step(*tensors, *sizes, with_trace=True)
    erase, add, beta, gate, shift, gamma = outputs[4:]
    assert erase.shape == add.shape == (2, 2, 4) and shift.shape == (2, 3, 3)
    assert beta.shape == gate.shape == gamma.shape == (2, 3)
    assert not any(t.requires_grad for t in outputs[4:])
    assert torch.all(gamma >= 1) and torch.allclose(shift.sum(-1), torch.ones(2, 3, dtype=shift.dtype))


@pytest.mark.parametrize("with_trace", [False, True])
def test_outputs_are_freed_without_garbage_collection(with_trace):
    # A tensor kept on the autograd context outside save_for_backward forms a reference
    # cycle with its graph node, and a training run's memory grows without bound.
    tensors, sizes = inputs()
    gc.disable()
    try:
        outputs = ntm_memory_step(*tensors, *sizes, with_trace=with_trace)
        refs = [weakref.ref(t) for t in outputs]
        sum(t.sum() for t in outputs[:4]).backward()
        del outputs
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()
