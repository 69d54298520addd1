"""The D-NTM's whole-sequence op (mannlab.ops.dntm.dntm_sequence): the numba kernels against the
plain tensor loop of reference.py (per-step values, final state and every gradient by name, for
every addressing mode, learned and sequential writes, LRU, the NOP cell, J = 1 and 2, the GRU and
the feed-forward controller, several heads, write keys over C, with and without the trace), in
float32, without records (inference), a gradient check, a chunked run with carried state
against one run, and the op's checks; the Triton kernels against the reference (every mode,
J = 1, learned writes; on the GPU where there is one, else in Triton's interpreter at tiny
sizes), and the model on them against its step loop. The model on the kernels against its own step loop is
tests/models/test_dntm.py."""

import gc
import weakref

import pytest
import torch

from conftest import (
    TRITON_ROWS,
    TRITON_ROWS_BATCH,
    assert_triton_equals_step_loop,
    force_triton_rows,
    on_device,
    small_model,
    triton_setup,
)
from mannlab.ops import use_kernels
from mannlab.ops.controller_codes import RELU
from mannlab.ops.dntm import (
    MODES,
    NOISY_MODES,
    DNTMInputs,
    DNTMLocation,
    DNTMOptions,
    DNTMResult,
    DNTMState,
    DNTMWeights,
    DNTMWriteCounts,
    dntm_sequence,
    head_sizes,
)

B, T, D, N, DA, DC = 3, 6, 4, 5, 3, 4  # N' = 5 cells (the last the NOP cell with nop)
W = DA + DC
WRITTEN0 = (0.0, 3.0, 9.0)  # sequential writes: rows that start empty, filling and full


@pytest.fixture(autouse=True)
def kernels_enabled():
    """The numba backend runs even under MANNLAB_KERNELS=0 (numba is required)."""
    with use_kernels(True):
        yield


def problem(options, controller="gru", reads=2, writes=1, seed=0, t=T, dtype=torch.float64, batch=B):
    """Random records of one op call; every float tensor but the draws and counts a leaf that
    requires grad. ``batch`` rows (sequential writes take the default's three)."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.7):
        return (torch.randn(*shape, generator=gen, dtype=dtype) * scale).requires_grad_()

    gru, sequential = controller == "gru", options.writes == "sequential"
    pc = 3 * D if gru else D
    key_size = W if options.write_keys == "memory" else DC
    P = sum(head_sizes(reads, writes, W, key_size, DC))
    sampled = reads + (0 if sequential else writes)
    draws = None
    if options.mode in NOISY_MODES:
        draws = torch.empty(t * options.addressing_steps, batch * sampled * N, dtype=dtype).exponential_(
            generator=gen
        )
    inputs = DNTMInputs(rand(batch, t, pc + writes * (DC + 1), scale=1.0), draws)
    counts = ()
    if sequential:
        counts = DNTMWriteCounts(
            torch.tensor(WRITTEN0, dtype=dtype),
            torch.randint(0, 3, (batch, N), generator=gen).to(dtype),
        )
    state = DNTMState(
        controller=(rand(batch, D),) if gru else (),
        content=rand(batch, N, DC),
        read_vectors=rand(batch, reads, W),
        read_lru=rand(batch, reads, N),
        write_lru=rand(batch, writes, N),
        counts=counts,
    )
    weights = DNTMWeights(
        rand(pc, reads * W),
        rand(3 * D, D) if gru else None,
        rand(3 * D) if gru else None,
        rand(P, D),
        rand(P),
        rand(N, DA, scale=1.0),
    )
    return inputs, state, weights


def tensors_by_name(value, prefix, named=None):
    """The tensors of a (nested) record by dotted name; tuples without field names by
    position (the controller's state)."""
    named = {} if named is None else named
    if isinstance(value, torch.Tensor):
        named[prefix] = value
    elif isinstance(value, tuple):
        for key, item in zip(getattr(value, "_fields", range(len(value))), value):
            tensors_by_name(item, f"{prefix}.{key}", named)
    return named


def by_name(result):
    """The op's result (features, final state, trace) by dotted name."""
    named = {"features": result.features}
    tensors_by_name(result.state, "state", named)
    return tensors_by_name(result.trace, "trace", named)


def differentiable(inputs, state, weights):
    """The op's differentiable arguments by name."""
    named = {"projected": inputs.projected}
    for name, value in {**tensors_by_name(state, "state"), **tensors_by_name(weights, "weights")}.items():
        if value.requires_grad:
            named[name] = value
    return named


def loss_of(result, seed=5):
    """A loss that reaches every output (with random weights, so no gradient cancels)."""
    gen = torch.Generator().manual_seed(seed)
    values = [v for v in by_name(result).values() if v.is_floating_point()]
    return sum((v * torch.randn(v.shape, generator=gen, dtype=v.dtype)).sum() for v in values)


def grads_by_name(loss, named):
    """The gradient of ``loss`` for every named argument (zeros where none reaches it)."""
    grads = torch.autograd.grad(loss, list(named.values()), allow_unused=True)
    return {name: torch.zeros_like(v) if g is None else g for (name, v), g in zip(named.items(), grads)}


def run(records, options, backend):
    """The op's result and the gradient of every differentiable argument by name."""
    result = dntm_sequence(*records, options, backend=backend)
    grads = grads_by_name(loss_of(result), differentiable(*records))
    return result, grads


def assert_same(got, want, atol=1e-10):
    (result, grads), (result_ref, grads_ref) = got, want
    values, values_ref = by_name(result), by_name(result_ref)
    assert values.keys() == values_ref.keys()
    for name, value in values.items():
        other = values_ref[name]
        torch.testing.assert_close(value, other, atol=atol, rtol=0, msg=lambda m: f"{name}: {m}")
        assert value.requires_grad == other.requires_grad, name
    assert grads.keys() == grads_ref.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, grads_ref[name], atol=atol, rtol=0, msg=lambda m: f"{name}: {m}")


# ---------------------------------------------------------------- numba vs reference


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("writes", ["learned", "sequential"])
@pytest.mark.parametrize("lru, nop, steps", [(True, False, 1), (False, True, 2), (True, True, 2)])
@pytest.mark.parametrize("trace", [True, False])
def test_numba_matches_reference(mode, writes, lru, nop, steps, trace):
    options = DNTMOptions(
        mode=mode,
        addressing_steps=steps,
        lru=lru,
        nop=nop,
        writes=writes,
        trace=trace,
        inverse_temperature=2.5,
    )
    records = problem(options)
    got = run(records, options, "numba")
    assert_same(got, run(records, options, "reference"))
    assert (got[0].trace is None) == (not trace)
    if trace and mode != "soft":  # one-hots
        read_w = got[0].trace.read_weights
        assert torch.equal(read_w.sum(-1), torch.ones_like(read_w[..., 0]))
    if trace:
        sampled = torch.full((B, T), float(mode == "sample"), dtype=torch.float64)
        assert torch.equal(got[0].trace.sampled, sampled)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "kw",
    [
        dict(controller="fnn"),
        dict(write_keys="content"),
        dict(reads=1, writes=2),
        dict(controller="fnn", writes=3, write_keys="content"),
    ],
)
def test_numba_matches_reference_controllers_heads_and_keys(mode, kw):
    """The feed-forward controller, write keys over C alone, several write heads (their
    erasures multiply, their candidates add)."""
    kw = dict(kw)
    options = DNTMOptions(mode=mode, addressing_steps=2, nop=True, write_keys=kw.pop("write_keys", "memory"))
    records = problem(options, **kw)
    assert_same(run(records, options, "numba"), run(records, options, "reference"))


def test_float32_close_to_reference():
    options = DNTMOptions(mode="gumbel", addressing_steps=2, nop=True, writes="sequential")
    records = problem(options, dtype=torch.float32)
    got, want = run(records, options, "numba"), run(records, options, "reference")
    assert got[0].features.dtype == torch.float32
    assert_same(got, want, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_inference_without_records_gives_the_same_values(mode):
    """keep=False (no backward to come): one step's scratch, the same outputs, trace or not."""
    for trace in (False, True):
        options = DNTMOptions(mode=mode, addressing_steps=2, nop=True, keep=False, trace=trace)
        records = problem(options)
        with torch.no_grad():
            values = by_name(dntm_sequence(*records, options))
            values_ref = by_name(dntm_sequence(*records, options, backend="reference"))
        assert values.keys() == values_ref.keys()
        for name, value in values.items():
            torch.testing.assert_close(value, values_ref[name], atol=1e-12, rtol=0, msg=name)


@pytest.mark.parametrize("controller", ["gru", "fnn"])
def test_gradcheck_numba(controller):
    """The kernels' gradients against finite differences: soft weightings (LRU off: its v_t
    takes no gradient from z_t on purpose, which finite differences would see), and the
    discrete modes with the draws fixed, through the trace's probabilities."""
    options = DNTMOptions(addressing_steps=2, lru=False, nop=True)
    inputs, state, weights = problem(options, controller, writes=2, t=3)

    def op(projected, content, read_vectors, address, *hidden):
        start = state._replace(content=content, read_vectors=read_vectors, controller=hidden)
        result = dntm_sequence(
            inputs._replace(projected=projected), start, weights._replace(address=address), options
        )
        return result.features, result.trace.read_probs, result.state.content

    args = (inputs.projected, state.content, state.read_vectors, weights.address)
    assert torch.autograd.gradcheck(op, args + state.controller)
    for mode in ("sample", "argmax"):
        hard = options._replace(mode=mode)
        inputs, state, weights = problem(hard, controller, t=3)

        def op_hard(projected, head_weight):
            result = dntm_sequence(
                inputs._replace(projected=projected), state, weights._replace(head_weight=head_weight), hard
            )
            return result.features, result.trace.read_probs, result.trace.write_probs

        assert torch.autograd.gradcheck(op_hard, (inputs.projected, weights.head_weight))


def joined_result(first, rest):
    """Two segments' results as one run's: features and trace over both, the second's state."""
    trace = type(first.trace)(*(torch.cat(pair, 1) for pair in zip(first.trace, rest.trace)))
    return DNTMResult(torch.cat([first.features, rest.features], 1), rest.state, trace)


@pytest.mark.parametrize("mode", ["soft", "sample", "gumbel"])
@pytest.mark.parametrize("writes", ["learned", "sequential"])
def test_chunked_run_with_carried_state_equals_one_run(mode, writes):
    """Two segments, the second from the first's state (TBPTT with the memory carried): the
    per-step values, final state and gradients of one run over both."""
    options = DNTMOptions(mode=mode, addressing_steps=2, nop=True, writes=writes)
    records = problem(options)
    inputs = records[0]
    whole = run(records, options, "numba")
    cut, J = 4, options.addressing_steps

    def part(start, stop):
        draws = None if inputs.draws is None else inputs.draws[start * J : stop * J]
        return DNTMInputs(inputs.projected[:, start:stop], draws)

    first = dntm_sequence(part(0, cut), *records[1:], options)
    rest = dntm_sequence(part(cut, T), first.state, records[2], options)
    joined = joined_result(first, rest)
    grads = grads_by_name(loss_of(joined), differentiable(*records))
    assert_same((joined, grads), whole, atol=1e-12)


@pytest.mark.parametrize("trace", [False, True])
def test_outputs_are_freed_without_garbage_collection(trace):
    """Nothing on the autograd context outside save_for_backward (no reference cycle)."""
    options = DNTMOptions(mode="sample", trace=trace)
    records = problem(options)
    gc.disable()
    try:
        result = dntm_sequence(*records, options)
        outputs = list(by_name(result).values())
        refs = [weakref.ref(v) for v in outputs]
        loss = loss_of(result)
        del outputs, result
        loss.backward()
        del loss
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()


def test_bad_records_get_clear_errors():
    options = DNTMOptions(mode="sample")
    inputs, state, weights = problem(options)
    with pytest.raises(ValueError, match="mode must be one of"):
        dntm_sequence(inputs, state, weights, options._replace(mode="reinforce"))
    with pytest.raises(ValueError, match="backend must be one of"):
        dntm_sequence(inputs, state, weights, options, backend="cuda")
    with pytest.raises(ValueError, match="Exp"):
        dntm_sequence(inputs._replace(draws=None), state, weights, options)
    with pytest.raises(ValueError, match="Exp"):
        dntm_sequence(inputs, state, weights, options._replace(mode="argmax"))
    with pytest.raises(ValueError, match=r"draws must be \(6, 45\)"):
        dntm_sequence(inputs._replace(draws=inputs.draws[:, 1:]), state, weights, options)
    with pytest.raises(ValueError, match="feed-forward"):
        dntm_sequence(inputs, state._replace(controller=()), weights, options)
    with pytest.raises(ValueError, match="DNTMState.counts"):
        dntm_sequence(inputs, state, weights, options._replace(writes="sequential"))
    with pytest.raises(ValueError, match="tanh feed-forward controller"):
        dntm_sequence(inputs, state, weights, options._replace(activation=RELU))
    location = DNTMLocation(state.read_lru, state.write_lru)
    with pytest.raises(ValueError, match="no location-based addressing"):
        dntm_sequence(inputs, state._replace(location=location), weights, options)
    with pytest.raises(ValueError, match=r"DNTMState.read_vectors must be \(3, 2, 7\)"):
        dntm_sequence(inputs, state._replace(read_vectors=state.read_vectors[:, :1]), weights, options)


# ---------------------------------------------------------------- Triton vs reference
# On the GPU where there is one, else in Triton's interpreter on CPU tensors (tests/conftest.py),
# at tiny sizes: the interpreter takes seconds per call.

TRITON_CASES = {
    "soft-gru-lru": (dict(), dict()),
    "argmax-fnn-nop-content-keys": (
        dict(mode="argmax", nop=True, write_keys="content"),
        dict(controller="fnn"),
    ),
    "soft-fnn-no-lru-2w-no-trace": (
        dict(lru=False, nop=True, trace=False),
        dict(controller="fnn", reads=1, writes=2),
    ),
    "sample-gru": (dict(mode="sample"), dict(reads=1)),
    "gumbel-gru-2w": (dict(mode="gumbel", inverse_temperature=2.5, nop=True), dict(reads=1, writes=2)),
}


def run_triton(records, options, device, dtype):
    """``run`` on the Triton backend, its values and gradients back on the CPU in float64 (the
    gradients by the names of ``records``)."""
    result, grads = run(on_device(records, device, dtype), options, "triton")

    def back(value):
        if isinstance(value, tuple):
            return type(value)(*map(back, value)) if hasattr(value, "_fields") else tuple(map(back, value))
        return None if value is None else value.double().cpu()

    return DNTMResult(*map(back, result)), {name: back(g) for name, g in grads.items()}


@pytest.mark.parametrize("case", list(TRITON_CASES))
def test_triton_matches_reference(case):
    device, dtype, tol = triton_setup()
    option_kw, problem_kw = TRITON_CASES[case]
    options = DNTMOptions(**option_kw)
    records = problem(options, t=2, batch=2, **problem_kw)
    assert_same(run_triton(records, options, device, dtype), run(records, options, "reference"), atol=tol)


@pytest.mark.parametrize("rows", TRITON_ROWS)
def test_triton_at_any_rows_per_program(rows, monkeypatch):
    """Forced rows per program, on a batch that leaves a tail tile (or one row a program); noisy
    reads, whose draws are indexed by time and batch."""
    from mannlab.ops.dntm import triton_sequence

    taken = force_triton_rows(monkeypatch, triton_sequence, rows)
    device, dtype, tol = triton_setup()
    options = DNTMOptions(mode="gumbel", inverse_temperature=2.5)
    records = problem(options, reads=1, t=2, batch=TRITON_ROWS_BATCH)
    assert_same(run_triton(records, options, device, dtype), run(records, options, "reference"), atol=tol)
    assert taken == [rows, rows]  # the forward's launch and the backward's


def test_triton_chunked_run_equals_one_run():
    """Two segments, the second from the first's state and with its own rows of the draws."""
    device, dtype, tol = triton_setup()
    options = DNTMOptions(mode="gumbel", nop=True)
    records = on_device(problem(options, reads=1, t=2, batch=2), device, dtype)
    inputs = records[0]
    whole = run(records, options, "triton")

    def part(cut):
        return DNTMInputs(inputs.projected[:, cut], inputs.draws[cut])

    first = dntm_sequence(part(slice(0, 1)), *records[1:], options, backend="triton")
    rest = dntm_sequence(part(slice(1, 2)), first.state, records[2], options, backend="triton")
    joined = joined_result(first, rest)
    grads = grads_by_name(loss_of(joined), differentiable(*records))
    assert_same((joined, grads), whole, atol=tol)
    # and without a backward or trace to come (the forward keeps two state rows in turn)
    with torch.no_grad():
        quick = dntm_sequence(*records, options._replace(keep=False, trace=False), backend="triton")
    assert quick.trace is None
    want = {k: v for k, v in by_name(whole[0]).items() if not k.startswith("trace.")}
    for name, value in by_name(quick).items():
        torch.testing.assert_close(value, want[name], atol=tol, rtol=0, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize(
    "controller, addressing, training",
    [("gru", "soft", True), ("fnn", "reinforce", False), ("gru", "gumbel", True)],
)
def test_model_on_triton_equals_step_loop(controller, addressing, training):
    """The model on the Triton kernels against its own step loop (reinforce in evaluation:
    argmax; gumbel in training: straight-through samples from the same draws), values, trace,
    final state and every parameter's gradient."""
    device, dtype, tol = triton_setup()
    model = small_model("dntm", 3, 2, controller=controller, addressing=addressing, nop=True)
    model = model.to(device, dtype).train(training)
    x = torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(
        device, dtype
    )
    assert_triton_equals_step_loop(model, x, tol)


@pytest.mark.parametrize("kw", [dict(addressing_steps=2), dict(writes="sequential")])
def test_triton_refuses_what_it_does_not_cover(kw):
    pytest.importorskip("triton")
    options = DNTMOptions(**kw)
    with pytest.raises(ValueError, match="Triton kernels implement"):
        dntm_sequence(*problem(options), options, backend="triton")


def test_op_covers_triton_with_one_addressing_step_and_learned_writes():
    from mannlab.models.dntm import DNTMCell

    def covered(cell, backend="triton", with_trace=False):
        options = cell.op_options(with_trace, True)
        return options is not None and cell.op.covers(options, cell.op_weights(), backend)

    cell = DNTMCell(3, controller_size=4, memory_slots=4, addressing="reinforce")
    assert cell.op.BACKENDS[:2] == ("numba", "triton")
    assert covered(cell, with_trace=True)  # samples in training
    cell.eval()
    assert covered(cell, with_trace=True)  # argmax in evaluation
    assert DNTMCell(3, location_shifts=1).op_options(False, True) is None  # no word for it
    assert not covered(DNTMCell(3, addressing_steps=2))
    assert not covered(DNTMCell(3, writes="sequential"))
    assert covered(DNTMCell(3, addressing_steps=2), "numba")
