"""The task registry: every task ``make`` builds, with what it declares (its kind, how it is
trained, what it feeds), known without building it (a data set or a corpus may be large).

The declarations are the task classes' own (``TaskTraits``); an entry only names them, so
the registry and a built task never disagree.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

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
from mannlab.tasks.base import TaskTraits
from mannlab.tasks.charlm import CHARLM_TASKS, CharLMTask
from mannlab.tasks.enwik8 import Enwik8Task
from mannlab.tasks.mnist import MnistTask
from mannlab.tasks.proposals import SyntheticProposalTask
from mannlab.tasks.snli import SnliTask
from mannlab.tasks.strokes import StrokesTask
from mannlab.tasks.thumos_proposals import ThumosProposalTask


@dataclass(frozen=True)
class TaskEntry:
    """One registered task: ``name`` (as ``names()`` lists it), ``build(**params)`` and the
    declarations of its class (see tasks/base.py: TASK_KINDS, BATCHINGS, INPUT_KINDS)."""

    name: str
    build: Callable[..., TaskTraits]
    kind: str
    batching: str
    input_kinds: tuple[str, ...]


def _entry(cls: type[TaskTraits]) -> TaskEntry:
    return TaskEntry(str(getattr(cls, "name")), cls, cls.kind, cls.batching, cls.input_kinds)


def _corpus_entry(name: str) -> TaskEntry:
    """A char-LM corpus: one task class, built with the corpus name."""
    cls = CharLMTask
    return TaskEntry(name, functools.partial(cls, name), cls.kind, cls.batching, cls.input_kinds)


# In the order names() lists them: generated, data sets, proposals, char-LM corpora.
ENTRIES: tuple[TaskEntry, ...] = (
    *(
        _entry(cls)
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
    ),
    *(_entry(cls) for cls in (BabiTask, MnistTask, StrokesTask, SnliTask, Enwik8Task)),
    *(_entry(cls) for cls in (SyntheticProposalTask, ThumosProposalTask)),
    *(_corpus_entry(name) for name in CHARLM_TASKS),
)


def key(name: Any) -> str | None:
    """The registry key of a task name: case and "-" / "_" do not matter ("repeat-copy")."""
    return name.strip().lower().replace("-", "_") if isinstance(name, str) else None


BY_KEY: dict[str, TaskEntry] = {key(e.name) or "": e for e in ENTRIES}


def entry(name: str) -> TaskEntry:
    """The registry entry of task ``name``; ConfigError (listing the valid names) if unknown."""
    found = BY_KEY.get(key(name) or "")
    if found is None:
        raise ConfigError(f"unknown task {name!r}; valid names: {', '.join(e.name for e in ENTRIES)}")
    return found
