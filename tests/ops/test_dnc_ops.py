"""The DNC's whole-sequence op (mannlab.ops.dnc.dnc_sequence): the numba kernels against the
plain tensor loop of ops/dnc/reference.py (features, final state and every gradient by name,
each controller the kernels implement, from a state that is not the reset one), inference
without records, a chunked run with carried state against one run, and the backend check; the
same for the Triton kernels (in Triton's interpreter without a GPU), with the model forced onto
them against its step loop. The model on the numba kernels against its own step loop is
tests/ops/test_dnc_sequence.py; the per-step memory op against reference.memory_step
tests/ops/test_fused_dnc_step.py."""

import pytest
import torch

from conftest import TRITON_ROWS, TRITON_ROWS_BATCH, force_triton_rows, leaves, small_model, triton_setup
from mannlab.models import base
from mannlab.models.dnc import DNCCell
from mannlab.ops import dnc as dnc_op
from mannlab.ops import use_kernels
from mannlab.ops.dnc import (
    ELMAN,
    FNN,
    LSTM,
    RELU,
    SIGMOID,
    TANH,
    DNCOptions,
    DNCState,
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


def problem(kind, seed=0, t=T, B=B):
    """x_proj, a random (normalised) state and weights; every tensor a leaf that requires grad."""
    gen = torch.Generator().manual_seed(seed)
    G = 4 * H if kind == LSTM else H

    def rand(*shape, scale=0.5):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    def simplex(*shape):
        return torch.softmax(rand(*shape, scale=2.0), -1) * 0.9

    links = simplex(B, N, N) * (1 - torch.eye(N, dtype=torch.float64))
    controller = {LSTM: (rand(B, H), rand(B, H)), ELMAN: (rand(B, H),), FNN: ()}[kind]
    state = DNCState(
        controller=controller,
        memory=rand(B, N, W, scale=1.0),
        read_vectors=rand(B, R, W),
        read_weights=simplex(B, R, N),
        write_weights=simplex(B, 1, N),
        usage=torch.rand(B, N, generator=gen, dtype=torch.float64),
        precedence=simplex(B, N),
        links=links,
    )
    P = sum(interface_sizes(R, W))
    weights = DNCWeights(rand(G, R * W), rand(G, H) if kind != FNN else None, rand(P, H), rand(P))
    x_proj = rand(B, t, G, scale=1.0)
    return leaf_records(x_proj, state, weights, lambda v: v.requires_grad_())


def map_state(state, fn):
    """The state with ``fn`` applied to every tensor (the controller's state too)."""
    state = state._replace(controller=tuple(map(fn, state.controller)))
    return state._replace(**{k: fn(v) for k, v in state._asdict().items() if k != "controller"})


def leaf_records(x_proj, state, weights, leaf):
    """The records with ``leaf`` applied to every tensor."""
    return (
        leaf(x_proj),
        map_state(state, leaf),
        DNCWeights(*(None if w is None else leaf(w) for w in weights)),
    )


def named_tensors(record, prefix):
    """The tensors of a record by dotted name (the controller's state by position)."""
    named = {}
    for key, value in record._asdict().items():
        if isinstance(value, tuple):
            named.update({f"{prefix}.{key}.{i}": v for i, v in enumerate(value)})
        elif value is not None:
            named[f"{prefix}.{key}"] = value
    return named


def named_leaves(x_proj, state, weights):
    return {"x_proj": x_proj, **named_tensors(state, "state"), **named_tensors(weights, "weights")}


def loss_of(features, final, seed=5):
    gen = torch.Generator().manual_seed(seed)
    return sum(
        (v * torch.randn(v.shape, generator=gen, dtype=torch.float64)).sum()
        for v in (features, *leaves(final))
    )


def grads_by_name(loss, named):
    """The gradient of ``loss`` for every named argument (zeros where none reaches it)."""
    grads = torch.autograd.grad(loss, list(named.values()), allow_unused=True)
    return {name: torch.zeros_like(v) if g is None else g for (name, v), g in zip(named.items(), grads)}


def run(problem_records, options, backend):
    features, final, _ = dnc_sequence(*problem_records, options, backend=backend)
    named = named_leaves(*problem_records)
    grads = grads_by_name(loss_of(features, final), named)
    return features, final, grads


def assert_same(got, want, atol=1e-10):
    (features, final, grads), (features_ref, final_ref, grads_ref) = got, want
    torch.testing.assert_close(features, features_ref, atol=atol, rtol=0)
    want = named_tensors(final_ref, "state")
    for name, value in named_tensors(final, "state").items():
        torch.testing.assert_close(value, want[name], atol=atol, rtol=0, msg=name)
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
        features, final, _ = dnc_sequence(*records, options)
        features_ref, final_ref, _ = dnc_sequence(*records, options, backend="reference")
    for value, ref in zip((features, *leaves(final)), (features_ref, *leaves(final_ref)), strict=True):
        torch.testing.assert_close(value, ref, atol=1e-10, rtol=0)


def test_chunked_run_with_carried_state_equals_one_run():
    records = problem(LSTM)
    x_proj, state, weights = records
    options = DNCOptions(LSTM, TANH, False, backward=True)
    whole = run(records, options, "numba")
    first, carry, _ = dnc_sequence(x_proj[:, :3], state, weights, options)
    rest, final, _ = dnc_sequence(x_proj[:, 3:], carry, weights, options)
    features = torch.cat([first, rest], 1)
    named = named_leaves(*records)
    grads = grads_by_name(loss_of(features, final), named)
    assert_same((features, final, grads), whole, atol=1e-12)


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="backend must be one of"):
        dnc_sequence(*problem(LSTM), DNCOptions(LSTM, TANH, False, True), backend="cuda")


# ---------------------------------------------------------------- the Triton kernels
# In Triton's interpreter on CPU tensors in float64 where there is no GPU (then float32 on CUDA),
# at sizes that keep the interpreter quick: B = 3 rows in tiles of 2 (one tile half empty),
# T = 3 steps (the links checkpointed every 2: two segments).


def on_device(records, device, dtype):
    """The records as fresh leaves on ``device`` in ``dtype``."""

    return leaf_records(*records, lambda value: value.detach().to(device, dtype).requires_grad_())


def run_triton(records, options):
    """``run`` on the Triton backend, its values and gradients back on the CPU in float64."""
    device, dtype, _ = triton_setup()
    features, final, grads = run(on_device(records, device, dtype), options, "triton")
    return (
        features.double().cpu(),
        map_state(final, lambda v: v.double().cpu()),
        {name: g.double().cpu() for name, g in grads.items()},
    )


@pytest.mark.parametrize("controller", list(CONTROLLERS))
def test_triton_matches_reference(controller):
    """Features, final state and every gradient by name, for every controller the numba kernels
    implement, from a state that is not the reset one."""
    *_, tol = triton_setup()
    kind, activation, pnr = CONTROLLERS[controller]
    records = problem(kind, t=3)
    options = DNCOptions(kind, activation, pnr, backward=True)
    assert_same(run_triton(records, options), run(records, options, "reference"), atol=tol)


@pytest.mark.parametrize("every", [1, 3])
def test_triton_link_checkpoints_at_any_interval(every, monkeypatch):
    """The backward's links recomputed from checkpoints every step, or once for the sequence."""
    from mannlab.ops.dnc import triton_sequence

    monkeypatch.setattr(triton_sequence, "checkpoint_interval", lambda steps: every)
    *_, tol = triton_setup()
    records = problem(LSTM, seed=2, t=3)
    options = DNCOptions(LSTM, TANH, True, backward=True)
    assert_same(run_triton(records, options), run(records, options, "reference"), atol=tol)


@pytest.mark.parametrize("rows", TRITON_ROWS)
def test_triton_at_any_rows_per_program(rows, monkeypatch):
    """Forced rows per program, on a batch that leaves a tail tile (or one row a program)."""
    from mannlab.ops.dnc import triton_sequence

    taken = force_triton_rows(monkeypatch, triton_sequence, rows)
    *_, tol = triton_setup()
    records = problem(LSTM, seed=3, t=2, B=TRITON_ROWS_BATCH)
    options = DNCOptions(LSTM, TANH, False, backward=True)
    assert_same(run_triton(records, options), run(records, options, "reference"), atol=tol)
    assert taken == [rows, rows]  # the forward's launch and the backward's


def test_triton_chunked_run_equals_one_run():
    """Two segments, the second from the first's state; and without a backward to come (two
    state rows in turn), the same values."""
    device, dtype, tol = triton_setup()
    options = DNCOptions(ELMAN, TANH, False, backward=True)
    records = on_device(problem(ELMAN, seed=3, t=4), device, dtype)
    x_proj, state, weights = records
    whole = run(records, options, "triton")
    first, carry, _ = dnc_sequence(x_proj[:, :1], state, weights, options, backend="triton")
    rest, final, _ = dnc_sequence(x_proj[:, 1:], carry, weights, options, backend="triton")
    features = torch.cat([first, rest], 1)
    grads = grads_by_name(loss_of(features, final), named_leaves(*records))
    assert_same((features, final, grads), whole, atol=tol)
    with torch.no_grad():
        quick, final, _ = dnc_sequence(*records, options._replace(backward=False), backend="triton")
    for value, want in zip((quick, *leaves(final)), (whole[0], *leaves(whole[1])), strict=True):
        torch.testing.assert_close(value, want, atol=tol, rtol=0)


@pytest.mark.parametrize(
    "controller, read_heads, training", [("lstm", 2, True), ("pnr-elman", 1, False), ("fnn", 1, True)]
)
def test_model_on_triton_equals_step_loop(controller, read_heads, training):
    """The model forced onto the Triton kernels against its own step loop, from the reset state
    (every usage equal: the allocation's ties) with N = 7 slots (padded to 8): outputs, final
    state and every parameter's gradient."""
    device, dtype, tol = triton_setup()
    model = small_model("dnc", 3, 2, controller=controller, read_heads=read_heads)
    model = model.to(device, dtype).train(training)
    x = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = x.to(device, dtype)

    def outputs_and_grads(kernels):
        model.zero_grad()
        with use_kernels(kernels):
            assert base.sequence_backend(model.cell, x) == ("triton" if kernels else "")
            y, state = model(x)
        values = [y, *leaves(state)]
        loss = sum((v * v.sin()).sum() for v in values)
        loss.backward()
        return values, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    values, grads = outputs_and_grads("triton")
    ref_values, ref_grads = outputs_and_grads(False)
    for a, b in zip(values, ref_values, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    assert grads.keys() == ref_grads.keys()
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=tol, rtol=tol, msg=lambda m: f"{name}: {m}")


def test_every_backend_refuses_what_it_does_not_cover():
    options = DNCOptions(3, TANH, False, backward=True)  # no such controller kind
    for backend in ("numba", "reference"):
        with pytest.raises(ValueError, match="implements the controller kinds"):
            dnc_sequence(*problem(LSTM), options, backend=backend)
    with pytest.raises(ValueError, match="the trace only the reference"):
        dnc_sequence(*problem(LSTM), options._replace(kind=LSTM, trace=True), backend="numba")


def test_inputs_of_the_wrong_shape_are_a_clear_error():
    x_proj, state, weights = problem(LSTM)
    options = DNCOptions(LSTM, TANH, False, backward=True)
    with pytest.raises(ValueError, match="x_proj must be"):
        dnc_sequence(x_proj[..., 1:], state, weights, options)
    with pytest.raises(ValueError, match="the state must be for batch"):
        dnc_sequence(x_proj[1:], state, weights, options)


def test_reference_trace_equals_the_model_step_loop():
    """The reference backend's trace and final state: the model's own step loop's."""
    model = small_model("dnc", 3, 2, controller="elman", read_heads=2).double()
    cell, x = model.cell, torch.randn(2, 4, 3, dtype=torch.float64)
    with use_kernels(False), torch.no_grad():
        _, final, trace = model(x, return_trace=True)
        state = cell.initial_state(2, dtype=torch.float64)
        options = cell.op_options(with_trace=True, backward=False)
        result = dnc_sequence(cell.precompute(x), state, cell.op_weights(), options, backend="reference")
    for name, value in trace._asdict().items():
        torch.testing.assert_close(getattr(result.trace, name), value, msg=name)
    for a, b in zip(leaves(result.state), leaves(final), strict=True):
        torch.testing.assert_close(a, b)


def test_op_lists_triton_for_the_controllers_it_covers():
    cell = DNCCell(3, controller="pnr-lstm", controller_size=4, memory_slots=4)
    assert cell.op is dnc_op and dnc_op.BACKENDS[:2] == ("numba", "triton")
    weights = cell.op_weights()
    assert dnc_op.covers(cell.op_options(False, True), weights, "triton")
    assert not dnc_op.covers(cell.op_options(True, True), weights, "triton")  # the trace: step loop
    assert DNCCell(3, controller="gru", controller_size=4, memory_slots=4).op_options(False, True) is None
