"""A run config made ready to train, once: its task, its model initialised from the config's
seed, and the device this process trains on, with the process group open under torchrun.

Whoever first needs the objects builds them (the CLI, to fail on a bad name before it says
anything; ``train_seeds``, once per seed) and hands them to ``train``, which builds nothing
again. The model's weights are a function of ``config.seed`` alone: the task is built with
torch's random state set aside, so a task shared by several seeds, or built before the
seed is set, leaves every seed's model exactly as a run of that seed on its own builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mannlab.building import build_model, build_task
from mannlab.config import RunConfig, check_threads
from mannlab.models.base import Model
from mannlab.training import distributed
from mannlab.training.device import check_precision


@dataclass(frozen=True)
class PreparedRun:
    """What ``train`` trains: ``config``'s task and model, and the device of this process."""

    config: RunConfig
    task: Any
    model: Model
    device: torch.device


def prepare_run(config: RunConfig, task: Any = None) -> PreparedRun:
    """``config``'s task (``task``: one already built from the same task section, shared by
    the seeds of a recipe) and its model, built after ``torch.manual_seed(config.seed)``;
    the device ``train.device`` names for that model, the process group open under torchrun.
    ConfigError on a bad name, argument, thread count, device or precision."""
    check_threads(config.train.threads)
    torch.manual_seed(config.seed)
    if task is None:
        with torch.random.fork_rng(devices=[]):  # the model's weights depend on the seed alone
            task = build_task(config)
    model = build_model(config, task)
    device = distributed.start(config.train.device, model, config.train.batch_size)
    check_precision(config.train.precision, device)
    return PreparedRun(config, task, model, device)
