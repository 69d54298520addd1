"""Schedules driven by the training step: the models' own (curriculum, temperature) and
the learning rate's.

Models never count steps and never import this module (training sits above models): the
training loop calls ``start_minibatch(model, step)`` before each training minibatch, which
calls the model's declared hook ``begin_step(step, coin)``; the models with a schedule apply
it there (mannlab.nn.schedules has the formulas: the D-NTM curriculum's inverse_sqrt, the
gumbel temperature's inverse_temperature), drawing their coins with ``main_coin``.

    start_minibatch(model, t)    model.begin_step(t, main_coin)
    main_coin(p)                 pi ~ Bernoulli(p), rank 0's under data-parallel training
    step_decay(lr, t, milestones, factor)    lr * factor^(milestones <= t): the step decay of
                                 ARMIN C.2-C.3 (lr / 10 for the last epochs)
    epoch_plan(train, task)      train.epochs and lr_decay_epochs in steps, from the task's
                                 ``steps_per_epoch(batch_size)``
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mannlab.config import TrainConfig
from mannlab.errors import ConfigError
from mannlab.models.base import Model
from mannlab.nn.schedules import bernoulli, inverse_sqrt, inverse_temperature
from mannlab.training import distributed

__all__ = [
    "bernoulli",
    "epoch_plan",
    "inverse_sqrt",
    "inverse_temperature",
    "main_coin",
    "start_minibatch",
    "step_decay",
]


def main_coin(p: float) -> bool:
    """One draw pi ~ Bernoulli(p) for the global minibatch: rank 0's, under data-parallel
    training (every rank then takes the same branch)."""
    return distributed.from_main(bernoulli(p))


def start_minibatch(model: Model, step: int) -> None:
    """Set the per-minibatch switches of ``model`` for training step ``step`` (0-based):
    ``model.begin_step(step, main_coin)`` (a no-op for models without a schedule; the
    curriculum draws from torch's RNG only when it is on)."""
    model.begin_step(step, main_coin)


# Not torch.optim.lr_scheduler.MultiStepLR: the loop sets the rate from the step alone (a resume
# needs no scheduler state) and switches its base to train.lr_after_solve mid-run, which
# MultiStepLR's base_lrs, fixed when it is built, cannot follow.
def step_decay(lr: float, step: int, milestones: tuple[int, ...], factor: float) -> float:
    """The learning rate of training step ``step`` (0-based): ``lr`` times ``factor`` once for
    every milestone m <= step, i.e. the steps after m optimizer steps train at the lower rate
    (MultiStepLR's closed form)."""
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
