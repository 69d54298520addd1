"""Tasks: sequence generators with their loss, metrics and text rendering.

    task = mannlab.tasks.make("copy", max_length=20)
    inputs, targets, mask = task.sample(batch_size=16, seed=0)

See base.Task for the batch layout and each task class for its time layout.
"""
from __future__ import annotations

from typing import Any

from mannlab.errors import ConfigError
from mannlab.tasks.algorithmic import (AssociativeRecallTask, BigramFlipTask, CopyTask, NGramsTask,
                                       OddFirstTask, PrioritySortTask, RepeatCopyTask, ReverseTask)
from mannlab.tasks.base import Task

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (
    CopyTask, RepeatCopyTask, AssociativeRecallTask, NGramsTask, PrioritySortTask,
    ReverseTask, BigramFlipTask, OddFirstTask)}


def names() -> list[str]:
    """The registered task names (hyphenated spellings like "repeat-copy" also work in ``make``)."""
    return list(TASKS)


def make(name: str, **params: Any) -> Task:
    """Build task ``name`` with ``params`` overriding its defaults.

    Raises ConfigError for an unknown name (listing the valid ones), an unknown
    parameter (listing the task's parameters) or an invalid value.
    """
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else None
    if key not in TASKS:
        raise ConfigError(f"unknown task {name!r}; valid names: {', '.join(TASKS)}")
    return TASKS[key](**params)


__all__ = ["Task", "make", "names", "TASKS", "CopyTask", "RepeatCopyTask", "AssociativeRecallTask",
           "NGramsTask", "PrioritySortTask", "ReverseTask", "BigramFlipTask", "OddFirstTask"]
