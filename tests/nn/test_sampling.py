"""Sampling helpers: one-hot samples, log-probabilities, entropy, Huber, running moments,
and the REINFORCE estimator against an exact gradient."""

import math

import pytest
import torch

from mannlab.nn import sampling


def test_sample_one_hot_is_one_hot_and_follows_the_distribution():
    torch.manual_seed(0)
    probs = torch.tensor([0.1, 0.6, 0.0, 0.3]).expand(20000, 2, 4)
    samples = sampling.sample_one_hot(probs)
    assert samples.shape == probs.shape and not samples.requires_grad
    assert torch.equal(samples.sum(-1), torch.ones(20000, 2))
    assert set(samples.unique().tolist()) == {0.0, 1.0}
    freq = samples.mean((0, 1))
    assert freq[2] == 0  # never a zero-probability cell
    assert torch.allclose(freq, probs[0, 0], atol=0.01)


def test_argmax_one_hot_takes_the_first_maximum():
    probs = torch.tensor([[0.2, 0.5, 0.3], [0.4, 0.2, 0.4]])
    assert torch.equal(sampling.argmax_one_hot(probs), torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))


def test_log_prob_and_entropy_by_hand():
    probs = torch.tensor([[0.25, 0.75], [1.0, 0.0]], requires_grad=True)
    one_hot = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert torch.allclose(sampling.log_prob(one_hot, probs), torch.tensor([math.log(0.75), 0.0]))
    ent = sampling.entropy(probs)
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert torch.allclose(ent, torch.tensor([expected, 0.0]))  # 0 log 0 = 0, not NaN
    assert torch.allclose(sampling.entropy(torch.full((5,), 0.2)), torch.tensor(math.log(5)))
    (sampling.log_prob(one_hot, probs).sum() + ent.sum()).backward()
    assert torch.isfinite(probs.grad[0]).all()


def test_huber_as_in_the_paper():
    x = torch.tensor([-3.0, -1.0, 0.5, 2.0])
    assert torch.allclose(sampling.huber(x), torch.tensor([5.0, 1.0, 0.25, 3.0]))
    assert torch.allclose(sampling.huber(x, delta=2.0), torch.tensor([8.0, 1.0, 0.25, 4.0]))
    with pytest.raises(ValueError, match="delta"):
        sampling.huber(x, delta=0)


def test_running_moments_update_normalise_and_checkpoint():
    stats = sampling.RunningMoments(momentum=0.5)
    stats.update(torch.tensor([1.0, 3.0]))  # first batch: its own moments
    assert stats.mean.item() == 2.0 and stats.var.item() == 1.0 and stats.count.item() == 1
    stats.update(torch.tensor([6.0, 6.0]))
    # mean 0.5*2 + 0.5*6 = 4; var 0.5 (1 + 0.5 * 4^2) + 0.5 * 0 = 4.5
    assert stats.mean.item() == 4.0 and stats.var.item() == pytest.approx(4.5)
    assert torch.allclose(
        stats.normalise(torch.tensor([4.0 + 3.0])), torch.tensor([3.0 / math.sqrt(4.5 + stats.eps)])
    )
    restored = sampling.RunningMoments(momentum=0.5)
    restored.load_state_dict(stats.state_dict())
    assert restored.mean.item() == 4.0 and restored.count.item() == 2
    with pytest.raises(ValueError, match="momentum"):
        sampling.RunningMoments(momentum=1.0)


class _TwinSlices:
    """A Reducer for a batch split in two equal slices that hold the same rows (this one first)."""

    def sum(self, tensor):
        return 2 * tensor.detach()

    def gather(self, tensor):
        return torch.cat([tensor.detach(), tensor.detach()]), slice(0, tensor.shape[0])


def test_batch_statistics_with_a_reducer_are_those_of_the_global_batch():
    gen = torch.Generator().manual_seed(0)
    values, mask = torch.randn(3, 4, generator=gen), (torch.rand(3, 4, generator=gen) > 0.3).float()
    inputs = torch.tensor([0.0, 1.0, 2.0]).view(3, 1)  # each input once here, twice globally
    twins, both = _TwinSlices(), slice(0, 3)
    whole, whole_mask = torch.cat([values, values]), torch.cat([mask, mask])
    assert torch.allclose(
        sampling.leave_one_out_mean(values, mask, twins), sampling.leave_one_out_mean(whole, whole_mask)[both]
    )
    assert torch.equal(sampling.same_input_leave_one_out_mean(values[:, 0], inputs, twins), values[:, 0])
    with pytest.raises(ValueError, match="every input at least twice"):
        sampling.same_input_leave_one_out_mean(values[:, 0], inputs)  # without: this slice alone
    assert torch.allclose(sampling.batch_mean(values, twins), whole.mean())
    split, one = sampling.RunningMoments(), sampling.RunningMoments()
    split.update(values, twins)
    one.update(whole)
    assert torch.allclose(split.mean, one.mean) and torch.allclose(split.var, one.var)


def test_reinforce_estimate_matches_the_exact_gradient_and_finds_the_optimum():
    """E[R] = sum_j softmax(theta)_j r_j has a known optimum (the best j); the mean of the
    score-function estimate over many samples must equal the exact gradient."""
    torch.manual_seed(0)
    reward = torch.tensor([1.0, 3.0, 0.0, 2.0])
    theta = torch.tensor([0.3, -0.2, 0.5, 0.0], requires_grad=True)
    (exact,) = torch.autograd.grad(-(torch.softmax(theta, -1) * reward).sum(), theta)
    probs = torch.softmax(theta, -1).expand(200000, 4)
    samples = sampling.sample_one_hot(probs)
    r = samples @ reward
    baseline, scale = 1.5, 2.0  # a constant centre and scale
    surrogate = sampling.reinforce_surrogate(sampling.log_prob(samples, probs), (r - baseline) / scale).mean()
    (estimate,) = torch.autograd.grad(surrogate, theta)
    assert torch.allclose(estimate * scale, exact, atol=0.02), (estimate * scale, exact)
    # gradient descent on the surrogate reaches the optimum j = 1
    theta = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=0.5)
    for _ in range(300):
        probs = torch.softmax(theta, -1).expand(64, 4)
        samples = sampling.sample_one_hot(probs)
        r = samples @ reward
        loss = sampling.reinforce_surrogate(sampling.log_prob(samples, probs), r - r.mean()).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.softmax(theta, -1)[1] > 0.9


def test_bad_distributions_fail_clearly():
    with pytest.raises(TypeError, match="floating point"):
        sampling.sample_one_hot(torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="same shape"):
        sampling.log_prob(torch.ones(2, 3), torch.ones(2, 4))
