"""What the trainer (loop.py) asks of a batch source; sampled.py and tbptt.py are the two.

The trainer owns everything a run has whatever its data: the run directory, resume,
checkpoints, the NaN guard, the metrics log, the time budget, the progress bar and the
figures. A batch source owns what depends on how the data arrive: the loss of a step, the
validation, and its own fields of the log, the checkpoint meta and the summary.

Under data-parallel training (distributed.py) ``losses`` trains on this rank's slice of
the global batch and calls the model's loss through ``run`` (DDP); ``validate`` runs on
rank 0 only; ``extra_state`` is called on every rank and returns the global batch's state.

At the end ``summary`` gets the best model and what the trainer kept (``Finished``), and
gives back rows for the trainer to log and its fields of summary.json: it neither logs nor
reads the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch

from mannlab.models.base import Model
from mannlab.training.progress import Progress


class Validation(NamedTuple):
    """What a batch source's validation gives the trainer."""

    rows: list[tuple[dict[str, Any], dict[str, Any]]]  # (metrics, extra fields) per log row
    value: float  # lower is better: picks the best checkpoint
    excess: float | None  # value above the task's optimum, against train.solve_bce
    record: Any  # kept as the last validation (checkpoint meta, summary)


class Finished(NamedTuple):
    """What a batch source's summary reads of a finished training."""

    progress: Progress
    last_val: Any  # the last validation's record
    last_val_step: int | None
    best_meta: dict[str, Any]  # the best checkpoint's meta ({} without one)


class Summary(NamedTuple):
    """A batch source's end of a run: rows for the metrics log and fields of summary.json."""

    rows: list[tuple[str, dict[str, Any], dict[str, Any]]]  # (split, metrics, extra fields)
    fields: dict[str, Any]


class BatchSource(Protocol):
    unit: str  # progress bar unit ("step", "seg")
    best_field: str  # name of the best validation value in train_state.pt
    train_invariants: tuple[str, ...]  # train.* keys a resume must keep
    solves: bool  # whether validation can mark the run solved

    def restore(self, state: dict[str, Any], model: Model) -> None: ...
    def batch_name(self, step: int) -> str: ...
    def losses(self, model: Model, step: int, run: Any = None) -> tuple[torch.Tensor, torch.Tensor]: ...
    def train_row(
        self, losses: list[tuple[float, float]], step: int
    ) -> tuple[dict[str, float], dict[str, Any]]: ...
    def validate(self, model: Model) -> Validation: ...
    def postfix(self, step: int, train: dict[str, float] | None, val: Any) -> dict[str, str]: ...
    def checkpoint_meta(self, step: int, val: Any) -> dict[str, Any]: ...
    def extra_state(self) -> dict[str, Any]: ...
    def logged_after_solve(self, metrics: Path, solved_at: int) -> list[float]: ...
    def summary(self, model: Model, run: Finished) -> Summary: ...
