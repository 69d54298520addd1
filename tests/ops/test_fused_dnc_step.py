"""The fused DNC memory step equals the composition of the primitives, in value and gradient."""

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

import mannlab
from mannlab.nn import addressing as A
from mannlab.ops import use_kernels
from mannlab.ops.dnc.memory_step import dnc_memory_step, interface_sizes

#: the memory step's outputs with a gradient, in the order of ``reference`` below
STEP = ("read_vectors", "memory", "read_weights", "write_weights", "usage", "precedence", "links")


def fused_step(*tensors):
    """The memory step's outputs with a gradient, as a tuple."""
    step = dnc_memory_step(*tensors)
    return tuple(getattr(step, name) for name in STEP)


@pytest.fixture(params=["kernels", "tensors"], autouse=True)
def path(request):
    """Every test runs on both paths: the compiled CPU kernels and the composition."""
    with use_kernels(request.param == "kernels"):
        yield request.param


def reference(raw, memory, read_w, write_w, usage, precedence, links):
    """Steps (ii)-(iii) written out with the primitives of mannlab.nn.addressing."""
    B, R, W = raw.shape[0], read_w.shape[1], memory.shape[2]
    read_keys, write_key = raw[:, : R * W].view(B, R, W), raw[:, R * W : R * W + W].unsqueeze(1)
    vector = raw[:, R * W + W : R * W + 2 * W].unsqueeze(1)
    beta = 1 + F.softplus(raw[:, R * W + 2 * W : R * W + 2 * W + R + 1])
    gates = torch.sigmoid(raw[:, R * W + 2 * W + R + 1 : -3 * R])
    erase, free = gates[:, None, :W], gates[:, W : W + R]
    alloc_gate, write_gate = gates[:, -2], gates[:, -1]
    modes = torch.softmax(raw[:, -3 * R :].view(B, R, 3), -1)
    u = A.usage(usage, write_w[:, 0], A.retention(free, read_w))
    c_w = A.content_weights(write_key, memory, beta[:, R:])[:, 0]
    ww = A.write_weighting(A.allocation(u), c_w, write_gate, alloc_gate)
    new_memory = A.write(memory, ww[:, None], erase, vector)
    new_links = A.link_matrix(links, ww, precedence)
    fwd, bwd = A.directional_weights(new_links, read_w)
    rw = A.read_weighting(bwd, A.content_weights(read_keys, new_memory, beta[:, :R]), fwd, modes)
    return (A.read(new_memory, rw), new_memory, rw, ww[:, None], u, A.precedence(precedence, ww), new_links)


def inputs(B=2, R=1, N=7, W=4, seed=0, ties=False, zero_rows=False):
    """A random valid state: weightings sum to < 1, usage in [0, 1), links with zero diagonal."""
    g = torch.Generator().manual_seed(seed)
    d = dict(dtype=torch.float64)

    def simplex(*shape):
        return 0.9 * torch.softmax(2 * torch.randn(*shape, generator=g, **d), -1)

    raw = 1.5 * torch.randn(B, sum(interface_sizes(R, W)), generator=g, **d)
    memory = torch.randn(B, N, W, generator=g, **d)
    read_w, write_w, precedence = simplex(B, R, N), simplex(B, 1, N), simplex(B, N)
    usage = torch.rand(B, N, generator=g, **d)
    links = simplex(B, N, N) / 2 * (1 - torch.eye(N, **d))
    if ties:  # slots 1, 4 and 5 get the same u_t, exactly: the stable sort's tie-break
        for t in (usage, write_w[:, 0], *read_w.unbind(1)):
            t[:, 4] = t[:, 5] = t[:, 1]
    if zero_rows:  # exercises the eps guard of the cosine
        memory[:, 2] = 0
    return [t.requires_grad_() for t in (raw, memory, read_w, write_w, usage, precedence, links)]


def assert_close(got, want, atol):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert torch.allclose(a, b, atol=atol), (a - b).abs().max()


def assert_same_step(tensors, outputs=slice(None)):
    fused = fused_step(*tensors)[outputs]
    ref = reference(*tensors)[outputs]
    assert_close(fused, ref, 1e-12)
    upstream = [torch.randn_like(t) for t in ref]
    leaves = [t for t in tensors if t.requires_grad]
    assert_close(
        torch.autograd.grad(fused, leaves, upstream), torch.autograd.grad(ref, leaves, upstream), 1e-10
    )


@pytest.mark.parametrize(
    "shape",
    [dict(), dict(R=2), dict(R=4, N=9, W=3), dict(B=1, R=2, N=5), dict(R=2, ties=True), dict(zero_rows=True)],
)
def test_fused_step_matches_composition(shape):
    assert_same_step(inputs(**shape))


def test_only_reads_feed_the_loss():
    # The last step of a sequence: the other outputs get no gradient (zeros in the kernel).
    assert_same_step(inputs(R=2), outputs=slice(0, 1))


@pytest.mark.parametrize("read_heads", [1, 2])
def test_zero_initial_state(read_heads):
    # The first step: every state tensor is one zero expanded over the batch (initial_state);
    # all usages tie, so the write is allocated to slot 0.
    B, N, W = 3, 6, 4
    raw = inputs(B=B, R=read_heads, N=N, W=W)[0]
    zeros = [
        torch.zeros((), dtype=torch.float64, requires_grad=True).expand(B, *shape)
        for shape in ((N, W), (read_heads, N), (1, N), (N,), (N,), (N, N))
    ]
    assert_same_step([raw, *zeros])
    alloc = dnc_memory_step(raw, *zeros, with_trace=True).trace.allocation
    assert torch.equal(alloc, torch.eye(N, dtype=torch.float64)[[0] * B])


@pytest.mark.parametrize("shape", [dict(N=5, W=3), dict(R=2, N=4, W=2)])
def test_fused_step_gradcheck(shape):
    # No ties: at a tie in u_t the allocation jumps, so finite differences are meaningless.
    tensors = inputs(seed=3, **shape)
    assert torch.autograd.gradcheck(fused_step, tensors)


def test_float32_matches_composition():
    tensors = [t.detach().float().requires_grad_() for t in inputs(R=2, ties=True)]
    fused, ref = fused_step(*tensors), reference(*tensors)
    assert_close(fused, ref, 1e-5)
    upstream = [torch.randn_like(t) for t in ref]
    for a, b in zip(
        torch.autograd.grad(fused, tensors, upstream), torch.autograd.grad(ref, tensors, upstream)
    ):
        assert a.dtype == torch.float32 and torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_non_contiguous_inputs():
    tensors = inputs(B=3, R=2)
    transposed = [
        t.detach().transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_() for t in tensors[1:4]
    ]
    assert not transposed[0].is_contiguous()
    assert_same_step([tensors[0], *transposed, *tensors[4:]])


def test_trace_values_have_no_gradient():
    tensors = inputs(R=2)
    step = dnc_memory_step(*tensors, with_trace=True)
    alloc, modes, free, alloc_gate, write_gate = step.trace
    assert alloc.shape == (2, 7) and modes.shape == (2, 2, 3) and free.shape == (2, 2)
    assert alloc_gate.shape == write_gate.shape == (2,)
    assert not any(t.requires_grad for t in step.trace)
    assert dnc_memory_step(*tensors).trace is None
    assert torch.allclose(alloc, A.allocation(step.usage), atol=1e-12)
    assert torch.allclose(modes.sum(-1), torch.ones(2, 2, dtype=torch.float64))
    assert all(((t > 0) & (t < 1)).all() for t in (free, alloc_gate, write_gate))


def test_kernel_path_records_one_node(path):
    step = dnc_memory_step(*inputs())
    fused = type(step.read_vectors.grad_fn).__name__ == "DNCMemoryStepBackward"
    assert fused == (path == "kernels")


def test_dnc_module_is_the_same_on_both_paths():
    torch.manual_seed(0)
    model = mannlab.DNC(5, 4, controller_size=6, memory_slots=7, memory_width=3, read_heads=2).double()
    x = torch.randn(2, 8, 5, dtype=torch.float64)

    def run():
        y, _ = model(x)
        return (y, *torch.autograd.grad(y.square().sum(), list(model.parameters())))

    fused = run()
    with use_kernels(False):
        composed = run()
    assert_close(fused, composed, 1e-10)


@pytest.mark.parametrize("with_trace", [False, True])
def test_outputs_are_freed_without_garbage_collection(with_trace):
    # A tensor kept on the autograd context outside save_for_backward forms a reference
    # cycle with its graph node, and a training run's memory grows without bound.
    tensors = inputs()
    gc.disable()
    try:
        step = dnc_memory_step(*tensors, with_trace=with_trace)
        outputs = [getattr(step, name) for name in STEP] + list(step.trace or ())
        refs = [weakref.ref(t) for t in outputs]
        sum(getattr(step, name).sum() for name in STEP).backward()
        del outputs, step
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()
