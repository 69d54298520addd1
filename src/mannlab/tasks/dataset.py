"""Tasks over a fixed data set: examples come from a split, not from a generator.

A data-set task is a ``CategoricalTask`` (one correct class per scored step) whose
``sample`` draws uniformly random examples of a split::

    inputs, targets, mask = task.sample(32, seed, split="train")   # or "valid", "test"

Training batches come from "train"; the training loop validates on "valid" (it sees
``task.splits``) at the one length there is. ``length`` is accepted for the loop's
interface and ignored: a data set has no size knob. ``evaluate_split`` runs a model
over a whole split, in order, and reports the error per group (bAbI: per task), their mean
and (``fail_threshold``) the failed groups; during training the loop adds the same group
metrics to each validation row (``sample_groups``, ``group_metrics``).

A subclass loads its data in ``__init__`` (after ``super().__init__``), sets
``input_size``, ``output_size``, ``train_length`` (a typical sequence length) and the
channel names, and implements ``split_size(split)`` and ``encode(split, indices, rng)``
(one ``Example`` per index); ``groups`` gives each example's group (default 0).

Files are looked for in the ``data_dir`` parameter (see mannlab.data.download) and
downloaded only when the task is built with ``download=True`` (``--download``): as in
torchvision, a missing data set is otherwise an error that says how to get it. ``download``
says how the files are got, not what is trained, so it is not one of ``params`` (it is not
saved in a run's config, and a resume need not repeat it).
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

    kind: ClassVar[str] = "data"
    splits: ClassVar[tuple[str, ...]] = ("train", "valid", "test")
    length_name: ClassVar[str] = "length (ignored: a data set has fixed sequences)"
    #: a group whose error exceeds this fraction counts as failed (bAbI: 0.05), None: not counted
    fail_threshold: ClassVar[float | None] = None

    @abstractmethod
    def split_size(self, split: str) -> int:
        """Number of examples in ``split``."""

    @abstractmethod
    def encode(self, split: str, indices: np.ndarray, rng: np.random.Generator) -> list[Example]:
        """The examples at ``indices`` of ``split`` as (inputs, targets, mask) numpy arrays."""

    def __init__(self, download: bool = False, **params: Any) -> None:
        self.download = check_download(download)
        super().__init__(**params)

    def groups(self, split: str, indices: np.ndarray) -> np.ndarray:
        """The group (e.g. bAbI task number) of each example; all 0 by default."""
        return np.zeros(len(indices), np.int64)

    def group_name(self, group: int) -> str:
        """A label for ``group`` in result tables."""
        return str(group)

    def group_key(self, group: int) -> str:
        """A short name for ``group`` in metric keys (``error/<key>``); no spaces."""
        return str(group)

    def sample_groups(
        self, batch_size: int, seed: int | Sequence[int] | np.random.Generator, split: str = "train"
    ) -> np.ndarray:
        """The group of each example ``sample(batch_size, seed, split=split)`` draws (the same
        draw: ``sample`` takes its indices first from the generator of ``seed``)."""
        self._check_split(split)
        indices = as_generator(seed).integers(self.split_size(split), size=int(batch_size))
        return self.groups(split, indices)

    def group_metrics(self, counts: dict[int, list[float]]) -> dict[str, float]:
        """Metrics from per-group counts (group -> [wrong, scored, examples], see
        ``count_group_errors``): ``error/<group_key>`` for each group, ``mean_group_error`` (the
        unweighted mean over groups, the papers' "mean error") and, for tasks with a
        ``fail_threshold``, ``failed_groups`` (how many groups have an error above it).
        Empty for a task without groups (every example in group 0)."""
        if not counts or (set(counts) == {0} and type(self).groups is DatasetTask.groups):
            return {}
        errors = {g: w / max(s, 1.0) for g, (w, s, _) in sorted(counts.items())}
        out = {f"error/{self.group_key(g)}": e for g, e in errors.items()}
        out["mean_group_error"] = float(np.mean(list(errors.values())))
        if self.fail_threshold is not None:
            out["failed_groups"] = float(sum(e > self.fail_threshold for e in errors.values()))
        return out

    def _check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ConfigError(
                f"unknown split {split!r} for task '{self.name}'; valid: {', '.join(self.splits)}"
            )
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

    def sample(
        self,
        batch_size: int,
        seed: int | Sequence[int] | np.random.Generator,
        length: int | None = None,
        split: str = "train",
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` examples of ``split`` drawn uniformly (with replacement) with ``seed``."""
        check_int({"batch_size": batch_size}, "batch_size")
        self._check_split(split)
        rng = as_generator(seed)
        indices = rng.integers(self.split_size(split), size=int(batch_size))
        return self._pad(self.encode(split, indices, rng))

    def ordered_batches(
        self, split: str, batch_size: int, limit: int | None = None
    ) -> Iterator[tuple[np.ndarray, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
        """(indices, batch) over the first ``limit`` (default all) examples of ``split`` in order;
        randomness in ``encode`` (if any) uses a fixed seed, so this is deterministic."""
        self._check_split(split)
        total = self.split_size(split) if limit is None else min(limit, self.split_size(split))
        rng = np.random.default_rng(0)
        for start in range(0, total, batch_size):
            indices = np.arange(start, min(start + batch_size, total))
            yield indices, self._pad(self.encode(split, indices, rng))


def check_download(download: Any) -> bool:
    """``download`` if it is a bool; ConfigError otherwise (a string "false" is not false)."""
    if not isinstance(download, bool):
        raise ConfigError(f"task.download must be true or false, got {download!r}")
    return download


def count_group_errors(
    logits: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    groups: Sequence[int] | np.ndarray,
    counts: dict[int, list[float]],
) -> None:
    """Add each example's wrong and scored steps to ``counts[group] = [wrong, scored, examples]``."""
    m = mask > 0
    wrong = ((logits.argmax(-1) != targets.argmax(-1)) & m).sum(1).tolist()
    steps = m.sum(1).tolist()
    for group, w, s in zip(groups, wrong, steps):
        acc = counts.setdefault(int(group), [0.0, 0.0, 0])
        acc[0] += w
        acc[1] += s
        acc[2] += 1


def evaluate_split(
    model: torch.nn.Module,
    task: DatasetTask,
    split: str = "test",
    batch_size: int = 100,
    limit: int | None = None,
) -> dict[str, Any]:
    """Run ``model`` over ``split`` (first ``limit`` examples): ``ce`` (cross-entropy per scored
    step), ``error`` (fraction of scored steps wrong), ``examples``, ``per_group`` (for each
    group name its error and example count), ``mean_group_error`` (unweighted mean over
    groups) and, for tasks with a ``fail_threshold`` (bAbI: 5%), ``failed_groups`` and
    ``fail_threshold``. Eval mode, no gradients."""
    was_training = model.training
    model.eval()
    counts: dict[int, list[float]] = {}
    ce_sum = scored = wrong_sum = 0.0
    examples = 0
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for indices, (inputs, targets, mask) in task.ordered_batches(split, batch_size, limit):
                logits = model(inputs)[0]
                m = mask > 0
                ce_sum += float(task.step_nll(logits, targets, mask).sum())
                scored += float(m.sum())
                wrong_sum += float(((logits.argmax(-1) != targets.argmax(-1)) & m).sum())
                examples += len(indices)
                count_group_errors(logits, targets, mask, task.groups(split, indices), counts)
    finally:
        model.train(was_training)
    per_group = {
        task.group_name(g): {"error": w / max(s, 1.0), "examples": n}
        for g, (w, s, n) in sorted(counts.items())
    }
    errors = [r["error"] for r in per_group.values()]
    out = {
        "split": split,
        "examples": examples,
        "ce": ce_sum / max(scored, 1.0),
        "error": wrong_sum / max(scored, 1.0),
        "per_group": per_group,
        "mean_group_error": float(np.mean(errors)) if errors else None,
    }
    if task.fail_threshold is not None:
        out["fail_threshold"] = task.fail_threshold
        out["failed_groups"] = sum(e > task.fail_threshold for e in errors)
    return out
