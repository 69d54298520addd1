"""The progress of a run: everything besides weights, optimizer and batch source that a
resume must restore. The trainer (loop.py) keeps it, checkpoints save it, and a batch
source's summary reads it."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    """Everything besides weights, optimizer and batch source that a resume must restore."""

    step: int = 0  # optimizer steps done
    elapsed: float = 0.0  # wall seconds spent training, over all sessions
    cpu: float = 0.0  # CPU seconds of this process spent training (all sessions):
    # on a shared machine the honest measure of cost
    best: float | None = None  # best validation value (saved as the source's best_field)
    best_step: int | None = None
    solved_at_step: int | None = None
    solved_at_seconds: float | None = None
    last_checkpoint_step: int | None = None
    metrics_rows: int | None = None  # rows of metrics.jsonl when the checkpoint was saved
    unlogged: list = field(default_factory=list)  # step losses not in a train row yet
    validated: Any = None  # the validation of this step, if it ran before the save
    initial_val: float | None = None  # the untrained model's validation value
    val_rises: int = 0  # validations in a row above diverge_factor * initial_val
    # each validation's value above the task's optimum after the run solved: did it stay
    # solved? (None: a checkpoint from before this was kept, see loop.py)
    after_solve: list | None = field(default_factory=list)

    def to_state(self, best_field: str) -> dict[str, Any]:
        state = dataclasses.asdict(self)
        state[best_field] = state.pop("best")
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any], best_field: str | None = None) -> "Progress":
        known = {f.name for f in dataclasses.fields(cls)} - {"best"}
        best = state.get(best_field) if best_field else None
        if best is not None and not math.isfinite(best):
            best = None  # a NaN best would never be beaten: no best checkpoint would follow
        values = {k: state[k] for k in known if k in state}
        values.setdefault("after_solve", None)  # a checkpoint saved before they were kept
        return cls(best=best, **values)
