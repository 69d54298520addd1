"""Tasks: sequence generators with their loss, metrics and text rendering.

    task = mannlab.tasks.make("copy", max_length=20)
    inputs, targets, mask = task.sample(batch_size=16, seed=0)

See base.Task for the batch layout and each task class for its time layout.
"""

from __future__ import annotations

from typing import Any

from mannlab.errors import ConfigError
from mannlab.tasks.algorithmic import (
    AssociativeRecallTask,
    BigramFlipTask,
    CopyTask,
    NGramsTask,
    OddFirstTask,
    PrioritySortColumnsTask,
    PrioritySortTask,
    RepeatCopyTask,
    ReverseTask,
)
from mannlab.tasks.babi import BabiTask
from mannlab.tasks.base import Task
from mannlab.tasks.charlm import CHARLM_TASKS, CharLMTask
from mannlab.tasks.enwik8 import Enwik8Task
from mannlab.tasks.mnist import MnistTask
from mannlab.tasks.proposals import ProposalTask, SyntheticProposalTask
from mannlab.tasks.snli import SnliTask
from mannlab.tasks.strokes import StrokesTask
from mannlab.tasks.thumos_proposals import ThumosProposalTask

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (
        CopyTask,
        RepeatCopyTask,
        AssociativeRecallTask,
        NGramsTask,
        PrioritySortTask,
        ReverseTask,
        BigramFlipTask,
        OddFirstTask,
        PrioritySortColumnsTask,
    )
}
# Tasks over real data sets (tasks/dataset.py): they read files from their data_dir parameter.
DATA_TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (BabiTask, MnistTask, StrokesTask, SnliTask, Enwik8Task)
}
# Temporal action proposals (tasks/proposals.py: SST on windows of whole videos, evaluated by
# proposal recall), keyed like the others ("proposals-synthetic" works in ``make``).
PROPOSAL_TASKS: dict[str, type[Task]] = {
    cls.name.replace("-", "_"): cls for cls in (SyntheticProposalTask, ThumosProposalTask)
}
# Character-level language modelling over a corpus (tasks/charlm.py), one task per corpus;
# trained on contiguous streams with truncated BPTT (``batching = "streams"``).
TEXT_TASKS: dict[str, str] = {name.replace("-", "_"): name for name in CHARLM_TASKS}


def names() -> list[str]:
    """Every task ``make`` builds: the generated ones (``generated_names()``; hyphenated
    spellings like "repeat-copy" also work), then those over real data sets
    (``data_names()``), the temporal action proposal tasks and the char-LM tasks."""
    return [*TASKS, *DATA_TASKS, *proposal_names(), *text_names()]


def generated_names() -> list[str]:
    """The algorithmic tasks, generated from a seed with a length range (copy, ...)."""
    return list(TASKS)


def data_names() -> list[str]:
    """The tasks over real data sets (bAbI, MNIST, ...); ``make`` builds them too."""
    return list(DATA_TASKS)


def proposal_names() -> list[str]:
    """The temporal action proposal tasks (proposals-synthetic, thumos14-proposals)."""
    return [cls.name for cls in PROPOSAL_TASKS.values()]


def text_names() -> list[str]:
    """The character-level language modelling tasks (ptb-char, text8, enwik8-char)."""
    return list(TEXT_TASKS.values())


def batching(name: str) -> str:
    """How task ``name`` is trained, known without building it (a corpus may be large):
    "streams" (contiguous streams, truncated BPTT) or "samples" (independent batches)."""
    return "streams" if _key(name) in TEXT_TASKS else "samples"


def _key(name: Any) -> str | None:
    return name.strip().lower().replace("-", "_") if isinstance(name, str) else None


def make(name: str, **params: Any) -> Task:
    """Build task ``name`` with ``params`` overriding its defaults.

    Raises ConfigError for an unknown name (listing the valid ones), an unknown
    parameter (listing the task's parameters) or an invalid value.
    """
    key = _key(name)
    if key in TEXT_TASKS:
        return CharLMTask(TEXT_TASKS[key], **params)
    registry = {**TASKS, **DATA_TASKS, **PROPOSAL_TASKS}
    if key not in registry:
        raise ConfigError(f"unknown task {name!r}; valid names: {', '.join(names())}")
    return registry[key](**params)


__all__ = [
    "Task",
    "make",
    "names",
    "generated_names",
    "data_names",
    "text_names",
    "proposal_names",
    "batching",
    "TASKS",
    "DATA_TASKS",
    "TEXT_TASKS",
    "PROPOSAL_TASKS",
    "ProposalTask",
    "SyntheticProposalTask",
    "ThumosProposalTask",
    "CharLMTask",
    "CopyTask",
    "RepeatCopyTask",
    "AssociativeRecallTask",
    "NGramsTask",
    "PrioritySortTask",
    "PrioritySortColumnsTask",
    "ReverseTask",
    "BigramFlipTask",
    "OddFirstTask",
]
