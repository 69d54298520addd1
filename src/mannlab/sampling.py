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

Everything works on any leading shape (batch, time, heads, ...); the last axis
of a distribution is the category axis (memory slots). Nothing here loops.
"""
from __future__ import annotations

import torch
from torch import nn


def _check_distribution(probs: torch.Tensor, name: str = "probs") -> None:
    if not isinstance(probs, torch.Tensor) or probs.dim() < 1 or probs.shape[-1] < 1:
        raise ValueError(f"{name} must be a tensor (..., N) with N >= 1 categories, "
                         f"got {getattr(probs, 'shape', type(probs).__name__)}")
    if not probs.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {probs.dtype}")


def sample_one_hot(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One-hot samples w~ with w~_k = I(k = j), j ~ Categorical(probs), for every leading index.

    probs (..., N), non-negative, each row summing to 1 -> (..., N) of 0/1 in probs' dtype,
    without a gradient (sampling is not differentiable; use ``log_prob`` for the estimator).
    """
    _check_distribution(probs)
    flat = probs.detach().reshape(-1, probs.shape[-1])
    index = torch.multinomial(flat, 1, generator=generator)               # (B', 1)
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
        raise ValueError(f"one_hot and probs must have the same shape, got "
                         f"{tuple(one_hot.shape)} and {tuple(probs.shape)}")
    return torch.log((one_hot * probs).sum(-1))


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """H(p) = -sum_j p_j log p_j (nats), with 0 log 0 = 0: probs (..., N) -> (...)."""
    _check_distribution(probs)
    return -torch.special.xlogy(probs, probs).sum(-1)


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
    def update(self, values: torch.Tensor) -> None:
        """Fold the batch ``values`` (any shape, at least one element) into b and sigma^2."""
        if values.numel() == 0:
            raise ValueError("RunningMoments.update needs at least one value")
        values = values.detach().to(self.mean.dtype)
        batch_mean = values.mean()
        batch_var = values.var(unbiased=False) if values.numel() > 1 else torch.zeros_like(batch_mean)
        if int(self.count) == 0:
            self.mean.copy_(batch_mean)
            self.var.copy_(batch_var)
        else:
            m = self.momentum
            delta = batch_mean - self.mean
            self.mean.add_((1 - m) * delta)
            # variance about the new mean: past spread, batch spread and the shift between them
            self.var.copy_(m * (self.var + (1 - m) * delta ** 2) + (1 - m) * batch_var)
        self.count.add_(1)

    def normalise(self, values: torch.Tensor) -> torch.Tensor:
        """(values - b) / sqrt(sigma^2 + eps), without a gradient through b or sigma."""
        mean, var = self.mean.to(values.dtype), self.var.to(values.dtype)
        return (values - mean) / torch.sqrt(var + self.eps)

    def extra_repr(self) -> str:
        return f"momentum={self.momentum}, eps={self.eps}"
