"""Functions of the training step that models apply in ``begin_step`` (the trainer passes the
step; models never count steps themselves).

    inverse_sqrt(p0, t)                     p_t = p0 / sqrt(1 + t): the D-NTM's soft-to-discrete
                                            curriculum (section 4, eq. 14)
    inverse_temperature(t, every, maximum)  1/tau = min(1 + floor(t / every), maximum): the
                                            gumbel-softmax temperature of ARMIN appendix C
    bernoulli(p)                            pi ~ Bernoulli(p) from torch's RNG, a Python bool
"""

from __future__ import annotations

import math

import torch


def inverse_sqrt(p0: float, step: int) -> float:
    """p_t = p0 / sqrt(1 + t): starts at p0 at t = 0 and decays to 0 (D-NTM curriculum)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"p0 must be a probability in [0, 1], got {p0}")
    return p0 / math.sqrt(1 + step)


def inverse_temperature(step: int, every: int, maximum: float) -> float:
    """1/tau = min(1 + floor(step / every), maximum): starts at 1 and grows by 1 every
    ``every`` steps (an epoch, or 200 iterations on the algorithmic tasks) up to ``maximum``
    (n_mem - 1 in ARMIN, appendix C, with its text corrected: 1/τ starts at 1 and grows by 1)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be an integer >= 1, got {every!r}")
    if not maximum >= 1:
        raise ValueError(f"maximum must be >= 1, got {maximum}")
    return float(min(1 + step // every, maximum))


def bernoulli(p: float, generator: torch.Generator | None = None) -> bool:
    """One draw pi ~ Bernoulli(p) from torch's RNG (the trainer saves and restores its state,
    so a resumed run draws the same values)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    return bool(torch.rand((), generator=generator) < p)
