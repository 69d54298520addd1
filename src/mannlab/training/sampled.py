"""Batch source of independent sampled batches (generated and data-set tasks).

- the training batch of step ``i`` is ``task.sample(batch_size, [seed, i])``, so the data
  position is just the step number;
- validation sets are fixed (seeds ``[seed, 10**9 + k, multiple]``) and validation runs
  under ``torch.random.fork_rng``, so it never moves the training RNG;
- under data-parallel training every rank samples the same global batch and trains on its
  slice of the rows (distributed.shard), so the data do not depend on the number of ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mannlab.config import RunConfig
from mannlab.evaluation import loss_key, validate
from mannlab.models.base import Model
from mannlab.rundir import read_metrics
from mannlab.training import distributed
from mannlab.training.progress import Progress
from mannlab.training.schedules import start_minibatch
from mannlab.training.source import Finished, Summary, Validation
from mannlab.training.update import sequence_loss

VAL_SEED_OFFSET = 10**9  # keeps validation seeds apart from training steps [seed, i]


class SampledBatches:
    """Independent batches ``task.sample(batch_size, [seed, step])``; validation over lengths
    (multiples of the training length) or the held-out split of a data-set task."""

    unit = "step"
    best_field = "best_bce"  # the name of the best value in train_state.pt
    train_invariants: tuple[str, ...] = ("optimizer",)  # train.* keys a resume must keep
    solves = True

    def __init__(self, config: RunConfig, task: Any, model: Model):
        self.config, self.cfg, self.task = config, config.train, task
        self.loss_key = loss_key(task)  # "bce", or "ce" for categorical (data-set) tasks
        self.val_sets = validation_sets(task, config)  # a length the task cannot make fails here

    def restore(self, state: dict[str, Any], model: Model) -> None:
        """Nothing to restore: the batch of a step is a function of the step."""

    def batch_name(self, step: int) -> str:
        return f" (batch seed [{self.config.seed}, {step}])"

    def losses(self, model: Model, step: int, run: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss to minimise, task loss) of training step ``step``; ``run(fn, *args)`` calls
        ``fn(model, *args)`` (through DDP under torchrun, distributed.Runner)."""
        cfg, task = self.cfg, self.task
        inputs, targets, mask = task.sample(cfg.batch_size // cfg.samples_per_input, [self.config.seed, step])
        if cfg.samples_per_input > 1:  # each sequence K times in a row
            inputs, targets, mask = (
                t.repeat_interleave(cfg.samples_per_input, dim=0) for t in (inputs, targets, mask)
            )
        scored = mask.sum(dtype=torch.float32) if distributed.active() else None  # the global batch's
        inputs, targets, mask = distributed.shard((inputs, targets, mask), cfg.batch_size)
        start_minibatch(model, step)  # per-minibatch switches, e.g. the D-NTM curriculum
        if run is None:
            return sequence_loss(model, task, inputs, targets, mask, scored)
        return run(sequence_loss, task, inputs, targets, mask, scored)

    def train_row(
        self, losses: list[tuple[float, float]], step: int
    ) -> tuple[dict[str, float], dict[str, Any]]:
        n = len(losses)
        return {"loss": sum(loss for loss, _ in losses) / n, self.loss_key: sum(t for _, t in losses) / n}, {}

    def validate(self, model: Model) -> Validation:
        rows = validate(model, self.task, self.val_sets, reads=self.cfg.val_reads)
        logged = [
            (
                {k: v for k, v in row.items() if k not in ("multiple", "length")},
                {"length": row["length"], "multiple": row["multiple"]},
            )
            for row in rows
        ]
        value = rows[0][self.loss_key]  # multiple 1 comes first
        # tasks with an irreducible loss (ngrams) report optimal_bce: solved means close to it
        return Validation(logged, value, value - rows[0].get("optimal_bce", 0.0), rows)

    def postfix(self, step: int, train: dict[str, float] | None, val: Any) -> dict[str, str]:
        out = {}
        if train is not None:
            out["loss"] = f"{train[self.loss_key]:.4f}"
        if val is not None:
            row = val[0]
            out[f"val_{self.loss_key}"] = f"{row[self.loss_key]:.4f}"
            if "mean_group_error" in row:  # data-set tasks with groups (bAbI tasks)
                out["val_err"] = f"{100 * row['mean_group_error']:.1f}%"
            if "failed_groups" in row:
                groups = sum(k.startswith("error/") for k in row)
                out["failed"] = f"{int(row['failed_groups'])}/{groups}"
        return out

    def checkpoint_meta(self, step: int, val: Any) -> dict[str, Any]:
        return {"val": val}

    def extra_state(self) -> dict[str, Any]:
        return {}

    def summary(self, model: Model, run: Finished) -> Summary:
        """The summary.json fields of a sampled-batch run after the common ones."""
        progress, cfg = run.progress, self.cfg
        return Summary(
            [],
            {
                "solve_bce": cfg.solve_bce,
                "solved": progress.solved_at_step is not None,
                "solved_at_step": progress.solved_at_step,
                "solved_at_seconds": (
                    None if progress.solved_at_seconds is None else round(progress.solved_at_seconds, 3)
                ),
                "after_solve": self._after_solve(progress),
                "best_val": {
                    "step": progress.best_step,
                    "metric": self.loss_key,
                    self.loss_key: progress.best,
                    "rows": run.best_meta.get("val"),
                },
                "final_val": run.last_val,
            },
        )

    def _after_solve(self, progress: Progress) -> dict[str, Any] | None:
        """Did a solved run stay solved? Validations at the training length after the solve."""
        if progress.solved_at_step is None:
            return None
        excess = progress.after_solve or []
        return {
            "validations": len(excess),
            "solved": sum(b < self.cfg.solve_bce for b in excess),
            "max_bce": max(excess, default=None),
        }

    def logged_after_solve(self, metrics: Path, solved_at: int) -> list[float]:
        """The validations after the solve as ``metrics`` logged them (for a checkpoint saved
        before the progress kept them)."""
        return [
            row[self.loss_key] - row.get("optimal_bce", 0.0)
            for row in read_metrics(metrics)
            if row.get("split") == "val"
            and row.get("multiple") == 1
            and row["step"] > solved_at
            and self.loss_key in row
        ]


def validation_sets(task: Any, config: RunConfig) -> list[tuple[int, int, list]]:
    """Fixed (multiple, length, batches) sets; multiple 1 follows the training distribution."""
    cfg, seed = config.train, config.seed
    # data-set tasks (tasks/dataset.py) validate on their held-out split and have no lengths
    held_out: dict[str, Any] | None = {"split": "valid"} if task.splits else None
    sets = []
    for multiple in [1] if held_out else sorted(cfg.val_length_multiples):
        at_max = multiple > 1 or cfg.val_lengths == "max_length"
        length = task.train_length * multiple if at_max else None
        batches = [
            task.sample(
                cfg.val_batch_size, [seed, VAL_SEED_OFFSET + k, multiple], **(held_out or {"length": length})
            )
            for k in range(cfg.val_batches)
        ]
        if task.kind == "data":  # per-group errors (bAbI: per task)
            batches = [
                (
                    *batch,
                    task.sample_groups(cfg.val_batch_size, [seed, VAL_SEED_OFFSET + k, multiple], "valid"),
                )
                for k, batch in enumerate(batches)
            ]
        sets.append((multiple, task.train_length * multiple, batches))
    return sets
