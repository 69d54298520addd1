"""The fused NTM addressing equals the composition of the primitives, in value and gradient."""

import pytest
import torch

from mannlab.nn import addressing as A
from mannlab.ops.ntm.fused_addressing import ntm_address


def reference(keys, memory, previous, beta, gate, shift, gamma):
    content = A.content_weights(keys, memory, beta)
    return A.sharpen(A.circular_shift(A.interpolate(content, previous, gate), shift), gamma)


def inputs(B=2, H=3, N=7, W=4, S=3, zero_rows=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = dict(dtype=torch.float64)
    memory = torch.randn(B, N, W, generator=g, **d)
    if zero_rows:
        memory[:, 1] = 0  # exercises the eps guard of the cosine
    args = (
        torch.randn(B, H, W, generator=g, **d),
        memory,
        torch.softmax(torch.randn(B, H, N, generator=g, **d), -1),
        torch.rand(B, H, generator=g, **d) * 5,
        torch.rand(B, H, generator=g, **d),
        torch.softmax(torch.randn(B, H, S, generator=g, **d), -1),
        1 + torch.rand(B, H, generator=g, **d) * 3,
    )
    return [a.requires_grad_() for a in args]


@pytest.mark.parametrize(
    "shape", [dict(), dict(H=1, N=5, S=5), dict(B=1, H=2, N=9, W=2, S=1), dict(zero_rows=True)]
)
def test_fused_matches_composition(shape):
    args = inputs(**shape)
    fused, ref = ntm_address(*args), reference(*args)
    assert torch.allclose(fused, ref, atol=1e-12)
    upstream = torch.randn_like(fused)
    grads_fused = torch.autograd.grad(fused, args, upstream)
    grads_ref = torch.autograd.grad(ref, args, upstream)
    for a, b in zip(grads_fused, grads_ref):
        assert torch.allclose(a, b, atol=1e-10)


def test_fused_gradcheck():
    # (An all-zero memory row sits on the kink of max(|x|, eps), where finite
    # differences are meaningless; that case is compared with autograd above.)
    assert torch.autograd.gradcheck(ntm_address, inputs(seed=3))


def test_fused_float32_matches():
    args = [a.detach().float() for a in inputs()]
    assert torch.allclose(ntm_address(*args), reference(*args), atol=1e-6)
