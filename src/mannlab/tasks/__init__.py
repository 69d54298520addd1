"""Tasks: sequence generators with their loss, metrics and text rendering.

    task = mannlab.tasks.make("copy", max_length=20)
    inputs, targets, mask = task.sample(batch_size=16, seed=0)

See base.Task for the batch layout and each task class for its time layout. Every task
declares what it is (base.TaskTraits: ``kind``, ``batching``, ``input_kind``, ``loss_key``,
``splits``); the registry knows it without building the task::

    mannlab.tasks.entry("ptb-char").batching    # "streams"
"""

from __future__ import annotations

from typing import Any, Callable

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
from mannlab.tasks.base import Task, TaskTraits
from mannlab.tasks.charlm import CharLMTask
from mannlab.tasks.proposals import ProposalTask, SyntheticProposalTask
from mannlab.tasks.registry import ENTRIES, TaskEntry, entry, key
from mannlab.tasks.thumos_proposals import ThumosProposalTask


def _of_kind(kind: str) -> list[TaskEntry]:
    return [e for e in ENTRIES if e.kind == kind]


# The registry by kind, keyed like ``make`` ("proposals_synthetic" for "proposals-synthetic").
TASKS: dict[str, Callable[..., TaskTraits]] = {key(e.name) or "": e.build for e in _of_kind("generated")}
# Tasks over real data sets (tasks/dataset.py): they read files from their data_dir parameter.
DATA_TASKS: dict[str, Callable[..., TaskTraits]] = {key(e.name) or "": e.build for e in _of_kind("data")}
# Temporal action proposals (tasks/proposals.py: SST on windows of whole videos, evaluated by
# proposal recall).
PROPOSAL_TASKS: dict[str, Callable[..., TaskTraits]] = {
    key(e.name) or "": e.build for e in _of_kind("proposals")
}
# Character-level language modelling over a corpus (tasks/charlm.py), one task per corpus, trained
# on contiguous streams with truncated BPTT: registry key -> task name.
TEXT_TASKS: dict[str, str] = {key(e.name) or "": e.name for e in _of_kind("text")}


def names() -> list[str]:
    """Every task ``make`` builds: the generated ones (``generated_names()``; hyphenated
    spellings like "repeat-copy" also work), then those over real data sets
    (``data_names()``), the temporal action proposal tasks and the char-LM tasks."""
    return [e.name for e in ENTRIES]


def generated_names() -> list[str]:
    """The algorithmic tasks, generated from a seed with a length range (copy, ...)."""
    return [e.name for e in _of_kind("generated")]


def data_names() -> list[str]:
    """The tasks over real data sets (bAbI, MNIST, ...); ``make`` builds them too."""
    return [e.name for e in _of_kind("data")]


def proposal_names() -> list[str]:
    """The temporal action proposal tasks (proposals-synthetic, thumos14-proposals)."""
    return [e.name for e in _of_kind("proposals")]


def text_names() -> list[str]:
    """The character-level language modelling tasks (ptb-char, text8, enwik8-char)."""
    return [e.name for e in _of_kind("text")]


def batching(name: str) -> str:
    """How task ``name`` is trained, known without building it (a corpus may be large):
    "streams" (contiguous streams, truncated BPTT) or "samples" (independent batches).
    ConfigError for an unknown name."""
    return entry(name).batching


def make(name: str, **params: Any) -> TaskTraits:
    """Build task ``name`` with ``params`` overriding its defaults.

    Raises ConfigError for an unknown name (listing the valid ones), an unknown
    parameter (listing the task's parameters) or an invalid value.
    """
    return entry(name).build(**params)


__all__ = [
    "Task",
    "TaskTraits",
    "TaskEntry",
    "ENTRIES",
    "entry",
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
