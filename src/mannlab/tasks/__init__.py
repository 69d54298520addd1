"""Tasks: sequence generators with their loss, metrics and text rendering.

    task = mannlab.tasks.make("copy", max_length=20)
    inputs, targets, mask = task.sample(batch_size=16, seed=0)

See base.Task for the batch layout and each task class for its time layout.
"""
from __future__ import annotations

from typing import Any

from mannlab.errors import ConfigError
from mannlab.tasks.algorithmic import (AssociativeRecallTask, BigramFlipTask, CopyTask, NGramsTask,
                                       OddFirstTask, PrioritySortColumnsTask, PrioritySortTask,
                                       RepeatCopyTask, ReverseTask)
from mannlab.tasks.babi import BabiTask
from mannlab.tasks.base import Task
from mannlab.tasks.enwik8 import Enwik8Task
from mannlab.tasks.mnist import MnistTask
from mannlab.tasks.snli import SnliTask
from mannlab.tasks.strokes import StrokesTask

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (
    CopyTask, RepeatCopyTask, AssociativeRecallTask, NGramsTask, PrioritySortTask,
    ReverseTask, BigramFlipTask, OddFirstTask, PrioritySortColumnsTask)}
# Tasks over real data sets (tasks/dataset.py): they read files from their data_dir parameter.
DATA_TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (
    BabiTask, MnistTask, StrokesTask, SnliTask, Enwik8Task)}


def names() -> list[str]:
    """The registered generated task names (hyphenated spellings like "repeat-copy" also work
    in ``make``); ``data_names()`` lists the tasks over real data sets."""
    return list(TASKS)


def data_names() -> list[str]:
    """The tasks over real data sets (bAbI, MNIST, ...); ``make`` builds them too."""
    return list(DATA_TASKS)


def make(name: str, **params: Any) -> Task:
    """Build task ``name`` with ``params`` overriding its defaults.

    Raises ConfigError for an unknown name (listing the valid ones), an unknown
    parameter (listing the task's parameters) or an invalid value.
    """
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else None
    registry = {**TASKS, **DATA_TASKS}
    if key not in registry:
        raise ConfigError(f"unknown task {name!r}; valid names: {', '.join(registry)}")
    return registry[key](**params)


__all__ = ["Task", "make", "names", "data_names", "TASKS", "DATA_TASKS", "CopyTask", "RepeatCopyTask", "AssociativeRecallTask",
           "NGramsTask", "PrioritySortTask", "PrioritySortColumnsTask", "ReverseTask", "BigramFlipTask",
           "OddFirstTask"]
