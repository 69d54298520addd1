"""TARDIS: usage normalisation, last-read penalty, sequential-then-tied writes, the
gumbel and REINFORCE estimators, the temperature, layer norm and recurrent dropout, gradcheck,
the compiled path against the tensor path, the training loop and a learning check (what every
model promises, cell == sequence, chunked == whole and bad input included, is in
test_model_contract.py)."""

import pytest
import torch

import mannlab
from conftest import SMALL as SMALL_CONFIGS
from conftest import float64_seq, small_model
from mannlab import ConfigError, detach_state
from mannlab.models import TARDISState, TARDISTrace, build_model
from mannlab.models.base import sequence_backend
from mannlab.models.tardis import LAST_READ_PENALTY, TardisAddressing, normalise_usage, sparse_addresses
from mannlab.nn import sampling
from mannlab.ops import tardis as tardis_op
from mannlab.ops import use_kernels
from mannlab.tasks.base import step_nll
from mannlab.training import schedules
from tiny_copy import tiny_copy_losses

SMALL = SMALL_CONFIGS["tardis"]


def small_tardis(**kw):
    return small_model("tardis", 4, 3, **kw)


def seq(b=3, t=7, i=4):
    return float64_seq(b, t, i)


def slots(weights):
    """(B, T, 1, k) one-hots -> (B, T) slot indices."""
    return weights[:, :, 0].argmax(-1)


# ------------------------------------------------------------------ primitives


def test_usage_normalisation_by_hand():
    counts = torch.tensor([[1.0, 0.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    u = normalise_usage(counts, eps=0.0 + 1e-12)
    # mean 1, centred [0, -1, 2, -1], variance 6 / 4
    assert torch.allclose(u[0], torch.tensor([0.0, -1.0, 2.0, -1.0]) / 1.5**0.5)
    assert torch.equal(u[1], torch.zeros(4))  # equal use (or none yet): 0
    assert torch.allclose(u.mean(-1), torch.zeros(2), atol=1e-7)


def test_sparse_addresses_fixed_and_sparse():
    a = sparse_addresses(6, 8, 3, seed=4)
    assert torch.equal(a, sparse_addresses(6, 8, 3, seed=4))
    assert ((a != 0).sum(-1) == 3).all()
    assert torch.allclose(a.norm(dim=-1), torch.ones(6))
    model = small_tardis()
    assert "address" in dict(model.named_buffers()) or "cell.address" in dict(model.named_buffers())
    assert all("address" != n.split(".")[-1] for n, _ in model.named_parameters())


def test_last_read_penalty_subtracts_100_from_that_logit():
    torch.manual_seed(0)
    head = TardisAddressing(input_size=2, hidden_size=3, memory_width=4, slots=5, mlp_size=6)
    args = (torch.randn(2, 6), torch.randn(2, 3), torch.randn(2, 5, 4), torch.rand(2, 5))
    last = torch.zeros(2, 5)
    last[0, 1], last[1, 4] = 1.0, 1.0
    diff = head.logits(*args, torch.zeros(2, 5)) - head.logits(*args, last)
    assert torch.allclose(diff, LAST_READ_PENALTY * last)


def test_read_logits_by_hand():
    """π[i] = a^T tanh(W_h h + W_x x + b + W_m M[i] + W_u u) (eq. 4)."""
    torch.manual_seed(1)
    head = TardisAddressing(2, 3, 4, 5, 6).double()
    x, h = torch.randn(1, 2, dtype=torch.float64), torch.randn(1, 3, dtype=torch.float64)
    memory, counts = torch.randn(1, 5, 4, dtype=torch.float64), torch.rand(1, 5, dtype=torch.float64)
    u = normalise_usage(counts)
    expected = torch.stack(
        [
            head.score.weight[0]
            @ torch.tanh(
                head.hidden_part.weight @ h[0]
                + head.input_part.weight @ x[0]
                + head.input_part.bias
                + head.memory_part.weight @ memory[0, i]
                + head.usage_part.weight @ u[0]
            )
            for i in range(5)
        ]
    )
    got = head.logits(head.precompute(x), h, memory, counts, torch.zeros(1, 5, dtype=torch.float64))
    assert torch.allclose(got[0], expected)


def test_discounted_returns_by_hand():
    r = torch.tensor([[1.0, 2.0, 3.0]])
    assert torch.allclose(sampling.discounted_returns(r, 0.5), torch.tensor([[2.75, 3.5, 3.0]]))
    assert torch.allclose(sampling.discounted_returns(r, 1.0), torch.tensor([[6.0, 5.0, 3.0]]))
    assert torch.allclose(sampling.discounted_returns(r, 0.0), r)


def test_gumbel_softmax_forward_one_hot_gradient_of_the_soft_sample():
    torch.manual_seed(0)
    logits = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    noise = sampling.gumbel_noise(logits)
    c = torch.randn(4, 6, dtype=torch.float64)
    hard = sampling.gumbel_softmax(logits, 2.5, hard=True, noise=noise)
    soft = sampling.gumbel_softmax(logits, 2.5, hard=False, noise=noise)
    assert torch.equal(hard.detach().sum(-1), torch.ones(4, dtype=torch.float64))
    assert set(hard.detach().unique().tolist()) == {0.0, 1.0}
    assert torch.equal(hard.detach().argmax(-1), soft.detach().argmax(-1))
    (g_hard,) = torch.autograd.grad((hard * c).sum(), logits)
    (g_soft,) = torch.autograd.grad((soft * c).sum(), logits)
    assert torch.allclose(g_hard, g_soft)
    assert torch.allclose(soft, torch.softmax((logits + noise) * 2.5, -1))


def test_gumbel_sigmoid_noise_free_at_evaluation():
    z = torch.tensor([-1.0, 0.0, 2.0])
    assert torch.allclose(sampling.gumbel_sigmoid(z, 0.3, noise=False), torch.sigmoid(z / 0.3))
    torch.manual_seed(0)
    noisy = sampling.gumbel_sigmoid(z.expand(2000, 3), 0.3)
    assert ((noisy >= 0) & (noisy <= 1)).all()
    assert ((noisy < 0.05) | (noisy > 0.95)).float().mean() > 0.6  # close to binary


# ------------------------------------------------------------- model behaviour


def test_shapes_and_trace():
    model = small_tardis()
    y, state, trace = model(seq(), return_trace=True)
    assert y.shape == (3, 7, 3) and isinstance(state, TARDISState) and isinstance(trace, TARDISTrace)
    assert trace.read_weights.shape == (3, 7, 1, 4) == trace.write_weights.shape
    assert state.content.shape == (3, 4, 5) and trace.read_vectors.shape == (3, 7, 3 + 5)
    assert torch.equal(trace.read_weights.sum(-1), torch.ones(3, 7, 1, dtype=torch.float64))
    assert (trace.inverse_temperature >= 1).all()  # eq. 18: softplus + 1
    assert ((trace.resets > 0) & (trace.resets < 1)).all()
    assert torch.equal(state.steps, torch.full((3,), 7))


@pytest.mark.parametrize("mode", ["gumbel", "reinforce", "argmax"])
def test_sequential_then_tied_writes(mode):
    """Slot t is written at step t < k, then the slot just read; M[j] = W_m h_t (eq. 2)."""
    model = small_tardis(addressing=mode)
    y, state, trace = model(seq(t=9), return_trace=True)
    k = 4
    written, read = slots(trace.write_weights), slots(trace.read_weights)
    assert torch.equal(written[:, :k], torch.arange(k).expand(3, k))
    assert torch.equal(written[:, k:], read[:, k:])
    micro = model.cell.micro_state(trace.hidden)  # (B, T, c)
    for b in range(3):
        for j in range(k):
            last = max(t for t in range(9) if written[b, t] == j)
            assert torch.allclose(state.content[b, j], micro[b, last])


@pytest.mark.parametrize("mode", ["gumbel", "reinforce", "argmax"])
def test_never_reads_the_slot_read_at_the_previous_step(mode):
    model = small_tardis(addressing=mode, memory_slots=3)
    _, _, trace = model(seq(b=8, t=12), return_trace=True)
    read = slots(trace.read_weights)
    assert (read[:, 1:] != read[:, :-1]).all()


def test_usage_in_trace_is_normalised_count_of_earlier_reads():
    model = small_tardis()
    _, _, trace = model(seq(t=6), return_trace=True)
    counts = trace.read_weights[:, :, 0].cumsum(1) - trace.read_weights[:, :, 0]  # reads before t
    assert torch.allclose(trace.usage, normalise_usage(counts))


def test_read_vector_is_the_row_of_memory_read():
    model = small_tardis(addressing="argmax")
    x = seq(t=6)
    _, _, trace = model(x, return_trace=True)
    # rebuild M_{t-1} from the writes and check r_t = M_{t-1}[read slot]
    content = model.cell.initial_content.expand(3, -1, -1).clone()
    micro = model.cell.micro_state(trace.hidden)
    for t in range(6):
        memory = model.cell.memory(content)
        j = slots(trace.read_weights)[:, t]
        assert torch.allclose(trace.read_vectors[:, t], memory[torch.arange(3), j])
        w = slots(trace.write_weights)[:, t]
        content[torch.arange(3), w] = micro[:, t]


def test_gumbel_mode_gradient_reaches_the_read_mlp_and_temperature():
    model = small_tardis(addressing="gumbel")
    model(seq())[0].sum().backward()
    head = model.cell.read_head
    assert head.score.weight.grad.abs().sum() > 0 and head.usage_part.weight.grad is not None
    assert model.cell.temperature_layer.weight.grad.abs().sum() > 0


def test_evaluation_takes_the_argmax_and_is_deterministic():
    model = small_tardis(addressing="gumbel").eval()
    x = seq()
    y1, _, t1 = model(x, return_trace=True)
    y2, _ = model(x)
    assert torch.equal(y1, y2)
    probs = t1.read_probs[:, :, 0]
    assert torch.equal(slots(t1.read_weights), probs.argmax(-1))
    argmax_model = small_tardis(addressing="argmax").eval()
    assert torch.allclose(argmax_model(x)[0], y1)


def test_scheduled_temperature_follows_the_training_step():
    model = small_tardis(temperature="scheduled", temperature_every=10)
    assert model.temperature_schedule == (10, 3)  # up to k - 1
    for step, expected in [(0, 1.0), (9, 1.0), (10, 2.0), (25, 3.0), (1000, 3.0)]:
        schedules.start_minibatch(model, step)
        assert model.inverse_temperature == expected
    _, _, trace = model(seq(), return_trace=True)
    assert torch.equal(trace.inverse_temperature, torch.full((3, 7), 3.0, dtype=torch.float64))
    assert small_tardis().temperature_schedule is None  # learned τ


def test_inverse_temperature_schedule_checks():
    assert schedules.inverse_temperature(399, 200, 49) == 2.0
    with pytest.raises(ValueError, match="every"):
        schedules.inverse_temperature(0, 0, 3)


# ----------------------------------------------------------------- REINFORCE


def reinforce_terms(model, x, targets, mask):
    y, _, trace = model(x, return_trace=True)
    nll = step_nll(y, targets, mask).detach()
    return y, trace, model.aux_terms(trace, nll, score=lambda out: step_nll(out, targets, mask))


def test_reinforce_read_mlp_learns_only_through_aux_loss():
    model = small_tardis(addressing="reinforce")
    x = seq()
    targets = (torch.rand(3, 7, 3, generator=torch.Generator().manual_seed(2)) > 0.5).double()
    mask = torch.ones(3, 7, dtype=torch.float64)
    y, trace, terms = reinforce_terms(model, x, targets, mask)
    assert set(terms) == {"auxiliary", "reinforce"} and bool(trace.sampled.all())
    head = model.cell.read_head.score.weight
    (g_task,) = torch.autograd.grad(
        step_nll(y, targets, mask).sum(), head, retain_graph=True, allow_unused=True
    )
    assert g_task is None or g_task.abs().sum() == 0
    (g_rl,) = torch.autograd.grad(terms["reinforce"], head, retain_graph=True)
    assert g_rl.abs().sum() > 0
    # the auxiliary predictor is trained by its own loss only, and not through r
    aux_grads = torch.autograd.grad(
        terms["auxiliary"], [model.aux_read.weight, model.cell.micro_state.weight], allow_unused=True
    )
    assert aux_grads[0].abs().sum() > 0 and aux_grads[1] is None


def test_leave_one_out_mean_by_hand():
    values = torch.tensor([[1.0, 2.0, 5.0], [3.0, 4.0, 7.0], [8.0, 6.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1], [1, 1, 0]])
    # step 0: all three scored; step 1: sequences 0 and 2; step 2: sequences 0 and 1
    expected = torch.tensor([[5.5, 6.0, 7.0], [4.5, 4.0, 5.0], [2.0, 2.0, 6.0]])
    assert torch.equal(sampling.leave_one_out_mean(values, mask), expected)
    assert torch.equal(sampling.leave_one_out_mean(values[:1], mask[:1]), torch.zeros(1, 3))


def test_reinforce_term_by_hand():
    model = small_tardis(addressing="reinforce", discount=0.5)
    x = seq()
    targets = (torch.rand(3, 7, 3, generator=torch.Generator().manual_seed(2)) > 0.5).double()
    mask = torch.ones(3, 7, dtype=torch.float64)
    mask[:, :3] = 0
    torch.manual_seed(3)
    y, trace, terms = reinforce_terms(model, x, targets, mask)
    aux_nll = step_nll(model.aux_logits(trace), targets, mask)
    reward = -aux_nll.detach()  # eq. 17
    returns = torch.zeros_like(reward)
    running = torch.zeros(3, dtype=torch.float64)
    for t in reversed(range(7)):  # eq. 16
        baseline = (reward[:, t].sum() - reward[:, t]) / 2 * mask[:, t]  # the other two's mean
        running = (reward[:, t] - baseline) + 0.5 * running
        returns[:, t] = running
    advantage = (returns - returns.mean()) / torch.sqrt(returns.var(unbiased=False) + 1e-4)
    log_p = torch.log((trace.read_weights * trace.read_probs).sum(-1))[..., 0]
    S = 4 * 3  # scored steps x outputs
    expected = -(advantage * log_p).sum(1).mean() / S
    assert torch.allclose(terms["reinforce"], expected)
    assert torch.allclose(terms["auxiliary"], aux_nll.sum(1).mean() / S)


def test_aux_loss_zero_for_gumbel_and_checks_its_arguments():
    model = small_tardis()
    y, _, trace = model(seq(), return_trace=True)
    assert not model.uses_aux_loss
    assert model.aux_loss(trace, torch.zeros(3, 7, dtype=torch.float64)) == 0
    rl = small_tardis(addressing="reinforce")
    _, _, trace = rl(seq(), return_trace=True)
    with pytest.raises(ValueError, match="score"):
        rl.aux_loss(trace, torch.ones(3, 7, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        rl.aux_loss(trace, torch.ones(3, 6, dtype=torch.float64))
    with pytest.raises(TypeError, match="TARDISTrace"):
        rl.aux_loss((1, 2), torch.ones(3, 7))


def test_training_loop_passes_the_score_and_drives_the_schedule(tmp_path, monkeypatch):
    from mannlab.config import RunConfig, TrainConfig
    from mannlab.training import loop, train

    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    seen = []
    original = mannlab.TARDIS.aux_terms

    def spy(self, trace, nll, score=None, outputs_per_step=None, reducer=None):
        seen.append((score is not None, self.inverse_temperature, outputs_per_step))
        return original(self, trace, nll, score, outputs_per_step, reducer)

    monkeypatch.setattr(mannlab.TARDIS, "aux_terms", spy)
    config = RunConfig(
        model="tardis",
        task="copy",
        seed=0,
        run_dir=str(tmp_path / "run"),
        model_args={**SMALL, "addressing": "reinforce", "temperature": "scheduled", "temperature_every": 2},
        task_args={"width": 3, "max_length": 3},
        train=TrainConfig(
            steps=5,
            batch_size=4,
            val_every=5,
            val_batch_size=4,
            val_batches=1,
            val_length_multiples=(1,),
            checkpoint_every=5,
            progress=False,
            optimizer="adam",
        ),
    )
    summary = train(config)
    assert summary["steps"] == 5
    assert [s for s, _, _ in seen] == [True] * 5
    assert [t for _, t, _ in seen] == [1.0, 1.0, 2.0, 2.0, 3.0]
    assert [n for _, _, n in seen] == [3] * 5  # copy's BCE averages over the 3 bits


# ------------------------------------------------------------ equivalences


def test_gradcheck_float64():
    """The differentiable parts: the whole model with argmax reads and noise-free gates
    (eval), the read MLP, and the gumbel-softmax relaxation with fixed noise."""
    model = small_tardis().eval()
    x = seq(b=2, t=6).requires_grad_()
    assert torch.autograd.gradcheck(lambda inp: model(inp)[0], (x,))
    head = model.cell.read_head
    memory = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)
    counts = torch.tensor([[1.0, 0, 2, 0], [0, 0, 0, 0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda m, hh: head.logits(head.precompute(x[:, 0]), hh, m, counts, torch.zeros_like(counts)),
        (memory, h),
    )
    logits = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    noise = sampling.gumbel_noise(logits)
    temp = torch.rand(3, 1, dtype=torch.float64).add(1).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda lg, tt: sampling.gumbel_softmax(lg, tt, hard=False, noise=noise), (logits, temp)
    )


def test_layer_norm_controller_step_by_hand():
    """Section 8.1's layer norm: LN over the eq. 7 pre-activations (f, i, o jointly), over
    eq. 9's, and over c_t inside eq. 10; forget-gate bias 1 after the norm."""
    cell = small_tardis(layer_norm=True).cell.eval()
    d = cell.hidden_size
    assert torch.all(cell.ln_gates.bias[:d] == 1) and torch.all(cell.ln_gates.bias[d:] == 0)
    torch.manual_seed(3)
    for p in cell.parameters():  # non-trivial LN gains and biases
        p.data.uniform_(-0.5, 0.5)
    x_gates = torch.randn(2, 4 * d + 2, dtype=torch.float64)
    h, c = torch.randn(2, d, dtype=torch.float64), torch.randn(2, d, dtype=torch.float64)
    r = torch.randn(2, cell.width, dtype=torch.float64)
    h_new, c_new, resets = cell.controller(x_gates, h, c, r)

    def ln(v, layer):
        z = (v - v.mean(-1, keepdim=True)) / torch.sqrt(v.var(-1, unbiased=False, keepdim=True) + layer.eps)
        return z * layer.weight + layer.bias

    hp, rp = h @ cell.hidden_gates.weight.t(), r @ cell.read_gates.weight.t()
    alpha, beta = resets[:, :1], resets[:, 1:]
    f, i, o = torch.sigmoid(ln(x_gates[:, : 3 * d] + hp[:, : 3 * d] + rp[:, : 3 * d], cell.ln_gates)).chunk(
        3, -1
    )
    cand = torch.tanh(
        ln(
            beta * hp[:, 3 * d : 4 * d] + x_gates[:, 3 * d : 4 * d] + alpha * rp[:, 3 * d : 4 * d],
            cell.ln_candidate,
        )
    )
    c_hand = f * c + i * cand
    assert torch.allclose(c_new, c_hand, atol=1e-12)
    assert torch.allclose(h_new, o * torch.tanh(ln(c_hand, cell.ln_cell)), atol=1e-12)


def test_recurrent_dropout_drops_candidate_units_in_training_only():
    torch.manual_seed(0)
    plain = small_tardis(layer_norm=True)
    dropped = small_tardis(layer_norm=True, recurrent_dropout=0.5)
    dropped.load_state_dict(plain.state_dict())
    x = seq()
    assert torch.equal(plain.eval()(x)[0], dropped.eval()(x)[0])  # off at evaluation
    cell = dropped.cell.train()
    d = cell.hidden_size
    x_gates = torch.randn(64, 4 * d + 2, dtype=torch.float64)
    h = torch.randn(64, d, dtype=torch.float64)
    zero_c = torch.zeros(64, d, dtype=torch.float64)
    r = torch.randn(64, cell.width, dtype=torch.float64)
    _, c_new, _ = cell.controller(x_gates, h, zero_c, r)  # c = i * d(c̃)
    dropped_fraction = (c_new == 0).double().mean().item()
    assert 0.35 < dropped_fraction < 0.65


def test_layer_norm_cell_loop_chunked_and_gradcheck():
    model = small_tardis(layer_norm=True).eval()
    x = seq(b=2, t=6)
    y, final = model(x)
    y1, s = model(x[:, :2])
    y2, s = model(x[:, 2:], detach_state(s))
    assert torch.allclose(torch.cat([y1, y2], 1), y, atol=1e-12)
    state, feats = None, []
    for t in range(x.shape[1]):
        f, state = model.cell(x[:, t], state)
        feats.append(f)
    assert torch.allclose(model.head(torch.stack(feats, 1)), y, atol=1e-12)
    assert torch.autograd.gradcheck(lambda inp: model(inp)[0], (x.clone().requires_grad_(),))


# ----------------------------------------------------------- invalid options


def test_reinforce_needs_an_output_size():
    with pytest.raises(ConfigError, match="output_size"):
        mannlab.TARDIS(4, None, addressing="reinforce")


# --------------------------------------------------------------------- learning


def test_learns_tiny_copy_gumbel():
    before, after = tiny_copy_losses(
        lambda task: build_model(
            "tardis",
            task.input_size,
            task.output_size,
            hidden_size=24,
            memory_slots=4,
            address_size=2,
            content_size=8,
        ),
        steps=150,
    )
    assert after < 0.75 * before, f"validation BCE {before:.3f} -> {after:.3f}"


# ------------------------------------------------------------ compiled path


@pytest.fixture
def kernels_enabled():
    """The compiled path's tests run it even under MANNLAB_KERNELS=0 (numba is required)."""
    with use_kernels(True):
        yield


def randomise(model, scale=0.3):
    """Non-trivial values for every parameter (layer-norm gains and biases, C_0, h_0, c_0)."""
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model


def both_paths(model, x, loss_of, seed=2, trace=False, state=None):
    """Outputs, final state, trace and parameter gradients of the tensor path, then the
    compiled path, from the same seed (so the same Gumbel noise, gate noise and masks)."""
    results = []
    for use in (False, True):
        model.zero_grad()
        torch.manual_seed(seed)
        with use_kernels(use):
            out = model(x, state, return_trace=trace)
        loss_of(out).backward()
        results.append((out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    return results


def assert_same(results, atol=1e-10):
    (out0, g0), (out1, g1) = results
    for a, b in zip(out0, out1):  # y, state (and trace): tensors or NamedTuples
        pairs = zip(a, b) if isinstance(a, tuple) else [(a, b)]
        for u, v in pairs:
            assert u.dtype == v.dtype and u.shape == v.shape
            assert torch.allclose(u.double(), v.double(), atol=atol, rtol=0)
    assert g0.keys() == g1.keys()  # the same parameters reached (None stays None)
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=atol, rtol=0), name


def state_loss(out):
    y, state = out[0], out[1]
    return y.sin().sum() + state.hidden.sum() + state.cell.pow(2).sum() + state.content.pow(2).sum()


@pytest.mark.usefixtures("kernels_enabled")
@pytest.mark.parametrize(
    "mode, train",
    [("gumbel", True), ("gumbel", False), ("argmax", True), ("reinforce", True), ("scheduled", True)],
)
@pytest.mark.parametrize("layer_norm, dropout", [(False, 0.0), (True, 0.0), (True, 0.3), (False, 0.4)])
def test_compiled_sequence_equals_tensor_path(mode, train, layer_norm, dropout):
    """The compiled whole-sequence kernels give the per-step path's outputs, final state and
    every parameter gradient (the same draws for the same seed), past the filling phase."""
    kw = dict(addressing="gumbel", temperature="scheduled") if mode == "scheduled" else dict(addressing=mode)
    model = randomise(small_tardis(layer_norm=layer_norm, recurrent_dropout=dropout, **kw))
    model.train(train)
    model.inverse_temperature = 2.5
    x = seq(t=11)
    assert sequence_backend(model.cell, x) == "numba"
    assert_same(both_paths(model, x, state_loss))


@pytest.mark.usefixtures("kernels_enabled")
@pytest.mark.parametrize("mode", ["gumbel", "reinforce", "argmax"])
@pytest.mark.parametrize("layer_norm, dropout", [(False, 0.0), (True, 0.3)])
def test_compiled_trace_and_aux_loss_equal_tensor_path(mode, layer_norm, dropout):
    """With the trace (what REINFORCE's aux_loss reads): every trace field, the aux terms and
    every gradient of task loss + aux_loss + a loss on every trace field are the tensor path's."""
    model = randomise(
        small_tardis(addressing=mode, layer_norm=layer_norm, recurrent_dropout=dropout, discount=0.8)
    )
    x = seq(t=10)
    targets = (torch.rand(3, 10, 3, generator=torch.Generator().manual_seed(2)) > 0.5).double()
    mask = torch.ones(3, 10, dtype=torch.float64)
    mask[:, :2] = 0
    slot_weights = torch.arange(1.0, 5.0, dtype=torch.float64)
    terms = []

    def loss(out):
        y, state, trace = out
        nll = step_nll(y, targets, mask)
        aux = model.aux_terms(trace, nll.detach(), score=lambda o: step_nll(o, targets, mask))
        terms.append(aux)
        return (
            nll.sum()
            + sum(aux.values(), y.new_zeros(()))
            + state_loss(out)
            + trace.read_probs.cos().sum()
            + (trace.read_weights * slot_weights).pow(2).sum()
            + (trace.write_weights * slot_weights).sum()
            + trace.read_vectors.sin().sum()
            + trace.hidden.pow(3).sum()
            + trace.resets.pow(2).sum()
            + trace.inverse_temperature.sin().sum()
        )

    results = both_paths(model, x, loss, trace=True)
    assert_same(results)
    assert (
        terms[0].keys() == terms[1].keys() == ({"auxiliary", "reinforce"} if mode == "reinforce" else set())
    )
    for key in terms[0]:
        assert torch.allclose(terms[0][key], terms[1][key], atol=1e-12)


@pytest.mark.usefixtures("kernels_enabled")
@pytest.mark.parametrize("mode", ["gumbel", "reinforce"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("layer_norm, dropout", [(False, 0.0), (True, 0.3)])
def test_compiled_inference_without_intermediates_equals_tensor_path(mode, train, layer_norm, dropout):
    """Under no_grad the kernels keep one step's scratch only: same outputs and final state."""
    model = randomise(small_tardis(addressing=mode, layer_norm=layer_norm, recurrent_dropout=dropout)).train(
        train
    )
    x = seq(t=11)
    results = []
    for use in (False, True):
        torch.manual_seed(2)
        with torch.no_grad(), use_kernels(use):
            results.append(model(x))
    (y0, s0), (y1, s1) = results
    assert torch.allclose(y0, y1, atol=1e-12)
    for a, b in zip(s0, s1):
        assert torch.allclose(a.double(), b.double(), atol=1e-12)


@pytest.mark.usefixtures("kernels_enabled")
def test_compiled_path_runs_float32():
    model = small_tardis(layer_norm=True).float()
    x = seq().float()
    results = []
    for use in (False, True):
        model.zero_grad()
        torch.manual_seed(3)
        with use_kernels(use):
            y, state = model(x)
        (y.sum() + state.content.sum()).backward()
        results.append((y, model.cell.hidden_gates.weight.grad.clone()))
    assert results[1][0].dtype == torch.float32
    assert torch.allclose(results[0][0], results[1][0], atol=1e-5)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-4)


@pytest.mark.usefixtures("kernels_enabled")
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(
    "kw", [dict(), dict(addressing="reinforce"), dict(layer_norm=True, recurrent_dropout=0.3)]
)
def test_chunked_run_equals_one_run_on_both_paths(compiled, kw):
    """Chunks with the carried (detached) state give one run's outputs and final state, across
    the k-th step (the step counter keeps the write order) and with the draws of one run."""
    model = randomise(small_tardis(**kw))
    x = seq(t=10)
    with use_kernels(compiled):
        assert bool(sequence_backend(model.cell, x)) == compiled
        torch.manual_seed(5)
        y, final = model(x)
        torch.manual_seed(5)
        y1, s = model(x[:, :3])
        y2, s = model(x[:, 3:6], detach_state(s))
        y3, s = model(x[:, 6:], detach_state(s))
    assert torch.allclose(torch.cat([y1, y2, y3], 1), y, atol=1e-12)
    for a, b in zip(s, final):
        assert torch.allclose(a.double(), b.double(), atol=1e-12)


@pytest.mark.usefixtures("kernels_enabled")
@pytest.mark.parametrize("compiled", [True, False])
def test_gradcheck_float64_both_paths(compiled):
    """gradcheck through the compiled path (and the tensor path) wherever the forward is
    differentiable: argmax reads with the gate noise and dropout masks fixed by the seed (inputs
    and the initial state), evaluation with layer norm, and the read probabilities of REINFORCE
    training (samples fixed by the seed) that aux_loss differentiates. Gumbel straight-through
    gradients are not the derivative of the one-hot forward: test_compiled_sequence_equals_...
    checks them against the tensor path instead."""
    x = seq(b=2, t=6).requires_grad_()
    noisy = randomise(small_tardis(addressing="argmax", layer_norm=True, recurrent_dropout=0.3))

    def run(inp, h0, c0):
        torch.manual_seed(3)
        state = noisy.initial_state(2)
        with use_kernels(compiled):
            y, state = noisy(inp, state._replace(hidden=h0, cell=c0))
        return y, state.content, state.cell

    h0 = torch.rand(2, 8, dtype=torch.float64, requires_grad=True)
    c0 = torch.rand(2, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(run, (x, h0, c0))
    plain = randomise(small_tardis(layer_norm=True)).eval()

    def run_plain(inp):
        with use_kernels(compiled):
            return plain(inp)[0]

    assert torch.autograd.gradcheck(run_plain, (x,))
    rl = randomise(small_tardis(addressing="reinforce"))

    def run_rl(inp):
        torch.manual_seed(4)
        with use_kernels(compiled):
            y, state, trace = rl(inp, return_trace=True)
        return y, trace.read_probs, trace.inverse_temperature

    assert torch.autograd.gradcheck(run_rl, (x,))


@pytest.mark.usefixtures("kernels_enabled")
def test_compiled_path_only_where_it_applies(monkeypatch):
    """The kernels run for CPU float32/float64 passes with the kernels switched on, where
    they pay; else the tensor path."""
    model = small_tardis()
    x = seq()
    assert sequence_backend(model.cell, x) == "numba"
    assert sequence_backend(model.cell, x.float()) == "numba"
    assert not sequence_backend(model.cell, x.to(torch.bfloat16))
    calls = []
    original = model.cell.run_op
    monkeypatch.setattr(model.cell, "run_op", lambda *a: calls.append(1) or original(*a))
    model(x)
    model(x, return_trace=True)
    assert len(calls) == 2
    with use_kernels(False):
        assert not sequence_backend(model.cell, x)
        model(x)
        model(x, return_trace=True)
    assert len(calls) == 2
    bf16 = small_tardis().to(torch.bfloat16)
    monkeypatch.setattr(bf16.cell, "run_op", lambda *a: calls.append(1))
    bf16(x.to(torch.bfloat16))
    assert len(calls) == 2


@pytest.mark.usefixtures("kernels_enabled")
def test_tensor_path_where_the_kernels_do_not_pay(monkeypatch):
    """The op's ``pays`` (always True as measured so far) is consulted: where it says no, the
    tensor path runs, with the same draws."""
    model = randomise(small_tardis())
    x = seq()
    torch.manual_seed(1)
    y_kernels, _ = model(x)
    monkeypatch.setattr(tardis_op, "pays", lambda options, weights, batch: False)
    monkeypatch.setattr(model.cell, "run_op", lambda *a: pytest.fail("compiled path ran"))
    torch.manual_seed(1)
    y_tensor, _ = model(x)
    assert torch.allclose(y_kernels, y_tensor, atol=1e-12)
