"""The one training loop: run directory, resume, checkpoints, NaN guard, metrics log, time
budget, progress bar and figures, around a batch source (source.py) that says what a step
trains on: ``SampledBatches`` (sampled.py) or ``StreamSegments`` (tbptt.py, char-LM).

Exact resume: ``checkpoints/last`` holds weights, optimizer state, the torch RNG state and
what the batch source keeps (the carried state of TBPTT), and the data position is the step
number, so a resumed run takes exactly the steps the uninterrupted run would have taken.

Run directory layout: config.toml, metrics.jsonl, summary.json,
checkpoints/{last,best}/, figures/, tensorboard/ (optional).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import mannlab
from mannlab.building import build_run
from mannlab.config import RunConfig, default_run_dir, save_config
from mannlab.rundir import MetricsLog, load_checkpoint, save_checkpoint, truncate_metrics
from mannlab.rundir.metrics_log import check_tensorboard
from mannlab.training.bar import WarmupBar
from mannlab.training.clock import SessionClock
from mannlab.training.device import (OnDevice, autocast, check_precision, grad_scaler, on_device,
                                     resolve_device)
from mannlab.training.figures import draw_run_figures
from mannlab.training.optimizer import make_optimizer
from mannlab.training.run_dir import prepare_run_dir, restore_last
from mannlab.training.sampled import SampledBatches
from mannlab.training.source import BatchSource
from mannlab.training.tbptt import StreamSegments
from mannlab.training.update import NonFiniteLossError, apply_update


@dataclass
class Progress:
    """Everything besides weights, optimizer and batch source that a resume must restore."""
    step: int = 0                       # optimizer steps done
    elapsed: float = 0.0                # wall seconds spent training, over all sessions
    cpu: float = 0.0                    # CPU seconds of this process spent training (all sessions):
                                        # on a shared machine the honest measure of cost
    best: float | None = None           # best validation value (saved as the source's best_field)
    best_step: int | None = None
    solved_at_step: int | None = None
    solved_at_seconds: float | None = None
    last_checkpoint_step: int | None = None

    def to_state(self, best_field: str) -> dict[str, Any]:
        state = dataclasses.asdict(self)
        state[best_field] = state.pop("best")
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any], best_field: str) -> "Progress":
        known = {f.name for f in dataclasses.fields(cls)} - {"best"}
        return cls(best=state.get(best_field), **{k: state[k] for k in known if k in state})


def batch_source(config: RunConfig, task: Any, model: torch.nn.Module) -> BatchSource:
    """Contiguous streams with carried state for the tasks that declare them, else samples."""
    if getattr(task, "batching", "samples") == "streams":
        return StreamSegments(config, task, model)
    return SampledBatches(config, task, model)


def train(config: RunConfig, resume: bool = False, force: bool = False) -> dict[str, Any]:
    """Train ``config`` into its run directory and return the summary (also in summary.json).

    ``resume`` continues from ``checkpoints/last``; ``force`` overwrites an existing run.
    """
    if config.run_dir is None:
        config = config.replace(run_dir=default_run_dir(config))
    run_dir = Path(config.run_dir)
    torch.manual_seed(config.seed)
    task, model = build_run(config)  # bad names or arguments fail here, before any file is touched
    device = resolve_device(config.train.device)
    check_precision(config.train.precision, device)
    model.to(device)
    task = on_device(task, device, config.train.precision)
    config = config.replace(task_args=dict(task.params))  # record the resolved task parameters
    optimizer = make_optimizer(model, config.train)
    source = batch_source(config, task, model)
    if config.train.tensorboard:
        check_tensorboard()
    if resume:
        state = restore_last(run_dir, config, model, optimizer, source.train_invariants)
        progress = Progress.from_state(state, source.best_field)
        source.restore(state, model)
        truncate_metrics(run_dir / "metrics.jsonl", progress.step)
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
            trainer = _Trainer(config, task, model, optimizer, source, progress, log, run_dir)
            trainer.run()
            return trainer.finish()
    finally:
        torch.set_num_threads(threads)


class _Trainer:
    """The state of one training session; `run` steps, `finish` writes the results."""

    def __init__(self, config, task, model, optimizer, source, progress, log, run_dir):
        self.config, self.train_cfg = config, config.train
        self.task, self.model, self.optimizer, self.source = task, model, optimizer, source
        self.progress, self.log, self.run_dir = progress, log, run_dir
        self.checkpoints = run_dir / "checkpoints"
        self.log_every = max(1, self.train_cfg.val_every // 20)
        self.last_val: Any = None
        self.last_val_step: int | None = None
        self._losses: list[tuple[float, float]] = []  # since the last train log line
        self._last_train: dict[str, float] | None = None
        self.clock = SessionClock(progress.elapsed, progress.cpu)
        self.stopped = "steps"  # what ended the training: "steps", "solved" or "time"
        self.device = next(model.parameters()).device
        self.scaler = grad_scaler(self.train_cfg.precision, self.device)

    # ---------------------------------------------------------------- loop

    def run(self) -> None:
        cfg, progress = self.train_cfg, self.progress
        bar = WarmupBar(total=cfg.steps, initial=progress.step, disable=not cfg.progress,
                   unit=self.source.unit, desc=f"{self.config.model}-{self.config.task}",
                   dynamic_ncols=True)
        self.model.train()
        self._apply_lr()
        try:
            while (reason := self._stop_reason()) is None:
                self._losses.append(self._train_step(progress.step))
                progress.step += 1
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
        with autocast(self.train_cfg.precision, self.device):
            loss, task_loss = self.source.losses(self.model, step)
        try:
            apply_update(self.model, self.optimizer, loss, self.train_cfg.clip_grad_norm, self.scaler)
        except NonFiniteLossError as exc:
            self._fail(step, str(exc))
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
            f"training stopped at step {step + 1}{self.source.batch_name(step)}: {what}; "
            f"the weights were not updated and {where}. Try a lower train.lr or "
            f"train.clip_grad_norm (now {self.train_cfg.clip_grad_norm}).")

    def _flush_train_log(self) -> None:
        if not self._losses:
            return
        metrics, extra = self.source.train_row(self._losses, self.progress.step)
        self.log.log(self.progress.step, "train", metrics, self.clock.wall(), **extra)
        self._losses = []
        self._last_train = metrics

    def _postfix(self) -> dict[str, str]:
        out = {}
        if self.train_cfg.max_minutes:  # with a time budget the step total is only an upper bound
            out["min"] = self.clock.budget_text(self.train_cfg.max_minutes, self.train_cfg.budget_clock)
        out.update(self.source.postfix(self.progress.step, self._last_train, self.last_val))
        return out

    # ---------------------------------------------------------- validation

    def _validate_and_record(self) -> None:
        progress = self.progress
        result = self.source.validate(self.model)
        for metrics, extra in result.rows:
            self.log.log(progress.step, "val", metrics, self.clock.wall(), **extra,
                         cpu=round(self.clock.cpu(), 3))
        self.last_val, self.last_val_step = result.record, progress.step
        if progress.best is None or result.value < progress.best:
            progress.best, progress.best_step = result.value, progress.step
            self._save("best")
        if self.source.solves and progress.solved_at_step is None \
                and result.excess < self.train_cfg.solve_bce:
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
        val = self.last_val if self.last_val_step == progress.step else None
        meta = {
            "mannlab_version": mannlab.__version__, "kind": kind, "step": progress.step,
            "model": self.config.model, "task": self.config.task, "config": self.config.to_dict(),
            **self.source.checkpoint_meta(progress.step, val),
        }
        train_state = {
            **progress.to_state(self.source.best_field),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng_state": torch.get_rng_state(),
            **self.source.extra_state(),
        }
        save_checkpoint(self.checkpoints / kind, self.model, meta, train_state)

    # -------------------------------------------------------------- finish

    def finish(self) -> dict[str, Any]:
        """Write summary.json and the figures, both of the best checkpoint (the model the
        papers evaluate: "best parameters in terms of validation loss")."""
        progress, cfg = self.progress, self.train_cfg
        wall, cpu = self.clock.wall(), self.clock.cpu()   # training and validation only
        best_meta, _ = load_checkpoint(self.checkpoints / "best", self.model)
        summary = {
            "model": self.config.model, "task": self.config.task, "seed": self.config.seed,
            "run_dir": str(self.run_dir),
            "steps": progress.step, "configured_steps": cfg.steps, "stopped_by": self.stopped,
            "max_minutes": cfg.max_minutes, "budget_clock": cfg.budget_clock,
            "wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            **self.source.summary(self, best_meta),
        }
        summary["figures"] = self._figures()
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def _figures(self) -> dict[str, str]:
        task = self.task.task if isinstance(self.task, OnDevice) else self.task  # figures: CPU
        return draw_run_figures(self.run_dir, self.config, task, self.model.cpu(),
                                self.progress.best_step)
