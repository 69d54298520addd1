"""Tasks over a fixed data set: examples come from a split, not from a generator.

A data-set task is a ``CategoricalTask`` (one correct class per scored step) whose
``sample`` draws uniformly random examples of a split::

    inputs, targets, mask = task.sample(32, seed, split="train")   # or "valid", "test"

Training batches come from "train"; the training loop validates on "valid" (it sees
``task.splits``) at the one length there is. ``length`` is accepted for the loop's
interface and ignored: a data set has no size knob. ``evaluate_split`` runs a model
over a whole split, in order, and reports the error per group (bAbI: per task).

A subclass loads its data in ``__init__`` (after ``super().__init__``), sets
``input_size``, ``output_size``, ``train_length`` (a typical sequence length) and the
channel names, and implements ``split_size(split)`` and ``encode(split, indices, rng)``
(one ``Example`` per index); ``groups`` gives each example's group (default 0).
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np
import torch

from mannlab.errors import ConfigError
from mannlab.tasks.base import CategoricalTask, Example, as_generator, check_int


class DatasetTask(CategoricalTask):
    """Base class of the tasks over real data sets (see the module docstring)."""

    splits: ClassVar[tuple[str, ...]] = ("train", "valid", "test")
    length_name: ClassVar[str] = "length (ignored: a data set has fixed sequences)"

    @abstractmethod
    def split_size(self, split: str) -> int:
        """Number of examples in ``split``."""

    @abstractmethod
    def encode(self, split: str, indices: np.ndarray, rng: np.random.Generator) -> list[Example]:
        """The examples at ``indices`` of ``split`` as (inputs, targets, mask) numpy arrays."""

    def groups(self, split: str, indices: np.ndarray) -> np.ndarray:
        """The group (e.g. bAbI task number) of each example; all 0 by default."""
        return np.zeros(len(indices), np.int64)

    def group_name(self, group: int) -> str:
        """A label for ``group`` in result tables."""
        return str(group)

    def _check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ConfigError(f"unknown split {split!r} for task '{self.name}'; valid: {', '.join(self.splits)}")
        if self.split_size(split) == 0:
            raise ConfigError(f"split {split!r} of task '{self.name}' is empty")

    def _sequence(self, rng: np.random.Generator, length: int | None) -> Example:
        # Task's per-sequence hook; data-set tasks sample whole batches through encode.
        raise TypeError("data-set tasks encode whole batches (see encode)")

    def _validate(self, params: dict[str, Any]) -> None:
        """Subclasses check their own parameters; data_dir is a path or None."""
        data_dir = params.get("data_dir")
        if data_dir is not None and not isinstance(data_dir, str):
            raise ConfigError(f"data_dir must be a path (string) or absent, got {data_dir!r}")

    def sample(self, batch_size: int, seed: int | Sequence[int] | np.random.Generator,
               length: int | None = None, split: str = "train"
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` examples of ``split`` drawn uniformly (with replacement) with ``seed``."""
        check_int({"batch_size": batch_size}, "batch_size")
        self._check_split(split)
        rng = as_generator(seed)
        indices = rng.integers(self.split_size(split), size=int(batch_size))
        return self._pad(self.encode(split, indices, rng))

    def ordered_batches(self, split: str, batch_size: int, limit: int | None = None
                        ) -> Iterator[tuple[np.ndarray, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
        """(indices, batch) over the first ``limit`` (default all) examples of ``split`` in order;
        randomness in ``encode`` (if any) uses a fixed seed, so this is deterministic."""
        self._check_split(split)
        total = self.split_size(split) if limit is None else min(limit, self.split_size(split))
        rng = np.random.default_rng(0)
        for start in range(0, total, batch_size):
            indices = np.arange(start, min(start + batch_size, total))
            yield indices, self._pad(self.encode(split, indices, rng))


def evaluate_split(model: torch.nn.Module, task: DatasetTask, split: str = "test",
                   batch_size: int = 100, limit: int | None = None) -> dict[str, Any]:
    """Run ``model`` over ``split`` (first ``limit`` examples): ``bce`` (cross-entropy per scored
    step), ``error`` (fraction of scored steps wrong), ``examples``, and ``per_group``: for each
    group name its error and example count. Eval mode, no gradients."""
    was_training = model.training
    model.eval()
    wrong_by_group: dict[int, list[float]] = {}
    ce_sum = scored = wrong_sum = 0.0
    examples = 0
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for indices, (inputs, targets, mask) in task.ordered_batches(split, batch_size, limit):
                logits = model(inputs)[0]
                m = mask > 0
                wrong = ((logits.argmax(-1) != targets.argmax(-1)) & m).sum(1).float()
                steps = m.sum(1).float()
                ce_sum += float(task.step_nll(logits, targets, mask).sum())
                scored += float(steps.sum())
                wrong_sum += float(wrong.sum())
                examples += len(indices)
                for group, w, s in zip(task.groups(split, indices), wrong.tolist(), steps.tolist()):
                    acc = wrong_by_group.setdefault(int(group), [0.0, 0.0, 0])
                    acc[0] += w
                    acc[1] += s
                    acc[2] += 1
    finally:
        model.train(was_training)
    per_group = {task.group_name(g): {"error": w / max(s, 1.0), "examples": n}
                 for g, (w, s, n) in sorted(wrong_by_group.items())}
    return {"split": split, "examples": examples, "bce": ce_sum / max(scored, 1.0),
            "error": wrong_sum / max(scored, 1.0), "per_group": per_group}


def format_results(result: dict[str, Any]) -> str:
    """A plain-text table: one row per group, then the mean over groups and the overall error."""
    rows = [(name, f"{100 * r['error']:.1f}", str(r["examples"])) for name, r in result["per_group"].items()]
    if len(rows) > 1:
        mean = np.mean([r["error"] for r in result["per_group"].values()])
        rows.append(("mean over groups", f"{100 * mean:.1f}", ""))
    rows.append(("all scored steps", f"{100 * result['error']:.1f}", str(result["examples"])))
    width = max(len(r[0]) for r in rows + [("group", "", "")])
    lines = [f"{'group':<{width}}  error %  examples", "-" * (width + 19)]
    lines += [f"{a:<{width}}  {b:>7}  {c:>8}" for a, b, c in rows]
    return "\n".join(lines)
