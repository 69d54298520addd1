"""A run config's task and model: the one place that turns names into objects.

It sits above tasks, models and wrappers (it uses all three) and below everything
that trains, evaluates or analyses a run.
"""

from __future__ import annotations

from typing import Any

from mannlab import tasks
from mannlab.config import RunConfig
from mannlab.errors import ConfigError
from mannlab.models.base import Model
from mannlab.wrappers import model_for_task


def build_run(config: RunConfig) -> tuple[Any, Model]:
    """(task, model) of ``config``; ConfigError on a bad name or argument."""
    task = build_task(config)
    return task, build_model(config, task)


def build_task(config: RunConfig) -> Any:
    """The task of ``config``; ConfigError on a bad name or argument."""
    if config.train.val_lengths == "max_length" and config.task not in tasks.TASKS:
        raise ConfigError(
            f"train.val_lengths = 'max_length' needs a generated task with a "
            f"length range ({', '.join(tasks.generated_names())}); {config.task!r} "
            f"validates on its held-out split"
        )
    return tasks.make(config.task, **config.task_args)


def build_model(config: RunConfig, task: Any) -> Model:
    """The model of ``config``, sized for ``task`` (built from the same config)."""
    return model_for_task(task, config.model, **config.model_args)
