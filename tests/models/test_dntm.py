"""D-NTM: primitives by hand, LRU / multi-step / NOP, the address part, gradients, discrete
modes, REINFORCE terms, curriculum, regularisers, the model on its kernels against its step
loop (the kernels against the op's reference loop: tests/ops/test_dntm_ops.py) and a learning
check (what every model promises, cell == sequence, chunked == whole and bad input included,
is in test_model_contract.py)."""

import pytest
import torch
from torch.func import functional_call

import mannlab
from conftest import SMALL as SMALL_CONFIGS
from conftest import float64_seq, leaves, small_model
from mannlab.errors import ConfigError
from mannlab.models import DNTMState, DNTMTrace, build_model
from mannlab.models import dntm as dntm_module
from mannlab.models.base import sequence_backend
from mannlab.models.dntm import DNTMWriteCounts, read_write_consistency
from mannlab.nn import sampling
from mannlab.ops import use_kernels
from mannlab.ops.dntm.reference import lru_address, similarity
from mannlab.training import schedules
from tiny_copy import tiny_copy_losses

SMALL = SMALL_CONFIGS["dntm"]


def small_dntm(**kw):
    return small_model("dntm", 4, 3, **kw)


def seq(b=3, t=5, i=4):
    return float64_seq(b, t, i)


# ------------------------------------------------------------------ primitives


def test_similarity_by_hand_and_zero_vectors():
    keys = torch.tensor([[[3.0, 4.0]]])
    memory = torch.tensor([[[3.0, 4.0], [4.0, -3.0], [0.0, 0.0], [-6.0, -8.0]]])
    s = similarity(keys, memory, eps=1e-6)
    expected = torch.tensor([25 / (25 + 1e-6), 0.0, 0.0, -50 / (50 + 1e-6)])
    assert torch.allclose(s, expected.view(1, 1, 4))
    k = torch.zeros(1, 1, 2, requires_grad=True)
    m = torch.zeros(1, 3, 2, requires_grad=True)
    similarity(k, m).sum().backward()  # empty memory: 0, finite gradient
    assert torch.isfinite(k.grad).all() and torch.isfinite(m.grad).all()


def test_lru_by_hand_and_no_gradient_through_v():
    z = torch.tensor([[[1.0, 0.0, 0.0]]], requires_grad=True)
    v_prev = torch.tensor([[[2.0, 0.0, 0.0]]])
    w, v = lru_address(z, torch.tensor([[0.5]]), v_prev)
    # z - γ v = [0, 0, 0]: the cell used before loses its advantage
    assert torch.allclose(w, torch.full((1, 1, 3), 1 / 3))
    assert torch.allclose(v, torch.tensor([[[0.1 * 2 + 0.9 * 1, 0.0, 0.0]]]))
    assert not v.requires_grad
    w2, _ = lru_address(z, torch.tensor([[0.0]]), v_prev)  # γ = 0: pure content addressing
    assert torch.allclose(w2, torch.softmax(z, -1))


def test_lru_prefers_the_least_recently_used_of_equal_cells():
    """Step 1 favours cell 0; at step 2 cells 0 and 1 match equally, and LRU picks cell 1."""
    v = torch.zeros(1, 1, 3)
    w1, v = lru_address(torch.tensor([[[2.0, 0.0, 0.0]]]), torch.ones(1, 1), v)
    assert torch.allclose(v, torch.tensor([[[1.8, 0.0, 0.0]]]))
    w2, v = lru_address(torch.tensor([[[1.0, 1.0, 0.0]]]), torch.ones(1, 1), v)
    assert torch.allclose(w2, torch.softmax(torch.tensor([[[-0.8, 1.0, 0.0]]]), -1))
    assert w1.argmax() == 0 and w2.argmax() == 1
    assert torch.allclose(v, torch.tensor([[[0.18 + 0.9, 0.9, 0.0]]]))


# ------------------------------------------------------------- model behaviour


@pytest.mark.parametrize("controller", ["gru", "fnn"])
@pytest.mark.parametrize("heads", [(1, 1), (2, 3)])
def test_shapes_and_trace(controller, heads):
    R, H = heads
    model = small_dntm(controller=controller, read_heads=R, write_heads=H, addressing_steps=2, nop=True)
    y, state, trace = model(seq(), return_trace=True)
    B, T, N, J = 3, 5, 6, 2
    assert y.shape == (B, T, 3) and isinstance(state, DNTMState) and isinstance(trace, DNTMTrace)
    assert state.content.shape == (B, N, 3) and state.read_vectors.shape == (B, R, 5)
    assert trace.read_weights.shape == (B, T, J * R, N)
    assert trace.write_weights.shape == (B, T, J * H, N)
    assert trace.memory.shape == (B, T, N, 5) and trace.inputs.shape == (B, T, 4)
    assert torch.allclose(trace.read_weights.sum(-1), torch.ones(B, T, J * R, dtype=torch.float64))
    assert (trace.key_strengths >= 1).all()
    assert ((trace.lru_gates > 0) & (trace.lru_gates < 1)).all()


def test_multi_step_equals_single_steps_on_repeated_inputs():
    """J addressing steps per time step = J plain steps on the input repeated J times."""
    model = small_dntm(addressing_steps=1, read_heads=2, nop=True)
    x = seq()
    y_rep, s_rep, tr_rep = model(x.repeat_interleave(2, dim=1), return_trace=True)
    model.cell.addressing_steps = 2
    y, s, tr = model(x, return_trace=True)
    assert torch.allclose(y, y_rep[:, 1::2], atol=1e-12)
    assert torch.allclose(s.write_lru, s_rep.write_lru, atol=1e-12)
    # the trace lists both addressing steps of a time step, step-major
    rep = tr_rep.read_probs.reshape(3, 5, 2 * 2, -1)
    assert torch.allclose(tr.read_probs, rep, atol=1e-12)


def test_multi_step_lru_average_by_hand():
    """Two addressing steps from v_0 = 0: v_1 = 0.9 z_1, v_2 = 0.1 v_1 + 0.9 z_2 and the
    second write weighting is softmax(z_2 - γ_2 v_1)."""
    model = small_dntm(addressing_steps=1)
    x = seq(t=1)
    _, s1, t1 = model(x, return_trace=True)
    model.cell.addressing_steps = 2
    _, s2, t2 = model(x, return_trace=True)
    assert torch.allclose(t2.write_probs[:, 0, 0], t1.write_probs[:, 0, 0], atol=1e-12)
    v1 = s1.write_lru  # 0.9 z_1
    z2 = (s2.write_lru - 0.1 * v1) / 0.9
    gamma2 = t2.lru_gates[:, 0, -1]  # [γ^r_1, γ^w_1, γ^r_2, γ^w_2]
    expected = torch.softmax(z2 - gamma2[:, None, None] * v1, -1)
    assert torch.allclose(t2.write_probs[:, 0, 1:2], expected, atol=1e-10)


def test_nop_cell_reads_nothing_and_is_never_written():
    model = small_dntm(nop=True)
    cell = model.cell
    memory = torch.arange(6 * 5, dtype=torch.float64).view(1, 6, 5)
    on_nop = torch.tensor([[[0, 0, 0, 0, 0, 1.0]]], dtype=torch.float64)
    assert torch.equal(cell.read(memory, on_nop), torch.zeros(1, 1, 5, dtype=torch.float64))
    half = torch.tensor([[[0.5, 0, 0, 0, 0, 0.5]]], dtype=torch.float64)
    assert torch.allclose(cell.read(memory, half), 0.5 * memory[:, :1])
    content = torch.ones(1, 6, 3, dtype=torch.float64)
    content[:, -1] = 0
    erase = torch.full((1, 1, 3), 0.5, dtype=torch.float64)
    candidate = torch.full((1, 1, 3), 2.0, dtype=torch.float64)
    assert torch.equal(cell.write(content, on_nop, erase, candidate), content)
    written = cell.write(content, half, erase, candidate)
    expected = content.clone()
    expected[0, 0] = (1 - 0.5 * 0.5) * 1.0 + 0.5 * 2.0  # (1 - e u_j) C + u_j c̄
    assert torch.allclose(written, expected)
    # in a whole run the NOP cell's content stays zero and its address is A's last row
    _, state, trace = model(seq(), return_trace=True)
    assert trace.write_probs[..., -1].min() > 0  # it was addressed ...
    assert torch.equal(trace.memory[..., -1, 2:], torch.zeros(3, 5, 3, dtype=torch.float64))
    assert torch.equal(trace.memory[:, :, -1, :2], cell.address[-1].expand(3, 5, 2))


def test_address_part_constant_within_an_episode_and_learned_across_episodes():
    model = small_dntm()
    A = model.cell.address
    _, _, trace = model(seq(), return_trace=True)
    assert torch.equal(trace.memory[..., :2], A.detach().expand(3, 5, 5, 2))
    assert not any(A is t for t in model.initial_state(3))  # A is not part of the state
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    y, _ = model(seq())
    y.pow(2).sum().backward()
    assert A.grad is not None and A.grad.abs().sum() > 0
    before = A.detach().clone()
    opt.step()
    assert not torch.equal(A.detach(), before)
    _, _, trace2 = model(seq(), return_trace=True)  # the next episode uses the new A
    assert torch.equal(trace2.memory[..., :2], A.detach().expand(3, 5, 5, 2))


def test_content_starts_at_zero_every_call():
    model = small_dntm()
    state = model.initial_state(2)
    for name in ("content", "read_vectors", "read_lru", "write_lru"):
        assert not getattr(state, name).any(), name
    x = seq()
    assert torch.equal(model(x)[0], model(x)[0])


def test_gradcheck_soft_mode_float64():
    """LRU off: the LRU average v is deliberately cut from the graph (section 3.3), so
    with LRU the gradient is not the numerical one after the first addressing step."""
    model = small_dntm(read_heads=2, write_heads=2, addressing_steps=2, nop=True, lru=False)
    x = seq(b=2, t=3).requires_grad_()
    assert torch.autograd.gradcheck(lambda inp: model(inp)[0], (x,))
    lru = small_dntm(read_heads=2, write_heads=2, nop=True)  # v_0 = 0: exact at t = 1
    assert torch.autograd.gradcheck(lambda inp: lru(inp)[0], (seq(b=2, t=1).requires_grad_(),))
    params = dict(model.named_parameters())
    A = params.pop("cell.address").detach().clone().requires_grad_()
    xs = seq(b=2, t=3)
    assert torch.autograd.gradcheck(
        lambda a: functional_call(model, {**params, "cell.address": a}, (xs,))[0], (A,)
    )


# ---------------------------------------------------------------- discrete modes


def test_argmax_mode_is_deterministic_one_hot_and_equals_reinforce_at_evaluation():
    model = small_dntm(addressing="argmax", read_heads=2)
    x = seq()
    y1, _, tr = model(x, return_trace=True)
    y2, _ = model(x)
    assert torch.equal(y1, y2)
    for w in (tr.read_weights, tr.write_weights):
        assert set(w.unique().tolist()) <= {0.0, 1.0}
        assert torch.equal(w.sum(-1), torch.ones_like(w[..., 0]))
        assert not w.requires_grad
    assert torch.equal(tr.read_weights, torch.nn.functional.one_hot(tr.read_probs.argmax(-1), 5).double())
    reinforce = small_dntm(addressing="reinforce", read_heads=2)
    reinforce.load_state_dict(model.state_dict())
    reinforce.eval()
    assert torch.equal(reinforce(x)[0], y1)


def test_gumbel_samples_as_reinforce_and_learns_keys_by_straight_through():
    """addressing="gumbel" reads and writes the cells REINFORCE samples for the same seed
    (one-hots), the keys get a gradient from the task loss alone (straight-through), and
    evaluation takes the argmax, as the other discrete modes."""
    x = seq(t=6)
    gumbel = small_dntm(addressing="gumbel", read_heads=2, write_heads=2)
    reinforce = small_dntm(addressing="reinforce", read_heads=2, write_heads=2)
    reinforce.load_state_dict(gumbel.state_dict())
    traces = []
    for model in (gumbel, reinforce):
        torch.manual_seed(3)
        traces.append(model(x, return_trace=True)[2])
    for name in ("read_weights", "write_weights"):
        a, b = getattr(traces[0], name), getattr(traces[1], name)
        assert torch.equal(a, b) and set(a.unique().tolist()) == {0.0, 1.0}, name
    assert traces[0].sampled.eq(0).all() and not gumbel.uses_aux_loss
    gumbel.zero_grad()
    gumbel(x)[0].sin().sum().backward()
    keys = gumbel.cell.head_params.weight.grad[: sum(gumbel.cell.split_sizes[:4])]
    assert keys.abs().sum() > 0
    gumbel.eval()
    argmax = small_dntm(addressing="argmax", read_heads=2, write_heads=2)
    argmax.load_state_dict(gumbel.state_dict())
    assert torch.equal(gumbel(x)[0], argmax(x)[0])


def test_gumbel_temperature_schedule_and_its_checks():
    """1/τ follows ARMIN's schedule from the training step (training/schedules.py): 1 at the
    start, +1 every temperature_every steps, at most N' - 1; temperature_every=0 keeps it."""
    model = small_dntm(addressing="gumbel", memory_slots=5, temperature_every=10)
    assert model.temperature_schedule == (10, 4) and model.inverse_temperature == 1.0
    for step, expected in ((0, 1.0), (9, 1.0), (10, 2.0), (25, 3.0), (1000, 4.0)):
        schedules.start_minibatch(model, step)
        assert model.inverse_temperature == expected and model.cell.inverse_temperature == expected
    assert small_dntm(addressing="gumbel", temperature_every=0).temperature_schedule is None
    assert small_dntm(addressing="reinforce").temperature_schedule is None
    for bad in (-1, 2.5, True, "10"):
        with pytest.raises(ConfigError, match="temperature_every"):
            small_dntm(addressing="gumbel", temperature_every=bad)


def test_soft_model_tested_discretely():
    """The paper's Discrete† column: train soft, evaluate with addressing='argmax'."""
    soft = small_dntm()
    hard = small_dntm(addressing="argmax")
    hard.load_state_dict(soft.state_dict())
    _, _, ts = soft(seq(), return_trace=True)
    _, _, th = hard(seq(), return_trace=True)
    assert torch.allclose(ts.read_probs[:, 0], th.read_probs[:, 0])  # same first step
    assert not torch.equal(ts.read_weights, th.read_weights)


def test_reinforce_samples_in_training_and_keys_learn_only_through_aux_loss():
    model = small_dntm(addressing="reinforce", read_heads=2)
    torch.manual_seed(0)
    y, _, tr = model(seq(), return_trace=True)
    assert tr.sampled.eq(1).all()
    assert set(tr.write_weights.unique().tolist()) == {0.0, 1.0}
    runs = {
        tuple(model(seq(), return_trace=True)[2].read_weights.argmax(-1).flatten().tolist()) for _ in range(5)
    }
    assert len(runs) > 1  # samples differ between calls
    key_rows = model.cell.head_params.weight[: 2 * 5]  # the read keys' rows
    (grad,) = torch.autograd.grad(y.pow(2).sum(), model.cell.head_params.weight, retain_graph=True)
    assert grad[: 2 * 5].abs().sum() == 0  # one-hot reads: no backprop path
    nll = torch.rand(3, 5, dtype=torch.float64)
    (grad,) = torch.autograd.grad(model.aux_loss(tr, nll), model.cell.head_params.weight)
    assert grad[: 2 * 5].abs().sum() > 0 and key_rows.shape[0] == 10


def test_reinforce_term_by_hand():
    model = small_dntm(addressing="reinforce", entropy_weight=0.1)
    torch.manual_seed(1)
    _, _, tr = model(seq(), return_trace=True)
    nll = torch.rand(3, 5, dtype=torch.float64)
    terms = model.aux_terms(tr, nll)
    reward = -nll.sum(1)
    advantage = (reward - reward.mean()) / torch.sqrt(reward.var(unbiased=False) + 1e-4)
    log_p = torch.log((tr.read_weights * tr.read_probs).sum(-1)).sum((1, 2)) + torch.log(
        (tr.write_weights * tr.write_probs).sum(-1)
    ).sum((1, 2))
    scored = 5 * 3  # every step scored, 3 outputs
    # float64 throughout: the first minibatch's own moments are not rounded to float32
    assert torch.allclose(terms["reinforce"], -(advantage * log_p).mean() / scored, rtol=1e-12, atol=0)
    ent = -(tr.read_probs * tr.read_probs.log()).sum(-1).sum((1, 2)) - (
        tr.write_probs * tr.write_probs.log()
    ).sum(-1).sum((1, 2))
    assert torch.allclose(terms["entropy"], -0.1 * ent.mean() / scored)
    assert model.reward_stats.count.item() == 1
    model.eval()  # evaluation never moves the moments
    model.aux_terms(tr, nll)
    assert model.reward_stats.count.item() == 1
    assert {"reward_stats.mean", "reward_stats.var", "reward_stats.count"} <= set(model.state_dict())
    model.reinforce_weight = 0.5
    assert torch.allclose(model.aux_terms(tr, nll)["reinforce"], 0.5 * terms["reinforce"])


def test_sharpen_term_penalises_the_entropy_of_soft_sequences_only():
    model = small_dntm(addressing="reinforce", curriculum_p0=1.0, sharpen_weight=0.2)
    model.soft_minibatch = True
    _, _, tr = model(seq(), return_trace=True)
    nll = torch.rand(3, 5, dtype=torch.float64)
    ent = -(tr.read_probs * tr.read_probs.log()).sum(-1).sum((1, 2)) - (
        tr.write_probs * tr.write_probs.log()
    ).sum(-1).sum((1, 2))
    scored = 5 * 3
    terms = model.aux_terms(tr, nll)
    assert "reinforce" not in terms  # nothing was sampled
    assert torch.allclose(terms["sharpen"], 0.2 * ent.mean() / scored)
    (grad,) = torch.autograd.grad(terms["sharpen"], model.cell.head_params.weight)
    assert grad.abs().sum() > 0  # it moves the keys and strengths
    model.soft_minibatch = False  # sampled sequences: REINFORCE, no sharpening
    _, _, tr = model(seq(), return_trace=True)
    assert model.aux_terms(tr, nll)["sharpen"].item() == 0


def test_reward_to_go_term_by_hand():
    model = small_dntm(addressing="reinforce", reward="to_go")
    torch.manual_seed(1)
    _, _, tr = model(seq(), return_trace=True)
    nll = torch.rand(3, 5, dtype=torch.float64)
    nll[:, 0] = 0  # step 0 not scored: no reward there
    rewards = -nll
    others = (rewards.sum(0, keepdim=True) - rewards) / 2  # b_j: mean of the other 2 sequences
    centred = (rewards - others) * (nll > 0)
    returns = centred.flip(1).cumsum(1).flip(1)  # G_t = sum_{j >= t}
    advantage = (returns - returns.mean()) / torch.sqrt(returns.var(unbiased=False) + 1e-4)
    log_p = torch.log((tr.read_weights * tr.read_probs).sum(-1)).sum(2) + torch.log(
        (tr.write_weights * tr.write_probs).sum(-1)
    ).sum(2)  # (B, T)
    scored = 4 * 3  # 4 scored steps, 3 outputs
    expected = -(advantage * log_p).sum(1).mean() / scored
    assert torch.allclose(model.aux_terms(tr, nll)["reinforce"], expected, rtol=1e-12, atol=0)
    with pytest.raises(ConfigError, match="reward must be one of"):
        small_dntm(addressing="reinforce", reward="per_step")
    with pytest.raises(ConfigError, match="input_baseline"):
        small_dntm(addressing="reinforce", reward="to_go", input_baseline=True)


def test_read_discount_scores_reads_by_nearer_rewards():
    model = small_dntm(addressing="reinforce", reward="to_go", read_discount=0.0)
    torch.manual_seed(1)
    _, _, tr = model(seq(), return_trace=True)
    nll = torch.rand(3, 5, dtype=torch.float64)
    nll[:, 0] = 0
    rewards = -nll
    centred = (rewards - (rewards.sum(0, keepdim=True) - rewards) / 2) * (nll > 0)

    def normalised(v):
        return (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + 1e-4)

    returns = centred.flip(1).cumsum(1).flip(1)
    read_log_p = torch.log((tr.read_weights * tr.read_probs).sum(-1)).sum(2)
    write_log_p = torch.log((tr.write_weights * tr.write_probs).sum(-1)).sum(2)
    # discount 0: a read is scored by its own step's centred reward, a write by the return
    expected = -(normalised(centred) * read_log_p + normalised(returns) * write_log_p).sum(1).mean() / 12
    assert torch.allclose(model.aux_terms(tr, nll)["reinforce"], expected, rtol=1e-12, atol=0)
    assert {"read_reward_stats.mean", "reward_stats.mean"} <= set(model.state_dict())
    with pytest.raises(ConfigError, match="read_discount applies to reward='to_go'"):
        small_dntm(addressing="reinforce", read_discount=0.5)
    with pytest.raises(ConfigError, match="read_discount must be"):
        small_dntm(addressing="reinforce", reward="to_go", read_discount=1.5)


def test_same_input_samples_reward_term_by_hand():
    model = small_dntm(addressing="reinforce", reward="samples")
    torch.manual_seed(1)
    x = seq(2, 5).repeat_interleave(3, dim=0)  # 2 inputs, 3 samples each
    _, _, tr = model(x, return_trace=True)
    nll = torch.rand(6, 5, dtype=torch.float64)
    reward = -nll.sum(1)
    groups = reward.view(2, 3)
    others = ((groups.sum(1, keepdim=True) - groups) / 2).flatten()  # the input's other 2
    centred = reward - others
    advantage = (centred - centred.mean()) / torch.sqrt(centred.var(unbiased=False) + 1e-4)
    log_p = torch.log((tr.read_weights * tr.read_probs).sum(-1)).sum((1, 2)) + torch.log(
        (tr.write_weights * tr.write_probs).sum(-1)
    ).sum((1, 2))
    expected = -(advantage * log_p).mean() / (5 * 3)  # 5 scored steps, 3 outputs
    assert torch.allclose(model.aux_terms(tr, nll)["reinforce"], expected, rtol=1e-12, atol=0)
    _, _, single = model(seq(2, 5), return_trace=True)
    with pytest.raises(ValueError, match="samples_per_input"):
        model.aux_terms(single, torch.rand(2, 5, dtype=torch.float64))
    with pytest.raises(ConfigError, match="input_baseline"):
        small_dntm(addressing="reinforce", reward="samples", input_baseline=True)


def test_step_samples_reward_credits_reads_per_step_by_hand():
    """reward="step_samples": a read at step t scored by r_t less the mean r_t of the input's
    other samples (unscored steps: no credit), writes by R less the input's other samples'."""
    model = small_dntm(addressing="reinforce", reward="step_samples")
    torch.manual_seed(1)
    x = seq(2, 5).repeat_interleave(3, dim=0)  # 2 inputs, 3 samples each
    _, _, tr = model(x, return_trace=True)
    nll = torch.rand(6, 5, dtype=torch.float64)
    nll[:, :2] = 0  # steps 0-1 not scored
    rewards = -nll
    groups = rewards.view(2, 3, 5)
    others = ((groups.sum(1, keepdim=True) - groups) / 2).reshape(6, 5)
    centred = rewards - others
    scored_steps = nll > 0
    kept = centred[scored_steps]
    read_advantage = (centred - kept.mean()) / torch.sqrt(kept.var(unbiased=False) + 1e-4) * scored_steps
    total = rewards.sum(1)
    totals = total.view(2, 3)
    write_centred = total - ((totals.sum(1, keepdim=True) - totals) / 2).flatten()
    write_advantage = (write_centred - write_centred.mean()) / torch.sqrt(
        write_centred.var(unbiased=False) + 1e-4
    )
    read_log_p = torch.log((tr.read_weights * tr.read_probs).sum(-1)).sum(2)
    write_log_p = torch.log((tr.write_weights * tr.write_probs).sum(-1)).sum((1, 2))
    expected = -((read_advantage * read_log_p).sum(1) + write_advantage * write_log_p).mean() / (3 * 3)
    assert torch.allclose(model.aux_terms(tr, nll)["reinforce"], expected, rtol=1e-12, atol=0)
    assert {"read_reward_stats.mean", "reward_stats.mean"} <= set(model.state_dict())
    _, _, single = model(seq(2, 5), return_trace=True)
    with pytest.raises(ValueError, match="samples_per_input"):
        model.aux_terms(single, torch.rand(2, 5, dtype=torch.float64))


def test_sequential_writes_fill_the_memory_then_the_least_read_cell():
    """writes="sequential": the n-th write goes to cell n while cells remain (never the NOP
    cell), then to the cell read least so far; it samples nothing, so log p(u) = 0 and only the
    reads carry REINFORCE's term."""
    model = small_dntm(addressing="reinforce", writes="sequential", memory_slots=3, nop=True)
    torch.manual_seed(2)
    _, state, tr = model(seq(t=6), return_trace=True)
    cells = tr.write_weights.argmax(-1)[:, :, 0]  # (B, T)
    assert torch.equal(cells[:, :3], torch.tensor([[0, 1, 2]] * 3))
    reads = tr.read_weights[:, :, 0]  # (B, T, N')
    for t in range(3, 6):
        counts = reads[:, : t + 1, :3].sum(1)  # this step's read included
        assert torch.equal(cells[:, t], counts.argmin(-1))
    assert torch.equal(tr.write_weights, tr.write_probs)
    assert torch.equal(state.counts.written, torch.full((3,), 6.0, dtype=torch.float64))
    assert torch.equal(state.counts.reads, reads.sum(1))
    log_p = sampling.log_prob(tr.write_weights, tr.write_probs)
    assert torch.equal(log_p, torch.zeros_like(log_p))
    with pytest.raises(ConfigError, match="writes='sequential' needs write_heads=1"):
        small_dntm(writes="sequential", write_heads=2)
    with pytest.raises(ConfigError, match="writes must be one of"):
        small_dntm(writes="tied")


def test_entropy_terms_have_a_finite_gradient_where_probabilities_underflow():
    """Sharp float32 addressing underflows probabilities to exactly 0, where the gradient of
    p log p is 0/0: the entropy bonus and the sharpening penalty give 0 there, not NaN."""
    logits = torch.tensor([[[[0.0, 200.0, -200.0]]]], requires_grad=True)  # (B, T, K, N)
    probs = torch.softmax(logits, -1)
    assert probs.min() == 0
    sampling.entropy(probs).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_input_baseline_is_trained_with_huber_and_only_by_it():
    model = small_dntm(addressing="reinforce", input_baseline=True)
    _, _, tr = model(seq(), return_trace=True)
    terms = model.aux_terms(tr, torch.rand(3, 5, dtype=torch.float64))
    assert set(terms) == {"reinforce", "baseline"}
    base = list(model.baseline.parameters())
    g_rl = torch.autograd.grad(terms["reinforce"], base, allow_unused=True, retain_graph=True)
    assert all(g is None or g.abs().sum() == 0 for g in g_rl)
    g_b = torch.autograd.grad(terms["baseline"], base)
    assert all(g.abs().sum() > 0 for g in g_b)


def test_soft_model_has_no_aux_loss_unless_a_regulariser_is_on():
    assert not small_dntm().uses_aux_loss
    assert small_dntm(addressing="reinforce").uses_aux_loss
    assert small_dntm(read_write_consistency=0.1).uses_aux_loss
    assert small_dntm(next_input_prediction=1.0).uses_aux_loss


# ------------------------------------------------------------------- curriculum


def test_curriculum_probability_schedule():
    assert schedules.inverse_sqrt(1.0, 0) == 1.0
    assert schedules.inverse_sqrt(1.0, 3) == 0.5
    assert schedules.inverse_sqrt(0.5, 99) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="step"):
        schedules.inverse_sqrt(1.0, -1)
    with pytest.raises(ValueError, match="p0"):
        schedules.inverse_sqrt(1.5, 0)
    model = small_dntm(addressing="reinforce", curriculum_p0=1.0)
    torch.manual_seed(0)
    soft = []
    for _ in range(2000):
        schedules.start_minibatch(model, 3)  # p_3 = 1 / sqrt(4) = 0.5
        soft.append(model.soft_minibatch)
    assert abs(sum(soft) / 2000 - 0.5) < 0.04
    schedules.start_minibatch(model, 0)  # p_0 = 1: always soft
    assert model.soft_minibatch
    blocks = small_dntm(addressing="reinforce", curriculum_p0=1.0, curriculum_every=1000)
    for _ in range(50):
        schedules.start_minibatch(blocks, 999)  # t = 999 // 1000 = 0: p = 1
        assert blocks.soft_minibatch
    soft = []
    for _ in range(2000):
        schedules.start_minibatch(blocks, 3999)  # t = 3: p = 0.5
        soft.append(blocks.soft_minibatch)
    assert abs(sum(soft) / 2000 - 0.5) < 0.04
    with pytest.raises(ConfigError, match="curriculum_every"):
        small_dntm(addressing="reinforce", curriculum_p0=1.0, curriculum_every=0)
    plain = small_dntm(addressing="reinforce")
    state = torch.get_rng_state()
    schedules.start_minibatch(plain, 0)  # no curriculum: untouched, no draw
    assert not plain.soft_minibatch and torch.equal(state, torch.get_rng_state())


def test_curriculum_switches_between_soft_and_sampled_weights():
    model = small_dntm(addressing="reinforce", curriculum_p0=1.0)
    model.soft_minibatch = True
    _, _, tr = model(seq(), return_trace=True)
    assert tr.sampled.eq(0).all() and torch.equal(tr.read_weights, tr.read_probs)
    assert model.aux_terms(tr, torch.rand(3, 5, dtype=torch.float64)) == {}
    model.soft_minibatch = False
    _, _, tr = model(seq(), return_trace=True)
    assert tr.sampled.eq(1).all()
    model.soft_minibatch = True
    model.eval()  # evaluation is always discrete
    _, _, tr = model(seq(), return_trace=True)
    assert set(tr.read_weights.unique().tolist()) == {0.0, 1.0} and tr.sampled.eq(0).all()


def test_training_loop_drives_the_curriculum(tmp_path, monkeypatch):
    from mannlab.config import RunConfig, TrainConfig
    from mannlab.training import loop, train

    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    seen = []
    original = mannlab.DNTM._run

    def spy(self, x, state, with_trace):
        if self.training:
            seen.append(self.soft_minibatch)
        return original(self, x, state, with_trace)

    monkeypatch.setattr(mannlab.DNTM, "_run", spy)
    config = RunConfig(
        model="dntm",
        task="copy",
        seed=0,
        run_dir=str(tmp_path / "run"),
        model_args={
            **SMALL,
            "addressing": "reinforce",
            "curriculum_p0": 1.0,
            "entropy_weight": 0.01,
            "input_baseline": True,
        },
        task_args={"width": 3, "max_length": 3},
        train=TrainConfig(
            steps=6,
            batch_size=4,
            val_every=6,
            val_batch_size=4,
            val_batches=1,
            val_length_multiples=(1,),
            checkpoint_every=6,
            progress=False,
            optimizer="adam",
        ),
    )
    summary = train(config)
    assert seen[0] is True and len(seen) == 6  # p_0 = 1: the first minibatch is soft
    assert summary["steps"] == 6


# ------------------------------------------------------------------ regularisers


def test_read_write_consistency_by_hand():
    u = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]])  # (B=1, T=2, H=1, N=2)
    w = torch.tensor([[[[1.0, 0.0]], [[0.5, 0.5]]]])
    # t'=1: mean u = [1, 0], overlap 1 -> 0; t'=2: mean u = [.5, .5], overlap .5 -> .25; / T' = 2
    assert torch.allclose(read_write_consistency(w, u, 1, 1), torch.tensor([0.125]))


def test_regularisers_switch_on_from_the_config_and_get_gradients():
    model = build_model("dntm", 4, 3, **SMALL, read_write_consistency=0.5, next_input_prediction=1.0).double()
    _, _, tr = model(seq(), return_trace=True)
    terms = model.aux_terms(tr, torch.zeros(3, 5, dtype=torch.float64))
    assert set(terms) == {"read_write", "next_input"}
    assert all(t.item() > 0 for t in terms.values())
    sum(terms.values()).backward()
    assert model.predictor.weight.grad.abs().sum() > 0
    assert model.cell.head_params.weight.grad.abs().sum() > 0
    gaussian = small_dntm(next_input_prediction=1.0, next_input_distribution="gaussian")
    _, _, tr = gaussian(3 * seq() - 1, return_trace=True)
    assert gaussian.aux_terms(tr, torch.zeros(3, 5, dtype=torch.float64))["next_input"] > 0
    _, _, tr = model(3 * seq() - 1, return_trace=True)
    with pytest.raises(ValueError, match="gaussian"):
        model.aux_loss(tr, torch.zeros(3, 5, dtype=torch.float64))


# ---------------------------------------------------------- the compiled path


@pytest.fixture
def kernels_enabled():
    """The compiled path's tests run it even under MANNLAB_KERNELS=0 (numba is required)."""
    with use_kernels(True):
        yield


def randomise(model):
    """Random values for every parameter (biases and the initial state too), so every term of
    the kernels' forward and backward is exercised."""
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.7)
    return model


def random_state(model, batch):
    """A non-zero initial state that requires grad (its gradient is compared too)."""
    gen = torch.Generator().manual_seed(3)
    state = model.initial_state(batch)

    def rand(t):
        return torch.rand(t.shape, dtype=t.dtype, generator=gen).requires_grad_()

    counts = ()
    if state.counts:  # writes="sequential": whole counts, some rows past the filling
        written = torch.randint(0, 2 * state.counts.reads.shape[1], (batch,), generator=gen)
        reads = torch.randint(0, 3, state.counts.reads.shape, generator=gen)
        counts = DNTMWriteCounts(written.to(state.content.dtype), reads.to(state.content.dtype))
    return DNTMState(
        tuple(rand(t) for t in state.controller),
        rand(state.content),
        rand(state.read_vectors),
        rand(state.read_lru),
        rand(state.write_lru),
        counts=counts,
    )


def copy_tuple(value: tuple) -> tuple:
    """A state field's tuple (a NamedTuple stays one) of detached copies, leaves where the
    original is (counts are not)."""
    items = [t.detach().clone().requires_grad_(t.requires_grad) for t in value]
    return type(value)(*items) if hasattr(value, "_fields") else tuple(items)


def both_paths(model, x, state=None, soft_minibatch=False, nll_seed=0):
    """Outputs, final state, trace, gradients of every parameter (and of the initial state) of
    the tensor path and of the compiled path, each from the same seed and the same reward
    moments, for a loss over all of them and aux_loss."""
    results = []
    buffers = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("reward")}
    nll = torch.rand(x.shape[:2], dtype=x.dtype, generator=torch.Generator().manual_seed(nll_seed))
    for kernels in (False, True):
        model.soft_minibatch = soft_minibatch
        model.load_state_dict(buffers, strict=False)
        model.zero_grad()
        start = (
            None
            if state is None
            else DNTMState(
                *(
                    copy_tuple(s) if isinstance(s, tuple) else s.detach().clone().requires_grad_()
                    for s in state
                )
            )
        )
        torch.manual_seed(5)
        with use_kernels(kernels):
            y, final, tr = model(x, start, return_trace=True)
        loss = (
            y.sin().sum()
            + sum((t * (i + 1)).cos().sum() for i, t in enumerate(leaves(final)))
            + tr.read_probs.pow(2).sum()
            + tr.write_probs.sin().sum()
            + tr.key_strengths.sum()
            + tr.lru_gates.cos().sum()
            + tr.erase_vectors.pow(2).sum()
            + tr.candidates.sin().sum()
            + tr.input_gates.sum()
            + tr.memory.pow(2).sum()
            + tr.hidden.sum()
            + tr.read_vectors.cos().sum()
            + model.aux_loss(tr, nll)
        )
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        if start is not None:
            grads.update(
                {f"state{i}": t.grad.clone() for i, t in enumerate(leaves(start)) if t.requires_grad}
            )
        results.append((y, final, tr, grads))
    return results


def assert_paths_equal(results, atol=1e-10):
    (y0, s0, t0, g0), (y1, s1, t1, g1) = results
    assert torch.allclose(y0, y1, atol=atol, rtol=0)
    for a, b in zip(leaves(s0), leaves(s1), strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=0)
    for name in DNTMTrace._fields:
        a, b = getattr(t0, name), getattr(t1, name)
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert torch.allclose(a, b, atol=atol, rtol=0), name
        assert a.requires_grad == b.requires_grad, name
    assert g0.keys() == g1.keys()
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=atol, rtol=1e-9), name


AUX = dict(entropy_weight=0.1, read_write_consistency=0.3, next_input_prediction=0.5)


@pytest.mark.usefixtures("kernels_enabled")
@pytest.mark.parametrize("mode", ["soft", "reinforce", "argmax", "gumbel"])
@pytest.mark.parametrize("controller, writes", [("gru", "learned"), ("fnn", "sequential")])
def test_compiled_path_equals_tensor_path(mode, controller, writes):
    """The model on its kernels (DNTMCell.run_op, mannlab.ops.dntm.dntm_sequence) gives its
    per-step tensor path's outputs, final state, every trace field and every gradient
    (parameters and initial state, through the task loss, the trace and aux_loss: REINFORCE,
    entropy, read-write consistency, next-input prediction), with the same one-hot samples for
    the same seed, from the initial state and from a state with counts. The kernels against the
    op's reference loop, configuration by configuration: tests/ops/test_dntm_ops.py."""
    model = randomise(
        small_dntm(
            controller=controller,
            addressing=mode,
            addressing_steps=2,
            nop=True,
            read_heads=2,
            writes=writes,
            **AUX,
        )
    )
    model.inverse_temperature = 2.5  # straight-through's 1/τ (the other modes ignore it)
    x = seq(t=7)
    assert sequence_backend(model.cell, x) == "numba"
    assert_paths_equal(both_paths(model, x))
    results = both_paths(model, x, random_state(model, 3))
    assert_paths_equal(results)
    if mode == "reinforce":
        assert results[1][2].sampled.eq(1).all()
        assert {tuple(r[2].read_weights.argmax(-1).flatten().tolist()) for r in results} == {
            tuple(results[0][2].read_weights.argmax(-1).flatten().tolist())
        }


@pytest.mark.usefixtures("kernels_enabled")
def test_compiled_path_curriculum_soft_minibatch_and_evaluation():
    """A reinforce model's soft minibatch (curriculum) and its argmax evaluation."""
    model = randomise(small_dntm(addressing="reinforce", curriculum_p0=1.0, **AUX))
    results = both_paths(model, seq(t=6), soft_minibatch=True)
    assert_paths_equal(results)
    assert results[1][2].sampled.eq(0).all()
    assert torch.equal(results[1][2].read_weights, results[1][2].read_probs)
    model.eval()
    results = both_paths(model, seq(t=6))
    assert_paths_equal(results)
    assert set(results[1][2].read_weights.unique().tolist()) == {0.0, 1.0}


def test_compiled_samples_are_torch_multinomial_draws():
    """The compiled path draws one Exp(1) per probability in the step loop's order and takes
    argmax p / E: torch.multinomial(p, 1) draws exactly these (sampling.sample_one_hot)."""
    p = torch.softmax(3 * torch.randn(7, 11, dtype=torch.float64), -1)
    for seed in range(5):
        torch.manual_seed(seed)
        a = sampling.sample_one_hot(p)
        b = sampling.sample_one_hot(p[:3])  # two calls ...
        torch.manual_seed(seed)
        e = torch.empty(10, 11, dtype=torch.float64).exponential_()  # ... one draw
        assert torch.equal(a.argmax(-1), (p / e[:7]).argmax(-1))
        assert torch.equal(b.argmax(-1), (p[:3] / e[7:]).argmax(-1))


@pytest.mark.usefixtures("kernels_enabled")
def test_compiled_path_only_where_it_applies(monkeypatch):
    """Other controllers and the kernels switched off (use_kernels(False), as
    MANNLAB_KERNELS=0) run the tensor path; GRU and FNN run the kernels."""
    calls = []
    original = dntm_module.DNTMCell.run_op

    def spy(self, *args):
        calls.append(type(self.controller).__name__)
        return original(self, *args)

    monkeypatch.setattr(dntm_module.DNTMCell, "run_op", spy)
    x = seq()
    for controller in ("gru", "fnn", "lstm", "elman", "pnr-lstm"):
        model = small_dntm(controller=controller)
        assert bool(sequence_backend(model.cell, x)) == (controller in ("gru", "fnn"))
        model(x)
        with torch.no_grad():
            model(x, return_trace=True)
    assert calls == ["GRUController"] * 2 + ["FNNController"] * 2
    model = small_dntm()
    with use_kernels(False):
        assert not sequence_backend(model.cell, x)
        model(x)
        model(x, return_trace=True)
    assert len(calls) == 4


# ------------------------------------------------------------------- bad input


def test_aux_loss_checks_its_arguments():
    model = small_dntm(addressing="reinforce")
    _, _, tr = model(seq(), return_trace=True)
    with pytest.raises(ValueError, match=r"step_nll must be \(B, T\) = \(3, 5\)"):
        model.aux_loss(tr, torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="DNTMTrace"):
        model.aux_loss(tuple(tr), torch.zeros(3, 5, dtype=torch.float64))


# --------------------------------------------------------------------- learning


def test_learns_tiny_copy_soft():
    before, after = tiny_copy_losses(
        lambda task: build_model(
            "dntm",
            task.input_size,
            task.output_size,
            controller_size=24,
            memory_slots=8,
            address_size=4,
            content_size=6,
        )
    )
    assert after < 0.75 * before, f"validation BCE {before:.3f} -> {after:.3f}"


def test_training_with_several_samples_per_input(tmp_path, monkeypatch):
    """train.samples_per_input = K puts each drawn sequence K times in a row in the minibatch,
    so reward = "samples" trains end to end; a batch size that K does not divide is refused."""
    from mannlab.config import RunConfig, TrainConfig
    from mannlab.training import loop, train

    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    seen = []
    original = mannlab.DNTM.aux_terms

    def spy(self, trace, nll, outputs_per_step=None, reducer=None):
        seen.append(trace.inputs)
        return original(self, trace, nll, outputs_per_step, reducer)

    monkeypatch.setattr(mannlab.DNTM, "aux_terms", spy)
    config = RunConfig(
        model="dntm",
        task="copy",
        seed=0,
        run_dir=str(tmp_path / "run"),
        model_args={
            "controller_size": 6,
            "memory_slots": 4,
            "address_size": 2,
            "content_size": 2,
            "addressing": "reinforce",
            "reward": "samples",
        },
        task_args={"width": 3, "max_length": 3},
        train=TrainConfig(
            steps=3,
            batch_size=6,
            samples_per_input=3,
            val_every=3,
            val_batch_size=4,
            val_batches=1,
            val_length_multiples=(1,),
            checkpoint_every=3,
            progress=False,
            optimizer="adam",
        ),
    )
    assert train(config)["steps"] == 3
    for inputs in seen:
        groups = inputs.view(2, 3, *inputs.shape[1:])
        assert torch.equal(groups, groups[:, :1].expand_as(groups))
        assert not torch.equal(groups[0], groups[1])
    with pytest.raises(ConfigError, match="multiple of train.samples_per_input"):
        TrainConfig(batch_size=6, samples_per_input=4)
