"""Schedules driven by the training step (curricula, later temperatures).

Models never count steps and never import this module (training sits above
models): the training loop calls ``start_minibatch(model, step)`` before each
training minibatch, which sets the model's per-minibatch switches from the step.

    inverse_sqrt(p0, t)          p_t = p0 / sqrt(1 + t)      (D-NTM curriculum, section 4;
                                 t = step // model.curriculum_every, default every minibatch)
    bernoulli(p, generator)      pi ~ Bernoulli(p), a Python bool
    start_minibatch(model, t)    soft-to-discrete curriculum: for a model with
                                 ``curriculum_p0 > 0``, sets ``model.soft_minibatch = pi``,
                                 pi ~ Bernoulli(p_t) (eq. 14: pi = 1 uses the soft weights);
                                 gumbel-softmax temperature: for a model with
                                 ``temperature_schedule = (every, maximum)`` (not None), sets
                                 ``model.inverse_temperature`` (ARMIN appendix C)
    inverse_temperature(t, every, maximum)   1/tau = min(1 + floor(t / every), maximum)
    step_decay(lr, t, milestones, factor)    lr * factor^(milestones <= t): the step decay of
                                 ARMIN C.2-C.3 (lr / 10 for the last epochs)
    epoch_plan(train, task)      train.epochs and lr_decay_epochs in steps, from the task's
                                 ``steps_per_epoch(batch_size)``
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from mannlab.config import TrainConfig
from mannlab.errors import ConfigError
from mannlab.training import distributed


def inverse_sqrt(p0: float, step: int) -> float:
    """p_t = p0 / sqrt(1 + t): starts at p0 at t = 0 and decays to 0 (D-NTM curriculum)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"p0 must be a probability in [0, 1], got {p0}")
    return p0 / math.sqrt(1 + step)


def bernoulli(p: float, generator: torch.Generator | None = None) -> bool:
    """One draw pi ~ Bernoulli(p) from torch's RNG (the loop saves and restores its state,
    so a resumed run draws the same values)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    return bool(torch.rand((), generator=generator) < p)


def start_minibatch(model: torch.nn.Module, step: int) -> None:
    """Set the per-minibatch switches of ``model`` for training step ``step`` (0-based).

    A model with a soft-to-discrete curriculum exposes ``curriculum_p0`` (0 turns it
    off) and reads the boolean attribute ``soft_minibatch`` in its forward pass; other
    models are left untouched. Draws from torch's RNG only when the curriculum is on.
    """
    p0 = getattr(model, "curriculum_p0", 0.0)
    if p0:
        every = getattr(model, "curriculum_every", 1)
        # one coin for the global minibatch: rank 0's, under data-parallel training
        model.soft_minibatch = distributed.from_main(bernoulli(inverse_sqrt(p0, step // every)))
    schedule = getattr(model, "temperature_schedule", None)
    if schedule is not None:
        model.inverse_temperature = inverse_temperature(step, *schedule)


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


def step_decay(lr: float, step: int, milestones: tuple[int, ...], factor: float) -> float:
    """The learning rate of training step ``step`` (0-based): ``lr`` times ``factor`` once for
    every milestone m <= step, i.e. the steps after m optimizer steps train at the lower rate."""
    return lr * factor ** sum(step >= m for m in milestones)


def epoch_plan(train: TrainConfig, task: Any) -> tuple[TrainConfig, tuple[int, ...]]:
    """(train with ``steps`` capped at ``train.epochs`` epochs, the lr milestones in steps).

    An epoch is what the task says it is (``task.steps_per_epoch(batch_size)``: for the
    proposal tasks, as many windows as tile the training videos once). Without
    ``train.epochs`` and ``train.lr_decay_epochs`` the task is not asked. ConfigError for
    a task without epochs."""
    milestones = tuple(sorted(set(train.lr_decay_steps)))
    if not train.epochs and not train.lr_decay_epochs:
        return train, milestones
    steps = task.steps_per_epoch(train.batch_size)
    if steps is None:
        raise ConfigError(
            f"train.epochs and train.lr_decay_epochs need a task that defines an epoch (the "
            f"proposal tasks); {task.name!r} does not: give train.steps and train.lr_decay_steps "
            f"instead"
        )
    steps = int(steps)
    if train.epochs:
        train = dataclasses.replace(train, steps=min(train.steps, train.epochs * steps))
    return train, tuple(sorted(set(milestones) | {e * steps for e in train.lr_decay_epochs}))
