"""Discrete addressing helpers shared by the models that sample addresses.

Generic pieces of the score-function (REINFORCE, Williams 1992) estimator with
the variance-reduction tools of Mnih & Gregor (2014), as used by the D-NTM
(Gulcehre et al. 2016, section 4) and reusable by TARDIS and ARMIN:

    sample_one_hot(p)      w~ = one-hot of j ~ Categorical(p)          (..., N)
    argmax_one_hot(p)      w~ = one-hot of argmax_j p_j                 (..., N)
    log_prob(w~, p)        log p(w~) = log sum_j w~_j p_j               (...)
    entropy(p)             H(p) = -sum_j p_j log p_j                    (...)
    huber(x, delta)        H_delta(x) = x^2 if |x| <= delta else delta (2|x| - delta)
    RunningMoments         running mean b and variance sigma^2 of a reward;
                           normalise(R) = (R - b) / sqrt(sigma^2 + eps)
    reinforce_surrogate    -A * log p(w~) with the advantage A held constant
    discounted_returns     G_t = sum_{j >= t} gamma^{j-t} R_j              (B, T)
    gumbel_noise           g = -log(-log u), u ~ U(0, 1)
    gumbel_softmax         y = softmax((logits + g) / tau); ``hard``: the one-hot of
                           argmax y forward, the gradient of y backward (straight-through)
    straight_through       hard + soft - soft.detach(): hard values, soft gradient
    gumbel_sigmoid         sigmoid((logit + log u - log(1 - u)) / tau) (binary concrete)

Everything works on any leading shape (batch, time, heads, ...); the last axis
of a distribution is the category axis (memory slots). Nothing here loops.

Data-parallel training (one slice of the batch per process): the batch statistics here, the
running moments' batch mean and variance, the leave-one-out and same-input baselines and
``batch_mean``, take a ``reducer`` (a ``Reducer``: sums and gathers over the slices), which the
training layer passes when the batch is split; they are then those of the GLOBAL batch, so a
baseline or a normaliser does not depend on how many processes share the batch, and every
process must make the same calls in the same order (the reducer's are collective). Without a
reducer (the default) they are the statistics of the tensors given; nothing here talks to
other processes by itself.
"""

from __future__ import annotations

from typing import Optional, Protocol

import torch
from torch import nn


class Reducer(Protocol):
    """How the slices of a batch split among processes combine (the training layer's
    ``distributed.batch_reducer``); each call is collective."""

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The elementwise sum of ``tensor`` over the slices (a detached copy, the same on every
        process)."""
        ...

    def gather(self, tensor: torch.Tensor) -> tuple[torch.Tensor, slice]:
        """The global batch: ``tensor`` (B, ...) of every slice concatenated in order (detached),
        and this slice's rows in it. Every slice holds the same B."""
        ...


def batch_mean(values: torch.Tensor, reducer: Optional[Reducer] = None) -> torch.Tensor:
    """The mean of ``values`` over all its elements in the global batch (no gradient with a
    reducer: it is a statistic, as the scale S of the estimator terms)."""
    if reducer is None:
        return values.mean()
    stats = reducer.sum(torch.stack([values.detach().sum(), values.new_tensor(float(values.numel()))]))
    return stats[0] / stats[1]


def _batch_moments(
    values: torch.Tensor, reducer: Optional[Reducer]
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(mean, variance (biased), count) of ``values`` over the global batch."""
    if reducer is None:
        var = values.var(unbiased=False) if values.numel() > 1 else torch.zeros_like(values.mean())
        return values.mean(), var, values.numel()
    stats = reducer.sum(torch.stack([values.sum(), values.new_tensor(float(values.numel()))]))
    count = int(stats[1].item())
    if count == 0:
        return stats[0], stats[0], 0
    mean = stats[0] / stats[1]
    var = reducer.sum((values - mean).pow(2).sum()) / stats[1]
    return mean, var, count


def _check_distribution(probs: torch.Tensor, name: str = "probs") -> None:
    if not isinstance(probs, torch.Tensor) or probs.dim() < 1 or probs.shape[-1] < 1:
        raise ValueError(
            f"{name} must be a tensor (..., N) with N >= 1 categories, "
            f"got {getattr(probs, 'shape', type(probs).__name__)}"
        )
    if not probs.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {probs.dtype}")


def sample_one_hot(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One-hot samples w~ with w~_k = I(k = j), j ~ Categorical(probs), for every leading index.

    probs (..., N), non-negative, each row summing to 1 -> (..., N) of 0/1 in probs' dtype,
    without a gradient (sampling is not differentiable; use ``log_prob`` for the estimator).
    """
    _check_distribution(probs)
    flat = probs.detach().reshape(-1, probs.shape[-1])
    index = torch.multinomial(flat, 1, generator=generator)  # (B', 1)
    one_hot = torch.zeros_like(flat).scatter_(-1, index, 1.0)
    return one_hot.view(probs.shape)


def argmax_one_hot(probs: torch.Tensor) -> torch.Tensor:
    """Deterministic one-hot w~_k = I(k = argmax_j probs_j) (the first of equal maxima).

    probs (..., N) -> (..., N) of 0/1, without a gradient.
    """
    _check_distribution(probs)
    index = probs.detach().argmax(dim=-1, keepdim=True)
    return torch.zeros_like(probs, memory_format=torch.contiguous_format).scatter_(-1, index, 1.0)


def log_prob(one_hot: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """log p(w~) = log probs[j] for the category j that ``one_hot`` selects.

    one_hot (..., N) of 0/1 (one 1 per row), probs (..., N) -> (...). Differentiable in
    probs; finite whenever the selected category has a positive probability.
    """
    if one_hot.shape != probs.shape:
        raise ValueError(
            f"one_hot and probs must have the same shape, got {tuple(one_hot.shape)} and {tuple(probs.shape)}"
        )
    return torch.log((one_hot * probs).sum(-1))


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """H(p) = -sum_j p_j log p_j (nats): probs (..., N) -> (...). p is floored at the smallest
    normal number first: a sharp softmax underflows probabilities to 0, where the gradient of
    p log p is 0/0 (NaN); the floor gives them 0, the limit of that gradient through the
    softmax (and 0 log 0 = 0 to rounding)."""
    _check_distribution(probs)
    p = probs.clamp_min(torch.finfo(probs.dtype).tiny)
    return -torch.special.xlogy(p, p).sum(-1)


def huber(x: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Huber loss as written in the D-NTM paper (Huber 1964), elementwise:

    H_delta(x) = x^2 for |x| <= delta, delta (2 |x| - delta) otherwise
    (twice torch's huber_loss; continuous with a continuous slope at |x| = delta).
    """
    if not delta > 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    ax = x.abs()
    return torch.where(ax <= delta, x * x, delta * (2 * ax - delta))


def reinforce_surrogate(log_probs: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """Score-function surrogate -A log p(w~), elementwise (broadcasting A over log_probs).

    Its gradient is -A grad log p(w~), an unbiased estimate of -grad E[R] when
    A = R - b with a baseline b that does not depend on the sample. The advantage
    is detached: no gradient flows into the reward or the baseline.
    """
    return -advantage.detach() * log_probs


class RunningMoments(nn.Module):
    """Running mean b and variance sigma^2 of a scalar signal (a reward), as buffers.

    ``update(values)`` folds in a batch with an exponential moving average
    (``momentum`` is the weight of the past; the first update takes the batch's
    own moments); ``normalise(values)`` gives (values - b) / sqrt(sigma^2 + eps).
    Buffers (``mean``, ``var``, ``count``) are saved in the state_dict, so a
    checkpoint restores them. Updates never carry gradients.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, momentum: float = 0.9, eps: float = 1e-4):
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.momentum, self.eps = momentum, eps
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("var", torch.ones(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def update(self, values: torch.Tensor, reducer: Optional[Reducer] = None) -> None:
        """Fold the batch ``values`` (any shape, at least one element) into b and sigma^2
        (the global batch's, through ``reducer``, when the batch is split)."""
        values = values.detach().to(self.mean.dtype)
        batch_mean, batch_var, count = _batch_moments(values, reducer)
        if count == 0:
            raise ValueError("RunningMoments.update needs at least one value")
        if int(self.count) == 0:
            self.mean.copy_(batch_mean)
            self.var.copy_(batch_var)
        else:
            m = self.momentum
            delta = batch_mean - self.mean
            self.mean.add_((1 - m) * delta)
            # variance about the new mean: past spread, batch spread and the shift between them
            self.var.copy_(m * (self.var + (1 - m) * delta**2) + (1 - m) * batch_var)
        self.count.add_(1)

    def normalise(self, values: torch.Tensor) -> torch.Tensor:
        """(values - b) / sqrt(sigma^2 + eps), without a gradient through b or sigma."""
        mean, var = self.mean.to(values.dtype), self.var.to(values.dtype)
        return (values - mean) / torch.sqrt(var + self.eps)

    def advantage(
        self, values: torch.Tensor, rows: torch.Tensor, update: bool, reducer: Optional[Reducer] = None
    ) -> torch.Tensor:
        """``values`` centred and scaled by the moments of *earlier* batches, which then take in
        ``values[rows]`` when ``update`` (training). A batch's own values never enter its own
        baseline, which keeps REINFORCE unbiased; the very first batch, with no history, is
        normalised by its own moments. ``reducer``: as ``update``'s."""
        if int(self.count) == 0:
            first = RunningMoments(eps=self.eps).to(values.device, values.dtype)
            first.update(values[rows], reducer)
            advantage = first.normalise(values)
        else:
            advantage = self.normalise(values)
        if update:
            self.update(values[rows], reducer)
        return advantage

    def extra_repr(self) -> str:
        return f"momentum={self.momentum}, eps={self.eps}"


def leave_one_out_mean(
    values: torch.Tensor, mask: torch.Tensor, reducer: Optional[Reducer] = None
) -> torch.Tensor:
    """Per time step, the mean of ``values`` over the *other* sequences of the batch where
    ``mask`` is set: b_t^(i) = sum_{i' != i} m v / sum_{i' != i} m, 0 where no other sequence
    has step t. values, mask (B, T) -> (B, T), no gradient. A REINFORCE baseline per time step
    (TARDIS eq. 16's b_j) that leaves the estimator unbiased: b^(i) does not depend on
    sequence i's own actions. With a ``reducer``, the other sequences of the global batch."""
    values, mask = values.detach(), mask.to(values.dtype)
    masked = values * mask
    sums = torch.stack([masked.sum(0, keepdim=True), mask.sum(0, keepdim=True)])
    if reducer is not None:
        sums = reducer.sum(sums)
    total, count = sums[0] - masked, sums[1] - mask
    return torch.where(count > 0, total / count.clamp_min(1), torch.zeros_like(values))


def same_input_leave_one_out_mean(
    values: torch.Tensor, inputs: torch.Tensor, reducer: Optional[Reducer] = None
) -> torch.Tensor:
    """For each sequence, the mean of ``values`` over the *other* sequences of the batch with
    exactly the same input: values (B,), inputs (B, ...) -> (B,), no gradient. A REINFORCE
    baseline (several samples of one input baseline each other) that leaves the estimator
    unbiased and removes every difference between inputs from the advantage. Raises
    ValueError if some input appears only once. With a ``reducer``, the other sequences of the
    global batch (the other samples of an input may be in other slices)."""
    values, inputs = values.detach(), inputs.detach()
    rows = slice(0, values.shape[0])
    if reducer is not None:
        values, rows = reducer.gather(values)
        inputs, _ = reducer.gather(inputs)
    _, group = torch.unique(inputs.flatten(1), dim=0, return_inverse=True)
    count = torch.bincount(group)
    if bool((count < 2).any()):
        raise ValueError(
            "a same-input baseline needs every input at least twice in the batch "
            "(train.samples_per_input >= 2)"
        )
    total = torch.bincount(group, weights=values).to(values.dtype)
    return ((total[group] - values) / (count[group] - 1).to(values.dtype))[rows]


def discounted_returns(rewards: torch.Tensor, discount: float) -> torch.Tensor:
    """G_t = sum_{j >= t} discount^(j - t) R_j over the last (time) axis (TARDIS eq. 16).

    rewards (..., T) -> (..., T). One matrix product with the (T, T) upper-triangular
    matrix of powers, no loop; discount 0 gives R itself, 1 the undiscounted return-to-go.
    """
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")
    T = rewards.shape[-1]
    steps = torch.arange(T, device=rewards.device, dtype=rewards.dtype)
    lag = steps.view(T, 1) - steps.view(1, T)  # j - t at [j, t]
    powers = torch.where(
        lag >= 0,
        torch.as_tensor(discount, dtype=rewards.dtype, device=rewards.device) ** lag.clamp_min(0),
        torch.zeros((), dtype=rewards.dtype, device=rewards.device),
    )
    return rewards @ powers


def gumbel_noise(like: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """i.i.d. Gumbel(0, 1) samples g = -log(-log u), u ~ U(0, 1), shaped like ``like``."""
    # -log(-log u) = -log E with E = -log u ~ Exponential(1): three operations instead of six
    e = torch.empty(like.shape, dtype=like.dtype, device=like.device).exponential_(generator=generator)
    return -torch.log(e)


def straight_through(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Values of ``hard``, gradient of ``soft`` (Bengio et al. 2013): hard + soft - soft.detach()."""
    return soft + (hard - soft).detach()


def gumbel_softmax(
    logits: torch.Tensor,
    inverse_temperature: torch.Tensor | float = 1.0,
    hard: bool = True,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gumbel-softmax sample over the last axis (Jang et al. 2016; Maddison et al. 2016).

    y = softmax((logits + g) * inverse_temperature), g ~ Gumbel(0, 1) (``noise`` replaces
    the draw, e.g. zeros for a noise-free relaxation). ``inverse_temperature`` 1/tau is a
    number or a tensor broadcasting against logits[..., :1] (a learned 1/tau per row).
    With ``hard`` the result is the one-hot of argmax y with the gradient of y
    (straight-through); otherwise y itself. logits (..., N) -> (..., N).
    """
    _check_distribution(logits, "logits")
    g = gumbel_noise(logits) if noise is None else noise
    soft = torch.softmax((logits + g) * inverse_temperature, dim=-1)
    return straight_through(argmax_one_hot(soft), soft) if hard else soft


def gumbel_sigmoid(logits: torch.Tensor, temperature: float, noise: bool = True) -> torch.Tensor:
    """Gumbel-sigmoid (binary concrete) gate, elementwise: sigmoid((logits + l) / temperature)
    with logistic noise l = log u - log(1 - u), u ~ U(0, 1); ``noise=False`` drops l (the
    deterministic gate used at evaluation). Values in (0, 1), close to binary for small tau."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if noise:
        tiny = torch.finfo(logits.dtype).tiny
        u = torch.rand_like(logits).clamp(tiny, 1.0 - 1e-7)
        logits = logits + torch.log(u) - torch.log1p(-u)
    return torch.sigmoid(logits / temperature)
