"""The DNC's whole-sequence op (mannlab.ops.dnc.dnc_sequence): the numba kernels against the
plain tensor loop of ops/dnc/reference.py (features, final state and every gradient by name,
each controller the kernels implement, from a state that is not the reset one), inference
without records, a chunked run with carried state against one run, and the backend check. The
model on the kernels against its own step loop is tests/test_dnc_sequence.py; the per-step
memory op against reference.memory_step tests/test_fused_dnc_step.py."""

import pytest
import torch

from mannlab.ops import use_kernels
from mannlab.ops.dnc import (
    ELMAN,
    FNN,
    LSTM,
    RELU,
    SIGMOID,
    TANH,
    DNCOptions,
    DNCSequenceState,
    DNCWeights,
    dnc_sequence,
)
from mannlab.ops.dnc.reference import interface_sizes

B, T, H, N, W, R = 3, 7, 5, 4, 3, 2
CONTROLLERS = {  # name: (kind, activation, pnr)
    "fnn-tanh": (FNN, TANH, False),
    "fnn-sigmoid": (FNN, SIGMOID, False),
    "fnn-relu": (FNN, RELU, False),
    "elman": (ELMAN, TANH, False),
    "lstm": (LSTM, TANH, False),
    "pnr-elman": (ELMAN, TANH, True),
    "pnr-lstm": (LSTM, TANH, True),
}


@pytest.fixture(autouse=True)
def kernels_enabled():
    """The numba backend runs even under MANNLAB_KERNELS=0 (numba is required)."""
    with use_kernels(True):
        yield


def problem(kind, seed=0, t=T):
    """x_proj, a random (normalised) state and weights; every tensor a leaf that requires grad."""
    gen = torch.Generator().manual_seed(seed)
    G = 4 * H if kind == LSTM else H

    def rand(*shape, scale=0.5):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    def simplex(*shape):
        return torch.softmax(rand(*shape, scale=2.0), -1) * 0.9

    links = simplex(B, N, N) * (1 - torch.eye(N, dtype=torch.float64))
    state = DNCSequenceState(
        rand(B, H),
        rand(B, H),
        rand(B, R * W),
        rand(B, N, W, scale=1.0),
        simplex(B, R, N),
        simplex(B, N),
        torch.rand(B, N, generator=gen, dtype=torch.float64),
        simplex(B, N),
        links,
    )
    P = sum(interface_sizes(R, W))
    weights = DNCWeights(rand(G, R * W), rand(G, H) if kind != FNN else None, rand(P, H), rand(P))
    x_proj = rand(B, t, G, scale=1.0)
    leaf = lambda v: None if v is None else v.requires_grad_()  # noqa: E731
    return leaf(x_proj), DNCSequenceState(*map(leaf, state)), DNCWeights(*map(leaf, weights))


def named_leaves(x_proj, state, weights):
    named = {"x_proj": x_proj, **{f"state.{k}": v for k, v in state._asdict().items()}}
    named.update({f"weights.{k}": v for k, v in weights._asdict().items() if v is not None})
    return named


def loss_of(features, final, seed=5):
    gen = torch.Generator().manual_seed(seed)
    return sum(
        (v * torch.randn(v.shape, generator=gen, dtype=torch.float64)).sum() for v in (features, *final)
    )


def grads_by_name(loss, named):
    """The gradient of ``loss`` for every named argument (zeros where none reaches it)."""
    grads = torch.autograd.grad(loss, list(named.values()), allow_unused=True)
    return {name: torch.zeros_like(v) if g is None else g for (name, v), g in zip(named.items(), grads)}


def run(problem_records, options, backend):
    features, final = dnc_sequence(*problem_records, options, backend=backend)
    named = named_leaves(*problem_records)
    grads = grads_by_name(loss_of(features, final), named)
    return features, final, grads


def assert_same(got, want, atol=1e-10):
    (features, final, grads), (features_ref, final_ref, grads_ref) = got, want
    torch.testing.assert_close(features, features_ref, atol=atol, rtol=0)
    for name, value in final._asdict().items():
        torch.testing.assert_close(value, getattr(final_ref, name), atol=atol, rtol=0, msg=name)
    assert grads.keys() == grads_ref.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, grads_ref[name], atol=atol, rtol=0, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("controller", list(CONTROLLERS))
def test_numba_matches_reference(controller):
    kind, activation, pnr = CONTROLLERS[controller]
    records = problem(kind)
    options = DNCOptions(kind, activation, pnr, backward=True)
    assert_same(run(records, options, "numba"), run(records, options, "reference"))


def test_inference_without_records_gives_the_same_values():
    records = problem(LSTM)
    options = DNCOptions(LSTM, TANH, False, backward=False)
    with torch.no_grad():
        features, final = dnc_sequence(*records, options)
        features_ref, final_ref = dnc_sequence(*records, options, backend="reference")
    for value, ref in zip((features, *final), (features_ref, *final_ref)):
        torch.testing.assert_close(value, ref, atol=1e-10, rtol=0)


def test_chunked_run_with_carried_state_equals_one_run():
    records = problem(LSTM)
    x_proj, state, weights = records
    options = DNCOptions(LSTM, TANH, False, backward=True)
    whole = run(records, options, "numba")
    first, carry = dnc_sequence(x_proj[:, :3], state, weights, options)
    rest, final = dnc_sequence(x_proj[:, 3:], carry, weights, options)
    features = torch.cat([first, rest], 1)
    named = named_leaves(*records)
    grads = grads_by_name(loss_of(features, final), named)
    assert_same((features, final, grads), whole, atol=1e-12)


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="backend must be one of"):
        dnc_sequence(*problem(LSTM), DNCOptions(LSTM, TANH, False, True), backend="cuda")
