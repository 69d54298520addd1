"""TARDIS's whole-sequence op (mannlab.ops.tardis.tardis_sequence): the numba kernels against
the plain tensor loop of reference.py (per-step values, final state and every gradient by name,
each read mode in training and at evaluation, learned and scheduled 1/τ, layer norm and
recurrent dropout, rows starting mid-fill), a chunked run with carried state against one run,
and the op's checks; the Triton kernels the same way (on the GPU where there is one, else in
Triton's interpreter at tiny sizes), the model on them against its step loop, and their size
limit. The model on the numba kernels against its own step loop is tests/models/test_tardis.py."""

import pytest
import torch

from conftest import TRITON_ROWS, TRITON_ROWS_BATCH
from mannlab.ops import use_kernels
from mannlab.ops.tardis import (
    MODES,
    TARDISInputs,
    TARDISOptions,
    TARDISResult,
    TARDISState,
    TARDISWeights,
    tardis_sequence,
)

B, T, D, K, A, C, M = 3, 9, 5, 4, 3, 4, 6  # K < T: every row's writes pass the filling phase
STEPS0 = (0, 2, 9)  # rows that start empty, mid-fill and full
G = 4 * D + 2


@pytest.fixture(autouse=True)
def kernels_enabled():
    """The numba backend runs even under MANNLAB_KERNELS=0 (numba is required)."""
    with use_kernels(True):
        yield


def problem(train=True, layer_norm=False, dropout=False, seed=0, t=T, batch=B):
    """Random records of one op call; every float tensor but the draws a leaf that requires grad.
    ``batch`` rows, their steps so far (STEPS0) and last reads in turn."""
    gen = torch.Generator().manual_seed(seed)
    B = batch

    def rand(*shape, scale=0.5):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).requires_grad_()

    def exp(*shape):
        return torch.empty(*shape, dtype=torch.float64).exponential_(generator=gen)

    gumbel = -torch.log(exp(t, B, K)) if train else None
    logistic = torch.log(exp(t, B, 2)) - torch.log(exp(t, B, 2)) if train else None
    keep = torch.rand(t, B, D, generator=gen, dtype=torch.float64) > 0.3
    mask = keep.to(torch.float64) / 0.7 if dropout else None  # bool / float would be float32
    inputs = TARDISInputs(rand(B, t, G, scale=1.0), rand(B, t, M, scale=1.0), gumbel, logistic, mask)
    counts = torch.randint(0, 3, (B, K), generator=gen).double()
    last = torch.nn.functional.one_hot(torch.tensor([(1, 0, 3)[i % 3] for i in range(B)]), K).double()
    state = TARDISState(
        rand(B, D),
        rand(B, D),
        rand(B, K, C),
        counts,
        last,
        torch.tensor([STEPS0[i % len(STEPS0)] for i in range(B)]),
    )
    address = (torch.randint(0, 2, (K, A), generator=gen) * 2 - 1).double() / A**0.5
    ln = [v for size in (3 * D, D, D) for v in (1 + rand(size), rand(size))] if layer_norm else [None] * 6
    weights = TARDISWeights(
        address,
        rand(G, D),
        rand(G, A + C),
        rand(C, D),
        rand(M, A + C),
        rand(M, D),
        rand(M, K),
        rand(1, M),
        rand(1, D),
        rand(1),
        *ln,
    )
    return inputs, state, weights


def differentiable(inputs, state, weights):
    """The op's differentiable arguments by name."""
    named = {"gates": inputs.gates, "read": inputs.read, "h0": state.hidden, "c0": state.cell}
    named["content"] = state.content
    named.update({name: w for name, w in weights._asdict().items() if w is not None and w.requires_grad})
    return named


def loss_of(result, seed=5):
    """A loss that reaches every output (with random weights, so no gradient cancels)."""
    gen = torch.Generator().manual_seed(seed)
    final = result.state
    values = [result.features, *result.trace, final.hidden, final.cell, final.content]
    return sum((v * torch.randn(v.shape, generator=gen, dtype=torch.float64)).sum() for v in values)


def grads_by_name(loss, named):
    """The gradient of ``loss`` for every named argument (zeros where none reaches it)."""
    grads = torch.autograd.grad(loss, list(named.values()), allow_unused=True)
    return {name: torch.zeros_like(v) if g is None else g for (name, v), g in zip(named.items(), grads)}


def run(records, options, backend):
    """The op's result (features, final state, trace) and the gradient of every differentiable
    argument by name (None where no gradient reaches it: zeros)."""
    result = tardis_sequence(*records, options, backend=backend)
    named = differentiable(*records)
    grads = grads_by_name(loss_of(result), named)
    return result, grads


def by_name(result):
    """The result's tensors by dotted name."""
    named = {"features": result.features}
    named.update({f"state.{k}": v for k, v in result.state._asdict().items()})
    if result.trace is not None:
        named.update({f"trace.{k}": v for k, v in result.trace._asdict().items()})
    return named


def assert_same(got, want, atol=1e-10):
    (result, grads), (result_ref, grads_ref) = got, want
    values, values_ref = by_name(result), by_name(result_ref)
    assert values.keys() == values_ref.keys()
    for name, value in values.items():
        torch.testing.assert_close(value, values_ref[name], atol=atol, rtol=0, msg=name)
    assert grads.keys() == grads_ref.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, grads_ref[name], atol=atol, rtol=0, msg=lambda m: f"{name}: {m}")


# ---------------------------------------------------------------- numba vs reference


@pytest.mark.parametrize("mode, train", [(m, True) for m in MODES] + [("argmax", False)])
@pytest.mark.parametrize("layer_norm, dropout", [(False, False), (True, False), (True, True), (False, True)])
@pytest.mark.parametrize("learned", [True, False])
def test_numba_matches_reference(mode, train, layer_norm, dropout, learned):
    records = problem(train, layer_norm, dropout and train)
    if mode == "argmax" and train:
        records = (records[0]._replace(gumbel=None), *records[1:])
    options = TARDISOptions(mode=mode, learned_temperature=learned, inverse_temperature=2.5)
    got = run(records, options, "numba")
    want = run(records, options, "reference")
    assert_same(got, want)
    read_w = got[0].trace.read_weights
    assert torch.equal(read_w.sum(-1), torch.ones(B, T, 1, dtype=torch.float64))  # one-hots
    sampled = got[0].trace.sampled
    assert torch.equal(sampled, torch.full((B, T), float(mode == "reinforce"), dtype=torch.float64))


def test_inference_without_records_gives_the_same_values():
    """keep=False (no backward to come): one step's scratch, the same outputs."""
    records = problem(True, True, True)
    options = TARDISOptions(mode="gumbel", keep=False)
    with torch.no_grad():
        values = by_name(tardis_sequence(*records, options))
        values_ref = by_name(tardis_sequence(*records, options, backend="reference"))
    for name, value in values.items():
        torch.testing.assert_close(value, values_ref[name], atol=1e-10, rtol=0, msg=name)


def test_without_the_trace_the_same_features_and_state():
    records = problem(True, True, True)
    options = TARDISOptions(mode="reinforce")
    with torch.no_grad():
        result = tardis_sequence(*records, options._replace(trace=False))
        with_trace = tardis_sequence(*records, options)
    assert result.trace is None
    assert torch.equal(result.features, with_trace.features)
    for value, want in zip(result.state, with_trace.state):
        assert torch.equal(value, want)


def joined_result(first, rest):
    """Two segments' results as one run's: features and trace over both, the second's state."""
    trace = type(first.trace)(*(torch.cat(pair, 1) for pair in zip(first.trace, rest.trace)))
    return TARDISResult(torch.cat([first.features, rest.features], 1), rest.state, trace)


@pytest.mark.parametrize("mode", ["gumbel", "reinforce"])
def test_chunked_run_with_carried_state_equals_one_run(mode):
    """Two segments, the second from the first's state (TBPTT with the memory carried): the
    per-step values, final state and gradients of one run over both."""
    records = problem(True, True, True)
    inputs = records[0]
    options = TARDISOptions(mode=mode)
    whole = run(records, options, "numba")
    cut = 4

    def part(time):
        return TARDISInputs(inputs.gates[:, time], inputs.read[:, time], *(v[time] for v in inputs[2:]))

    first = tardis_sequence(part(slice(None, cut)), *records[1:], options)
    rest = tardis_sequence(part(slice(cut, None)), first.state, records[2], options)
    joined = joined_result(first, rest)
    named = differentiable(*records)
    grads = grads_by_name(loss_of(joined), named)
    assert_same((joined, grads), whole, atol=1e-12)
    assert torch.equal(joined.state.steps, torch.tensor(STEPS0) + T)


def test_bad_records_get_clear_errors():
    inputs, state, weights = problem()
    with pytest.raises(ValueError, match="mode must be one of"):
        tardis_sequence(inputs, state, weights, TARDISOptions(mode="soft"))
    with pytest.raises(ValueError, match="backend must be one of"):
        tardis_sequence(inputs, state, weights, backend="cuda")
    with pytest.raises(ValueError, match="Gumbel noise"):
        tardis_sequence(inputs._replace(gumbel=None), state, weights)
    with pytest.raises(ValueError, match="Gumbel noise"):
        tardis_sequence(inputs, state, weights, TARDISOptions(mode="argmax"))
    with pytest.raises(ValueError, match="dropout must be"):
        tardis_sequence(inputs._replace(dropout=torch.ones(T, B, D + 1)), state, weights)
    with pytest.raises(ValueError, match=r"TARDISState.content must be \(3, 4, 4\)"):
        tardis_sequence(inputs, state._replace(content=state.content[:2]), weights)
    with pytest.raises(ValueError, match="TARDISInputs.read must be"):
        tardis_sequence(inputs._replace(read=inputs.read[..., 1:]), state, weights)


# ---------------------------------------------------------------- Triton vs reference

#: (problem's train, layer_norm, dropout; options) of the Triton kernels' checks: every read mode
#: in training and at evaluation, learned and scheduled 1/τ, layer norm and recurrent dropout
TRITON_CASES = {
    "gumbel": ((True, False, False), dict(mode="gumbel")),
    "gumbel-ln-dropout-scheduled": ((True, True, True), dict(mode="gumbel", learned_temperature=False)),
    "reinforce-ln": ((True, True, False), dict(mode="reinforce")),
    "argmax-train-dropout": ((True, False, True), dict(mode="argmax")),
    "gumbel-eval-ln-scheduled": ((False, True, False), dict(mode="gumbel", learned_temperature=False)),
    "argmax-eval": ((False, False, False), dict(mode="argmax")),
}
T_TRITON = 3  # with STEPS0: a row filling throughout, one that fills and then writes where it reads, one full


def triton_problem(train, layer_norm, dropout, options, batch=B, t=T_TRITON):
    records = problem(train, layer_norm, dropout, t=t, batch=batch)
    if options.mode == "argmax" and train:
        records = (records[0]._replace(gumbel=None), *records[1:])
    return records


def run_triton(records, options, device, dtype):
    """``run`` on the Triton backend, its values and gradients back on the CPU in float64."""
    from conftest import on_device

    result, grads = run(on_device(records, device, dtype), options, "triton")

    def back(value):
        return value.cpu() if not value.is_floating_point() else value.double().cpu()

    trace = type(result.trace)(*map(back, result.trace))
    final = type(result.state)(*map(back, result.state))
    return TARDISResult(back(result.features), final, trace), {n: back(g) for n, g in grads.items()}


@pytest.mark.parametrize("case", list(TRITON_CASES))
def test_triton_matches_reference(case):
    from conftest import triton_setup

    device, dtype, tol = triton_setup()
    problem_args, option_kw = TRITON_CASES[case]
    options = TARDISOptions(inverse_temperature=2.5, **option_kw)
    records = triton_problem(*problem_args, options)
    assert_same(run_triton(records, options, device, dtype), run(records, options, "reference"), atol=tol)


@pytest.mark.parametrize("rows", TRITON_ROWS)
def test_triton_at_any_rows_per_program(rows, monkeypatch):
    """Forced rows per program, on a batch that leaves a tail tile (or one row a program): each
    program has its own sums of the score's and the layer norms' gradients."""
    from conftest import force_triton_rows, triton_setup
    from mannlab.ops.tardis import triton_sequence

    taken = force_triton_rows(monkeypatch, triton_sequence, rows)
    device, dtype, tol = triton_setup()
    problem_args, option_kw = TRITON_CASES["gumbel-ln-dropout-scheduled"]
    options = TARDISOptions(inverse_temperature=2.5, **option_kw)
    records = triton_problem(*problem_args, options, batch=TRITON_ROWS_BATCH, t=2)
    assert_same(run_triton(records, options, device, dtype), run(records, options, "reference"), atol=tol)
    assert taken == [rows]  # the backward's launch takes the forward's


def test_triton_float32_matches_reference():
    """The GPU's dtype, float32, against the float64 reference (in the interpreter where there
    is no GPU)."""
    from conftest import triton_device

    options = TARDISOptions(mode="gumbel")
    records = triton_problem(True, True, True, options)
    assert_same(
        run_triton(records, options, triton_device(), torch.float32),
        run(records, options, "reference"),
        atol=1e-4,
    )


def test_triton_chunked_run_equals_one_run():
    """Two segments, the second from the first's state (and from non-contiguous slices of the
    inputs); and without records (no backward to come) the same values."""
    from conftest import on_device, triton_setup

    device, dtype, tol = triton_setup()
    options = TARDISOptions(mode="gumbel")
    records = on_device(triton_problem(True, True, True, options), device, dtype)
    inputs = records[0]
    whole = run(records, options, "triton")

    def part(time):
        return TARDISInputs(inputs.gates[:, time], inputs.read[:, time], *(v[time] for v in inputs[2:]))

    first = tardis_sequence(part(slice(None, 2)), *records[1:], options, backend="triton")
    rest = tardis_sequence(part(slice(2, None)), first.state, records[2], options, backend="triton")
    joined = joined_result(first, rest)
    grads = grads_by_name(loss_of(joined), differentiable(*records))
    assert_same((joined, grads), whole, atol=tol)
    with torch.no_grad():
        quick = by_name(tardis_sequence(*records, options._replace(keep=False), backend="triton"))
    for name, want in by_name(whole[0]).items():
        torch.testing.assert_close(quick[name], want, atol=tol, rtol=0, msg=name)


@pytest.mark.parametrize(
    "addressing, training, extra",
    [
        ("gumbel", True, dict()),
        ("reinforce", True, dict(layer_norm=True, recurrent_dropout=0.3)),
        ("gumbel", False, dict(temperature="scheduled")),
    ],
)
def test_model_on_triton_equals_step_loop(addressing, training, extra):
    """The model routed to the Triton kernels (forced) against its own step loop, from the same
    draws: outputs, trace, final state and every parameter's gradient."""
    from conftest import assert_triton_equals_step_loop, small_model, triton_setup

    device, dtype, tol = triton_setup()
    model = small_model("tardis", 3, 2, addressing=addressing, **extra).to(device, dtype).train(training)
    x = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(
        device, dtype
    )
    assert_triton_equals_step_loop(model, x, tol)


def test_triton_refuses_what_it_does_not_cover():
    """Sizes past records.TRITON_MAX_SIZE (here the read MLP's width): a clear error, and the
    op does not cover them on Triton."""
    pytest.importorskip("triton")
    from mannlab.models.tardis import TARDISCell
    from mannlab.ops.tardis.records import TRITON_MAX_SIZE

    inputs, state, weights = problem()
    m = TRITON_MAX_SIZE + 1

    def zeros(*shape):
        return torch.zeros(*shape, dtype=torch.float64)

    wide = weights._replace(
        read_memory=zeros(m, A + C), read_hidden=zeros(m, D), read_usage=zeros(m, K), read_score=zeros(1, m)
    )
    with pytest.raises(ValueError, match="Triton kernels implement sizes"):
        tardis_sequence(inputs._replace(read=zeros(B, T, m)), state, wide, backend="triton")

    def covered(cell, backend, with_trace=False):
        return cell.op.covers(cell.op_options(with_trace, True), cell.op_weights(), backend)

    cell = TARDISCell(3, hidden_size=8, memory_slots=4, address_size=3, content_size=5)
    assert cell.op.BACKENDS[:2] == ("numba", "triton")
    assert covered(cell, "triton", True) and covered(cell, "triton")
    wide_cell = TARDISCell(3, hidden_size=TRITON_MAX_SIZE + 1)
    assert not covered(wide_cell, "triton")
    assert covered(wide_cell, "numba", True)  # numba: every size


def test_triton_kernels_run_only_when_forced():
    """Not yet run on a GPU (GPU_CHECKED False): the model never lists Triton for the device
    policy and the switch "on" keeps CPU tensors on numba; forced, Triton applies."""
    pytest.importorskip("triton")
    from conftest import small_model
    from mannlab.models.base import sequence_backend
    from mannlab.ops import dispatch
    from mannlab.ops.tardis import triton_kernels

    assert not triton_kernels.GPU_CHECKED and not dispatch.triton_checked("tardis")
    model = small_model("tardis", 3, 2)
    assert model.kernel_backends() == ("numba",)
    x = torch.zeros(1, 2, 3, dtype=torch.float64)
    assert sequence_backend(model.cell, x) == "numba"
    with use_kernels("triton"):
        assert sequence_backend(model.cell, x) == "triton"
