"""The one training loop: sample, step, validate, checkpoint, resume.

Reproducibility rests on three rules:

- the training batch of step ``i`` is ``task.sample(batch_size, [seed, i])``, so the
  data position is just the step number;
- validation sets are fixed (seeds ``[seed, 10**9 + k, multiple]``) and validation
  runs under ``torch.random.fork_rng``, so it never moves the training RNG;
- ``checkpoints/last`` holds weights, optimizer state and the torch RNG state, so a
  resumed run takes exactly the steps the uninterrupted run would have taken.

Run directory layout: config.toml, metrics.jsonl, summary.json,
checkpoints/{last,best}/, figures/, tensorboard/ (optional).
"""
from __future__ import annotations

import json
import math
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

import mannlab
from mannlab.config import RunConfig, TrainConfig, default_run_dir, save_config
from mannlab.errors import ConfigError
from mannlab.tasks.dataset import count_group_errors
from mannlab.training.checkpoint import load_checkpoint, save_checkpoint
from mannlab.training.clock import SessionClock
from mannlab.training.metrics_log import (MetricsLog, check_tensorboard, read_metrics,
                                          truncate_metrics)
from mannlab.training.schedules import start_minibatch

VAL_SEED_OFFSET = 10**9   # keeps validation seeds apart from training steps [seed, i]
RUN_ARTIFACTS = ("config.toml", "metrics.jsonl", "summary.json", "checkpoints", "figures", "tensorboard")
# What must not change when a run is resumed (the rest, like steps or lr, may).
RESUME_INVARIANTS = ("model", "model_args", "task", "task_args", "seed")


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient became NaN or infinite; the weights were not updated."""


@dataclass
class Progress:
    """Everything besides weights and optimizer that a resume must restore."""
    step: int = 0                       # optimizer steps done
    elapsed: float = 0.0                # wall seconds spent training, over all sessions
    cpu: float = 0.0                    # CPU seconds of this process spent training (all sessions):
                                        # on a shared machine the honest measure of cost
    best_bce: float | None = None       # best validation loss (task.loss_key) at the training length
    best_step: int | None = None
    solved_at_step: int | None = None
    solved_at_seconds: float | None = None
    last_checkpoint_step: int | None = None


def train(config: RunConfig, resume: bool = False, force: bool = False) -> dict[str, Any]:
    """Train ``config`` into its run directory and return the summary (also in summary.json).

    ``resume`` continues from ``checkpoints/last``; ``force`` overwrites an existing run.
    """
    if config.run_dir is None:
        config = config.replace(run_dir=default_run_dir(config))
    run_dir = Path(config.run_dir)
    torch.manual_seed(config.seed)
    task, model = config.build()  # bad names or arguments fail here, before any file is touched
    config = config.replace(task_args=dict(task.params))  # record the resolved task parameters
    optimizer = make_optimizer(model, config.train)
    val_sets = validation_sets(task, config)  # a length the task cannot make fails here too
    if config.train.tensorboard:
        check_tensorboard()

    if resume:
        progress, _ = restore_last(run_dir, config, model, optimizer, Progress)
    else:
        prepare_run_dir(run_dir, force)
        progress = Progress()
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.toml")
    tensorboard_dir = run_dir / "tensorboard" if config.train.tensorboard else None
    threads = torch.get_num_threads()
    try:
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        with MetricsLog(run_dir / "metrics.jsonl", tensorboard_dir) as log:
            trainer = _Trainer(config, task, model, optimizer, progress, log, run_dir, val_sets)
            trainer.run()
            return trainer.finish()
    finally:
        torch.set_num_threads(threads)


def model_aux_loss(model: torch.nn.Module, trace: Any, step_nll: torch.Tensor,
                   score: Callable[[torch.Tensor], torch.Tensor],
                   outputs_per_step: int) -> torch.Tensor:
    """``model.aux_loss(trace, step_nll, outputs_per_step)``, ``outputs_per_step`` being what
    the task loss averages over per scored step (output bits for BCE, 1 for cross-entropy);
    models with their own auxiliary predictions (``aux_loss_scores``: TARDIS eq. 17) also
    get ``score``, logits -> per-step NLL on the targets."""
    extra = {"score": score} if getattr(model, "aux_loss_scores", False) else {}
    return model.aux_loss(trace, step_nll, outputs_per_step=outputs_per_step, **extra)


def make_optimizer(model: torch.nn.Module, train: TrainConfig) -> torch.optim.Optimizer:
    """RMSprop (with momentum, as in the NTM paper's implementations) or Adam."""
    if train.optimizer == "rmsprop":
        return torch.optim.RMSprop(model.parameters(), **_hyperparameters(train))
    return torch.optim.Adam(model.parameters(), **_hyperparameters(train))


def _hyperparameters(train: TrainConfig) -> dict[str, float]:
    common = {"lr": train.lr, "eps": train.eps, "weight_decay": train.weight_decay}
    if train.optimizer == "rmsprop":
        return {**common, "momentum": train.momentum, "alpha": train.alpha}
    return common


class _Trainer:
    """The state of one training session; `run` steps, `finish` writes the results."""

    def __init__(self, config, task, model, optimizer, progress, log, run_dir, val_sets):
        self.config, self.train_cfg = config, config.train
        self.task, self.model, self.optimizer = task, model, optimizer
        self.progress, self.log, self.run_dir = progress, log, run_dir
        self.checkpoints = run_dir / "checkpoints"
        self.log_every = max(1, self.train_cfg.val_every // 20)
        self.val_sets = val_sets
        self.loss_key = loss_key(task)  # "bce", or "ce" for categorical (data-set) tasks
        self.last_val: list[dict[str, Any]] | None = None
        self.last_val_step: int | None = None
        self._losses: list[tuple[float, float]] = []  # since the last train log line
        self._last_train_bce: float | None = None
        self.clock = SessionClock(progress.elapsed, progress.cpu)
        self.stopped = "steps"  # what ended the training: "steps", "solved" or "time"

    # ---------------------------------------------------------------- loop

    def run(self) -> None:
        cfg, progress = self.train_cfg, self.progress
        bar = tqdm(total=cfg.steps, initial=progress.step, disable=not cfg.progress, unit="step",
                   desc=f"{self.config.model}-{self.config.task}", dynamic_ncols=True)
        self.model.train()
        self._apply_lr()
        try:
            while (reason := self._stop_reason()) is None:
                loss, bce = self._train_step(progress.step)
                progress.step += 1
                self._losses.append((loss, bce))
                bar.update(1)
                step = progress.step
                if step % self.log_every == 0:
                    self._flush_train_log()
                    bar.set_postfix(self._postfix(), refresh=False)
                if step % cfg.val_every == 0:
                    self._validate_and_record()
                    bar.set_postfix(self._postfix(), refresh=False)
                if step % cfg.checkpoint_every == 0:
                    self._save("last")
            self.stopped = reason
        finally:
            bar.close()
        self._flush_train_log()
        if self.last_val_step != progress.step:
            self._validate_and_record()
        self._save("last")

    def _train_step(self, step: int) -> tuple[float, float]:
        cfg = self.train_cfg
        inputs, targets, mask = self.task.sample(cfg.batch_size // cfg.samples_per_input,
                                                 [self.config.seed, step])
        if cfg.samples_per_input > 1:   # each sequence K times in a row
            inputs, targets, mask = (t.repeat_interleave(cfg.samples_per_input, dim=0)
                                     for t in (inputs, targets, mask))
        model, task = self.model, self.task
        start_minibatch(model, step)  # per-minibatch switches, e.g. the D-NTM curriculum
        if getattr(model, "uses_aux_loss", False):
            logits, _, trace = model(inputs, return_trace=True)
            task_loss = task.loss(logits, targets, mask)
            # the per-step NLL is a reward signal for the model's estimator, not a path for gradients
            step_nll = task.step_nll(logits, targets, mask).detach()
            loss = task_loss + model_aux_loss(model, trace, step_nll,
                                              lambda out: task.step_nll(out, targets, mask),
                                              task.outputs_per_step)
        else:
            logits, _ = model(inputs)
            loss = task_loss = task.loss(logits, targets, mask)
        if not torch.isfinite(loss):
            self._fail(step, f"the loss is {loss.item()}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = self.train_cfg.clip_grad_norm or math.inf  # inf: measure the norm, never clip
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if not torch.isfinite(grad_norm):
            self._fail(step, f"the gradient norm is {grad_norm.item()}")
        self.optimizer.step()
        return loss.item(), task_loss.item()

    def _stop_reason(self) -> str | None:
        """Why training ends before the next step ("steps", "solved", "time"); None: go on."""
        cfg, progress = self.train_cfg, self.progress
        if progress.step >= cfg.steps:
            return "steps"
        solved_at = progress.solved_at_step
        if cfg.stop_after_solve is not None and solved_at is not None \
                and progress.step >= solved_at + cfg.stop_after_solve:
            return "solved"
        if self.clock.out_of_time(cfg.max_minutes, cfg.budget_clock):
            return "time"
        return None

    def _fail(self, step: int, what: str) -> None:
        self._flush_train_log()
        last = self.progress.last_checkpoint_step
        where = (f"the last good checkpoint is {self.checkpoints / 'last'} (step {last})"
                 if last is not None else "no checkpoint was saved yet")
        raise NonFiniteLossError(
            f"training stopped at step {step + 1} (batch seed [{self.config.seed}, {step}]): {what}; "
            f"the weights were not updated and {where}. Try a lower train.lr or "
            f"train.clip_grad_norm (now {self.train_cfg.clip_grad_norm}).")

    def _flush_train_log(self) -> None:
        if not self._losses:
            return
        n = len(self._losses)
        loss = sum(l for l, _ in self._losses) / n
        bce = sum(b for _, b in self._losses) / n
        self.log.log(self.progress.step, "train", {"loss": loss, self.loss_key: bce}, self.clock.wall())
        self._losses = []
        self._last_train_bce = bce

    def _postfix(self) -> dict[str, str]:
        out = {}
        if self.train_cfg.max_minutes:  # with a time budget the step total is only an upper bound
            out["min"] = self.clock.budget_text(self.train_cfg.max_minutes, self.train_cfg.budget_clock)
        if self._last_train_bce is not None:
            out["loss"] = f"{self._last_train_bce:.4f}"
        if self.last_val is not None:
            row = self.last_val[0]
            out[f"val_{self.loss_key}"] = f"{row[self.loss_key]:.4f}"
            if "mean_group_error" in row:  # data-set tasks with groups (bAbI tasks)
                out["val_err"] = f"{100 * row['mean_group_error']:.1f}%"
            if "failed_groups" in row:
                groups = sum(k.startswith("error/") for k in row)
                out["failed"] = f"{int(row['failed_groups'])}/{groups}"
        return out

    # ---------------------------------------------------------- validation

    def _validate_and_record(self) -> None:
        progress = self.progress
        rows = validate(self.model, self.task, self.val_sets)
        for row in rows:
            metrics = {k: v for k, v in row.items() if k not in ("multiple", "length")}
            self.log.log(progress.step, "val", metrics, self.clock.wall(),
                         length=row["length"], multiple=row["multiple"], cpu=round(self.clock.cpu(), 3))
        self.last_val, self.last_val_step = rows, progress.step
        bce = rows[0][self.loss_key]  # multiple 1 comes first
        if progress.best_bce is None or bce < progress.best_bce:
            progress.best_bce, progress.best_step = bce, progress.step
            self._save("best")
        # tasks with an irreducible loss (ngrams) report optimal_bce: solved means close to it
        excess = bce - rows[0].get("optimal_bce", 0.0)
        if progress.solved_at_step is None and excess < self.train_cfg.solve_bce:
            progress.solved_at_step, progress.solved_at_seconds = progress.step, self.clock.wall()
            self._apply_lr()

    def _apply_lr(self) -> None:
        """train.lr, or train.lr_after_solve once the run has solved (also after a resume)."""
        cfg = self.train_cfg
        solved = self.progress.solved_at_step is not None
        lr = cfg.lr_after_solve if (solved and cfg.lr_after_solve) else cfg.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # --------------------------------------------------------- checkpoints

    def _save(self, kind: str) -> None:
        progress = self.progress
        if kind == "last":
            progress.last_checkpoint_step = progress.step
        progress.elapsed, progress.cpu = self.clock.wall(), self.clock.cpu()
        meta = {
            "mannlab_version": mannlab.__version__, "kind": kind, "step": progress.step,
            "model": self.config.model, "task": self.config.task, "config": self.config.to_dict(),
            "val": self.last_val if self.last_val_step == progress.step else None,
        }
        train_state = {
            **progress.__dict__,
            "optimizer": self.optimizer.state_dict(),
            "torch_rng_state": torch.get_rng_state(),
        }
        save_checkpoint(self.checkpoints / kind, self.model, meta, train_state)

    # -------------------------------------------------------------- finish

    def finish(self) -> dict[str, Any]:
        """Write summary.json and the figures. The figures show the best checkpoint, the
        model the papers evaluate ("best parameters in terms of validation loss")."""
        progress, cfg = self.progress, self.train_cfg
        best_meta, _ = load_checkpoint(self.checkpoints / "best", self.model)
        summary = {
            "model": self.config.model, "task": self.config.task, "seed": self.config.seed,
            "run_dir": str(self.run_dir),
            "steps": progress.step, "configured_steps": cfg.steps, "stopped_by": self.stopped,
            "max_minutes": cfg.max_minutes, "budget_clock": cfg.budget_clock,
            "wall_seconds": round(self.clock.wall(), 3),
            "cpu_seconds": round(self.clock.cpu(), 3),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "solve_bce": cfg.solve_bce, "solved": progress.solved_at_step is not None,
            "solved_at_step": progress.solved_at_step,
            "solved_at_seconds": (None if progress.solved_at_seconds is None
                                  else round(progress.solved_at_seconds, 3)),
            "after_solve": self._after_solve(),
            "best_val": {"step": progress.best_step, "metric": self.loss_key,
                         self.loss_key: progress.best_bce, "rows": best_meta.get("val")},
            "final_val": self.last_val,
            "figures": self._figures(),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def _after_solve(self) -> dict[str, Any] | None:
        """Did a solved run stay solved? Validations at the training length after the solve."""
        solved_at = self.progress.solved_at_step
        if solved_at is None:
            return None
        bces = [row[self.loss_key] - row.get("optimal_bce", 0.0)
                for row in read_metrics(self.run_dir / "metrics.jsonl")
                if row.get("split") == "val" and row.get("multiple") == 1 and row["step"] > solved_at
                and self.loss_key in row]
        return {"validations": len(bces),
                "solved": sum(b < self.train_cfg.solve_bce for b in bces),
                "max_bce": max(bces, default=None)}

    def _figures(self) -> dict[str, str]:
        """Learning curve and memory access; a drawing failure warns but keeps the run."""
        figures_dir = self.run_dir / "figures"
        out = {}
        try:
            from mannlab import plot
            path = figures_dir / "learning_curve.png"
            plot.learning_curve(self.run_dir / "metrics.jsonl", path, metric=self.loss_key,
                                title=f"{self.config.model} on {self.config.task}",
                                threshold=self.train_cfg.solve_bce)
            out["learning_curve"] = str(path)
            path = figures_dir / "memory_access.png"
            if draw_memory_access(self.model, self.task, path, self.config.seed,
                                  title=f"{self.config.model} on {self.config.task}, "
                                        f"best checkpoint (step {self.progress.best_step})"):
                out["memory_access"] = str(path)
        except Exception as exc:  # noqa: BLE001 - figures are a convenience, the run is saved
            warnings.warn(f"could not draw the figures in {figures_dir}: {type(exc).__name__}: {exc}",
                          RuntimeWarning, stacklevel=2)
        return out


def validation_sets(task: Any, config: RunConfig) -> list[tuple[int, int, list]]:
    """Fixed (multiple, length, batches) sets; multiple 1 follows the training distribution."""
    cfg, seed = config.train, config.seed
    # data-set tasks (tasks/dataset.py) validate on their held-out split and have no lengths
    held_out = {"split": "valid"} if getattr(task, "splits", None) else None
    sets = []
    for multiple in [1] if held_out else sorted(cfg.val_length_multiples):
        at_max = multiple > 1 or cfg.val_lengths == "max_length"
        length = task.train_length * multiple if at_max else None
        batches = [task.sample(cfg.val_batch_size, [seed, VAL_SEED_OFFSET + k, multiple],
                               **(held_out or {"length": length}))
                   for k in range(cfg.val_batches)]
        if held_out and hasattr(task, "sample_groups"):  # per-group errors (bAbI: per task)
            batches = [(*batch, task.sample_groups(cfg.val_batch_size,
                                                    [seed, VAL_SEED_OFFSET + k, multiple], "valid"))
                       for k, batch in enumerate(batches)]
        sets.append((multiple, task.train_length * multiple, batches))
    return sets


def validate(model: torch.nn.Module, task: Any, val_sets: list[tuple[int, int, list]]
             ) -> list[dict[str, Any]]:
    """Mean task metrics per (multiple, length, batches) set, in eval mode without gradients."""
    was_training = model.training
    model.eval()
    rows = []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for multiple, length, batches in val_sets:
                rows.append({"multiple": multiple, "length": length,
                             **mean_metrics(model, task, batches)})
    finally:
        model.train(was_training)
    return rows


def mean_metrics(model: torch.nn.Module, task: Any, batches: list) -> dict[str, float]:
    """Task metrics averaged over equally sized batches. A batch may carry a fourth item, the
    group of each example (data-set tasks, ``validation_sets``): the task's ``group_metrics``
    (error per group, their mean, failed groups) are then added, pooled over the batches."""
    totals: dict[str, float] = {}
    counts: dict[int, list[float]] = {}
    for inputs, targets, mask, *groups in batches:
        logits = model(inputs)[0]
        for key, value in task.metrics(logits, targets, mask, inputs=inputs).items():
            totals[key] = totals.get(key, 0.0) + float(value)
        if groups:
            count_group_errors(logits, targets, mask, groups[0], counts)
    out = {key: value / len(batches) for key, value in totals.items()}
    if counts:
        out.update(task.group_metrics(counts))
    return out


def loss_key(task: Any) -> str:
    """The metrics key of ``task``'s loss: "bce" (bits), "ce" (categorical tasks)."""
    return getattr(task, "loss_key", "bce")


def draw_memory_access(model: torch.nn.Module, task: Any, path: Path, seed: int,
                       length: int | None = None, title: str | None = None) -> bool:
    """Plot one sequence of ``length`` (default: the training length); False if the model has no
    read/write weights to show."""
    from mannlab import plot

    inputs, targets, mask = task.sample(1, [seed, VAL_SEED_OFFSET - 1], length=length or task.train_length)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            logits, _, trace = model(inputs, return_trace=True)
    finally:
        model.train(was_training)
    if not (hasattr(trace, "read_weights") and hasattr(trace, "write_weights")):
        return False
    plot.memory_access(trace, inputs, targets, logits, mask, path=path, title=title)
    return True


# ------------------------------------------------------------- run directory

def prepare_run_dir(run_dir: Path, force: bool) -> None:
    """Refuse a directory that holds a run, unless ``force``: then delete only its artifacts."""
    existing = [name for name in RUN_ARTIFACTS if (run_dir / name).exists()]
    if not existing:
        return
    if not force:
        raise ConfigError(
            f"run directory {run_dir} already holds a run ({', '.join(existing)}); "
            "pass --resume to continue it, --force to overwrite it, or choose another --run-dir")
    for name in existing:  # only what a run writes: never delete a user's other files
        target = run_dir / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()


def restore_last(run_dir: Path, config: RunConfig, model, optimizer, progress_type: type,
                 train_invariants: tuple[str, ...] = ("optimizer",)) -> tuple[Any, dict[str, Any]]:
    """Load checkpoints/last into model and optimizer after checking that the config may
    resume it (RESUME_INVARIANTS and ``train_invariants`` unchanged); restore torch's RNG,
    cut metrics.jsonl back to its step. Returns (progress_type from the saved state, that
    state) for trainers that keep more (the TBPTT trainer's carried state)."""
    last = run_dir / "checkpoints" / "last"
    meta, state = load_checkpoint(last)  # weights only after the config check, for a clearer error
    saved = meta.get("config", {})
    current = json.loads(json.dumps(config.to_dict()))  # compare as stored: tuples become lists
    differ = [key for key in RESUME_INVARIANTS if _section(saved, key) != _section(current, key)]
    differ += [f"train.{key}" for key in train_invariants
               if saved.get("train", {}).get(key) != current["train"][key]]
    if differ:
        raise ConfigError(
            f"cannot resume {run_dir}: {', '.join(differ)} differ from the saved run "
            f"(see {run_dir / 'config.toml'}); start a new run with another --run-dir instead")
    load_checkpoint(last, model)
    optimizer.load_state_dict(state["optimizer"])
    for group in optimizer.param_groups:  # a changed lr etc. in the config takes effect
        group.update(_hyperparameters(config.train))
    torch.set_rng_state(state["torch_rng_state"])
    fields = progress_type.__dataclass_fields__
    progress = progress_type(**{k: state[k] for k in fields if k in state})
    truncate_metrics(run_dir / "metrics.jsonl", progress.step)
    return progress, state


def _section(config_dict: dict[str, Any], key: str) -> Any:
    """RunConfig field ``key`` read from its TOML-shaped dict."""
    if key in ("model", "task"):
        return config_dict.get(key, {}).get("name")
    if key in ("model_args", "task_args"):
        return {k: v for k, v in config_dict.get(key[:-5], {}).items() if k != "name"}
    return config_dict.get(key)
