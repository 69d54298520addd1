"""The one training loop: run directory, resume, checkpoints, NaN guard, metrics log, time
budget, progress bar and figures, around a batch source (source.py) that says what a step
trains on: ``SampledBatches`` (sampled.py) or ``StreamSegments`` (tbptt.py, char-LM).

Exact resume: ``checkpoints/last`` holds weights, optimizer state, the torch RNG states (the
CPU's, and every CUDA device's where CUDA is available) and what the batch source keeps (the
carried state of TBPTT), and the data position is the step number, so a resumed run takes
exactly the steps the uninterrupted run would have taken. On CUDA that holds where CUDA's
kernels are themselves deterministic: some are not (atomic adds in the backward of index_add,
scatter and embedding gathers; cuBLAS without CUBLAS_WORKSPACE_CONFIG=:4096:8; cuDNN's
benchmark mode), and two runs, resumed or not, then differ in the last bits. Set
``torch.use_deterministic_algorithms(True)`` to have torch refuse such kernels.

A checkpoint also records how many rows metrics.jsonl had when it was saved; a resume cuts
the log back to them, so nothing logged after the checkpoint (a validation, the test row of
a finished run) is logged twice. Resuming a finished run does nothing.

Divergence: a validation value that is not finite, or above ``train.diverge_factor`` times
the untrained model's for ``train.diverge_patience`` validations in a row, stops the run with
DivergedError (as does a non-finite loss, NonFiniteLossError) after writing summary.json with
``stopped_by = "diverged"``.

Run directory layout: config.toml, metrics.jsonl, summary.json,
checkpoints/{last,best}/, figures/, and what train.logger adds (rundir/loggers.py).

Data-parallel training (torchrun, distributed.py): every rank runs this loop on its slice
of the global batch; rank 0 alone reads and writes the run directory and hands what it
read (the resumed state) and decided (validation, time budget) to the others, so all
ranks take the same steps and stop at the same one.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import torch

import mannlab
from mannlab.config import RunConfig, TrainConfig, default_run_dir
from mannlab.errors import CheckpointError, DataError
from mannlab.models.base import Model
from mannlab.reporting.run_figures import draw_run_figures
from mannlab.rundir import (
    MetricsLog,
    load_checkpoint,
    save_checkpoint,
    save_config,
    truncate_metrics,
    write_atomic,
)
from mannlab.rundir.files import read_json
from mannlab.rundir.loggers import check_loggers, open_loggers
from mannlab.rundir.metrics_log import NullLog
from mannlab.training import distributed
from mannlab.training.bar import WarmupBar
from mannlab.training.clock import SessionClock
from mannlab.training.device import (
    OnDevice,
    autocast,
    grad_scaler,
    on_device,
    say_auto_choice,
)
from mannlab.training.interrupts import interrupts_as_keyboard_interrupt
from mannlab.training.optimizer import make_optimizer
from mannlab.training.prepared import PreparedRun, prepare_run
from mannlab.training.progress import Progress
from mannlab.training.run_dir import (
    RunDirLock,
    check_run_dir,
    cuda_rng_states,
    prepare_run_dir,
    restore_last,
    restore_ranks,
    stopped_before_checkpoint,
)
from mannlab.training.run_size import check_run_memory
from mannlab.training.sampled import SampledBatches
from mannlab.training.schedules import epoch_plan, step_decay
from mannlab.training.source import BatchSource, Finished
from mannlab.training.tbptt import StreamSegments
from mannlab.training.update import DivergedError, NonFiniteLossError, apply_update


def stop_reason(
    cfg: TrainConfig, progress: Progress, clock: SessionClock, out_of_time: bool | None = None
) -> str | None:
    """Why training ends before the next step ("steps", "solved", "time"); None: go on.
    ``out_of_time`` replaces the clock's answer (data-parallel ranks share rank 0's)."""
    if progress.step >= cfg.steps:
        return "steps"
    solved_at = progress.solved_at_step
    if (
        cfg.stop_after_solve is not None
        and solved_at is not None
        and progress.step >= solved_at + cfg.stop_after_solve
    ):
        return "solved"
    if out_of_time is None:
        out_of_time = clock.out_of_time(cfg.max_minutes, cfg.budget_clock)
    if out_of_time:
        return "time"
    return None


def finished_run(config: RunConfig) -> dict[str, Any] | None:
    """The summary of the run in ``config.run_dir`` if resuming it would train no further
    step (finished, and the config's budget not raised); else None."""
    run_dir = Path(config.run_dir or default_run_dir(config))
    try:
        summary = read_json(run_dir / "summary.json")
        _, state = load_checkpoint(run_dir / "checkpoints" / "last")
    except (OSError, DataError, CheckpointError):
        return None  # no finished run here; the resume itself reports what is wrong
    progress = Progress.from_state(state)
    if (
        not isinstance(summary, dict)
        or summary.get("steps") != progress.step
        or summary.get("stopped_by") == "diverged"
    ):
        return None
    clock = SessionClock(progress.elapsed, progress.cpu)
    return summary if stop_reason(config.train, progress, clock) is not None else None


def batch_source(config: RunConfig, task: Any, model: Model) -> BatchSource:
    """Contiguous streams with carried state for the tasks that declare them, else samples."""
    if task.batching == "streams":
        return StreamSegments(config, task, model)
    return SampledBatches(config, task, model)


def train(
    config: RunConfig, resume: bool = False, force: bool = False, prepared: PreparedRun | None = None
) -> dict[str, Any]:
    """Train ``config`` into its run directory and return the summary (also in summary.json).

    ``resume`` continues from ``checkpoints/last``; ``force`` overwrites an existing run;
    ``prepared``: ``prepare_run(config)``'s task, model and device, when the caller has built
    them already (else they are built here). Under torchrun (WORLD_SIZE > 1) every process
    calls this; they train one run together (distributed.py) and each returns rank 0's
    summary. A run directory has one writer: a second training of the same directory fails
    while the first runs (RunDirLock).
    """
    run_dir = config.run_dir if config.run_dir is not None else default_run_dir(config)
    config = config.replace(run_dir=run_dir)
    if prepared is not None and prepared.config.replace(run_dir=None) != config.replace(run_dir=None):
        raise ValueError(
            "train(config, prepared=...) needs prepare_run(config) of the same config: the model's "
            f"weights follow its seed and sections (prepared for {prepared.config.model} on "
            f"{prepared.config.task}, seed {prepared.config.seed}; training {config.model} on "
            f"{config.task}, seed {config.seed})"
        )
    # Ctrl-C inside a compiled kernel is a KeyboardInterrupt too; the last checkpoint resumes
    with RunDirLock(Path(run_dir)) as lock, interrupts_as_keyboard_interrupt():
        # bad names or arguments fail here, before any file is touched
        return _train(config, resume, force, lock, prepared or prepare_run(config))


def _train(
    config: RunConfig, resume: bool, force: bool, lock: RunDirLock, prepared: PreparedRun
) -> dict[str, Any]:
    assert config.run_dir is not None  # train() set it
    run_dir = Path(config.run_dir)
    task, model, device = prepared.task, prepared.model, prepared.device
    batch = config.train.batch_size
    if config.train.device == "auto":
        distributed.main_only(lambda: say_auto_choice(model, batch))
    resume = distributed.from_main(resume)  # rank 0's files decide
    distributed.main_only(lambda: check_run_dir(run_dir))
    distributed.check_batch(config.train.batch_size)
    model.to(device)
    check_run_memory(config, task, model)  # a batch or length no memory holds fails before sampling
    task = on_device(task, device, config.train.precision)
    # record the resolved task parameters, and train.steps capped at train.epochs
    plan, lr_milestones = epoch_plan(config.train, task)
    config = config.replace(task_args=dict(task.params), train=plan)
    optimizer = make_optimizer(model, config.train)
    source = batch_source(config, task, model)
    check_loggers(config.train)
    distributed.main_only(lock.acquire)  # before the run's files are read or written
    if resume and distributed.main_only(lambda: stopped_before_checkpoint(run_dir)):
        distributed.say(f"{run_dir} stopped before its first checkpoint: nothing to resume, starting over")
        resume, force = False, True
    if resume:
        state, done = distributed.main_only(
            lambda: (
                restore_last(run_dir, config, model, optimizer, source.train_invariants),
                finished_run(config),
            )
        )
        if done is not None:
            return done
        restore_ranks(state, config, optimizer)  # ranks > 0: optimizer and RNG (weights: DDP)
        progress = Progress.from_state(state, source.best_field)
        source.restore(state, model)
        distributed.main_only(
            lambda: truncate_metrics(run_dir / "metrics.jsonl", progress.step, progress.metrics_rows)
        )
        if progress.after_solve is None:  # a checkpoint saved before progress kept them: the log has them
            solved_at = progress.solved_at_step
            progress.after_solve = (
                []
                if solved_at is None
                else distributed.main_only(
                    lambda: source.logged_after_solve(run_dir / "metrics.jsonl", solved_at)
                )
            )
    else:
        distributed.main_only(lambda: prepare_run_dir(run_dir, force))
        if distributed.rank():  # its own stream of the model's random draws; rank 0 keeps the run's
            torch.manual_seed(distributed.rank_seed(config.seed, distributed.rank()))
        progress = Progress()
    distributed.main_only(lambda: _write_config(config, run_dir))
    threads = torch.get_num_threads()
    try:
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        with _open_log(config, run_dir) as log:
            trainer = _Trainer(config, task, model, optimizer, source, progress, log, run_dir, lr_milestones)
            trainer.run()
            return trainer.finish()
    finally:
        torch.set_num_threads(threads)


def _write_config(config: RunConfig, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.toml")


def _open_log(config: RunConfig, run_dir: Path) -> Any:
    """The metrics log: the run's on rank 0, one that writes nothing on the other ranks."""
    if not distributed.is_main():
        return contextlib.nullcontext(NullLog())
    return MetricsLog(run_dir / "metrics.jsonl", open_loggers(config, run_dir))


class _Trainer:
    """The state of one training session; `run` steps, `finish` writes the results."""

    def __init__(self, config, task, model, optimizer, source, progress, log, run_dir, lr_milestones=()):
        self.config, self.train_cfg = config, config.train
        self.task, self.model, self.optimizer, self.source = task, model, optimizer, source
        self.progress, self.log, self.run_dir = progress, log, run_dir
        self.checkpoints = run_dir / "checkpoints"
        self.log_every = max(1, self.train_cfg.val_every // 20)
        # a checkpoint saved after its step's validation: that validation is not run again
        self.last_val: Any = progress.validated
        self.last_val_step: int | None = None if progress.validated is None else progress.step
        self._losses = [tuple(pair) for pair in progress.unlogged]  # since the last train row
        self._last_train: dict[str, float] | None = None
        self.clock = SessionClock(progress.elapsed, progress.cpu)
        self.stopped = "steps"  # what ended the training: "steps", "solved", "time", "diverged"
        self.device = next(model.parameters()).device
        self.scaler = grad_scaler(self.train_cfg.precision, self.device)
        # the step's forward and loss, through DistributedDataParallel under torchrun
        self.runner = distributed.Runner(model, self.device)
        self._time_up: bool | None = None  # rank 0's clock, shared with every rank at each step
        self.lr_milestones = tuple(lr_milestones)  # steps after which the lr drops (epoch_plan)

    # ---------------------------------------------------------------- loop

    def run(self) -> None:
        cfg, progress = self.train_cfg, self.progress
        bar = WarmupBar(
            total=cfg.steps,
            initial=progress.step,
            disable=not cfg.progress or not distributed.is_main(),
            unit=self.source.unit,
            desc=f"{self.config.model}-{self.config.task}",
            dynamic_ncols=True,
        )
        self.model.train()
        self._apply_lr()
        if cfg.diverge_patience and progress.step == 0:  # not logged
            initial = distributed.main_only(lambda: self.source.validate(self.model))
            progress.initial_val = initial.value
            if math.isfinite(initial.value):  # the first best: no later best is worse than this
                progress.best, progress.best_step = initial.value, 0
                self.last_val, self.last_val_step = initial.record, 0
                self._save("best")
        try:
            while (reason := stop_reason(cfg, progress, self.clock, self._out_of_time())) is None:
                if progress.step in self.lr_milestones:
                    self._apply_lr()
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

    def _out_of_time(self) -> bool | None:
        """Whether the time budget is spent, the same answer on every rank (None: ask the
        clock, a single process)."""
        if not distributed.active():
            return None
        if self._time_up is None:  # before the first step of a session
            self._time_up = distributed.from_main(self._clock_says_stop())
        return self._time_up

    def _clock_says_stop(self) -> bool:
        return self.clock.out_of_time(self.train_cfg.max_minutes, self.train_cfg.budget_clock)

    def _train_step(self, step: int) -> tuple[float, float]:
        with autocast(self.train_cfg.precision, self.device):
            loss, task_loss = self.source.losses(self.model, step, self.runner)
        shared = None
        if distributed.active():  # the global batch's losses, and rank 0's clock, on every rank
            time_up = loss.new_tensor(float(distributed.is_main() and self._clock_says_stop()))
            values = torch.stack([loss.detach(), task_loss.detach(), time_up]).float()
            shared = distributed.mean_over_ranks_later(values)  # waited for after the backward
        try:
            apply_update(
                self.model,
                self.optimizer,
                loss,
                self.train_cfg.clip_grad_norm,
                self.scaler,
                reported=None if shared is None else lambda: shared()[0],
            )
        except NonFiniteLossError as exc:
            self._fail(step, str(exc))
        if shared is not None:
            reported = shared().cpu()
            self._time_up = bool(reported[2] > 0)
            return reported[0].item(), reported[1].item()
        return loss.item(), task_loss.item()

    def _fail(self, step: int, what: str) -> None:
        self._flush_train_log()
        self._write_diverged(f"non-finite loss at step {step + 1}: {what}")
        raise NonFiniteLossError(
            f"training stopped at step {step + 1}{self.source.batch_name(step)}: {what}; "
            f"the weights were not updated and {self._last_good()}; summary.json says the "
            f"run diverged. Try a lower train.lr or train.clip_grad_norm "
            f"(now {self.train_cfg.clip_grad_norm})."
        )

    def _check_divergence(self, value: float) -> None:
        """Stop (DivergedError) on a non-finite validation value, or one above diverge_factor
        times the untrained model's for diverge_patience validations in a row."""
        cfg, progress = self.train_cfg, self.progress
        if math.isfinite(value):
            if not cfg.diverge_patience or progress.initial_val is None:
                return
            limit = cfg.diverge_factor * progress.initial_val
            progress.val_rises = progress.val_rises + 1 if value > limit else 0
            if progress.val_rises < cfg.diverge_patience:
                return
            what = (
                f"validation loss {value:.4g} above {cfg.diverge_factor:g} x the untrained "
                f"model's ({progress.initial_val:.4g}) for {progress.val_rises} validations "
                f"in a row (train.diverge_patience)"
            )
        else:
            what = f"validation loss {value}"
        self._write_diverged(f"{what} at step {progress.step}")
        raise DivergedError(
            f"training diverged: {what} at step {progress.step}; {self._last_good()}, "
            f"summary.json says the run diverged. Try a lower train.lr (now {cfg.lr:g}) or "
            f"train.clip_grad_norm (now {cfg.clip_grad_norm:g})."
        )

    def _last_good(self) -> str:
        last = self.progress.last_checkpoint_step
        return (
            f"the last good checkpoint is {self.checkpoints / 'last'} (step {last})"
            if last is not None
            else "no checkpoint was saved yet"
        )

    def _write_diverged(self, reason: str) -> None:
        self.stopped = "diverged"
        self.finish(diverged=reason)

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
        result = distributed.main_only(lambda: self.source.validate(self.model))  # rank 0 validates
        for metrics, extra in result.rows:
            self.log.log(
                progress.step, "val", metrics, self.clock.wall(), **extra, cpu=round(self.clock.cpu(), 3)
            )
        self.last_val, self.last_val_step = result.record, progress.step
        if progress.solved_at_step is not None and result.excess is not None:  # still solved?
            progress.after_solve.append(result.excess)
        self._check_divergence(result.value)
        if self._improves(result.value):
            progress.best, progress.best_step = result.value, progress.step
            self._save("best")
        if (
            self.source.solves
            and progress.solved_at_step is None
            and result.excess < self.train_cfg.solve_bce
        ):
            progress.solved_at_step, progress.solved_at_seconds = progress.step, self.clock.wall()
            self._apply_lr()

    def _improves(self, value: float) -> bool:
        """Whether a validation value makes a new best checkpoint: below the best so far and
        not above the untrained model's (a model worse than its initialisation, one that is
        diverging, is never the best, even before any better validation)."""
        progress = self.progress
        if progress.initial_val is not None and value > progress.initial_val:
            return False
        return progress.best is None or value < progress.best

    def _apply_lr(self) -> None:
        """train.lr, or train.lr_after_solve once the run has solved (also after a resume),
        times train.lr_decay_factor for each lr milestone passed (schedules.step_decay)."""
        cfg = self.train_cfg
        solved = self.progress.solved_at_step is not None
        lr = cfg.lr_after_solve if (solved and cfg.lr_after_solve) else cfg.lr
        lr = step_decay(lr, self.progress.step, self.lr_milestones, cfg.lr_decay_factor)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # --------------------------------------------------------- checkpoints

    def _save(self, kind: str) -> None:
        progress = self.progress
        if kind == "last":
            progress.last_checkpoint_step = progress.step
        progress.elapsed, progress.cpu = self.clock.wall(), self.clock.cpu()
        val = self.last_val if self.last_val_step == progress.step else None
        progress.metrics_rows, progress.unlogged, progress.validated = self.log.rows, list(self._losses), val
        extra = self.source.extra_state()  # collective under torchrun: before rank 0 alone goes on
        rng_states = distributed.gather_objects(torch.get_rng_state())
        if rng_states is None:  # not rank 0
            return
        meta = {
            "mannlab_version": mannlab.__version__,
            "kind": kind,
            "step": progress.step,
            "model": self.config.model,
            "task": self.config.task,
            "config": self.config.to_dict(),
            **self.source.checkpoint_meta(progress.step, val),
        }
        train_state = {
            **progress.to_state(self.source.best_field),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng_state": torch.get_rng_state(),
            **cuda_rng_states(),
            **({"world_size": len(rng_states), "torch_rng_states": rng_states} if rng_states[1:] else {}),
            **extra,
        }
        save_checkpoint(self.checkpoints / kind, self.model, meta, train_state)

    # -------------------------------------------------------------- finish

    def finish(self, diverged: str | None = None) -> dict[str, Any]:
        """Write summary.json and the figures, both of the best checkpoint (the model the
        papers evaluate: "best parameters in terms of validation loss"); ``diverged`` says
        why a diverged run stopped. Rank 0 writes; every rank returns its summary."""
        return distributed.main_only(lambda: self._finish(diverged))

    def _finish(self, diverged: str | None) -> dict[str, Any]:
        progress, cfg = self.progress, self.train_cfg
        wall, cpu = self.clock.wall(), self.clock.cpu()  # training and validation only
        best_meta: dict[str, Any] = {}
        if progress.best_step is not None:  # a run may diverge before any good validation
            best_meta, _ = load_checkpoint(self.checkpoints / "best", self.model)
        summary = {
            "model": self.config.model,
            "task": self.config.task,
            "seed": self.config.seed,
            "run_dir": str(self.run_dir),
            "steps": progress.step,
            "configured_steps": cfg.steps,
            "stopped_by": self.stopped,
            "max_minutes": cfg.max_minutes,
            "budget_clock": cfg.budget_clock,
            "wall_seconds": round(wall, 3),
            "cpu_seconds": round(cpu, 3),
            "parameters": sum(p.numel() for p in self.model.parameters()),
        }
        finished = Finished(progress, self.last_val, self.last_val_step, best_meta)
        rows, fields = self.source.summary(self.model, finished)
        for split, metrics, extra in rows:
            self.log.log(progress.step, split, metrics, self.clock.wall(), **extra)
        summary.update(fields)
        if diverged is not None:
            summary["diverged"] = diverged
        summary["figures"] = self._figures()
        write_atomic(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary

    def _figures(self) -> dict[str, str]:
        task = self.task.task if isinstance(self.task, OnDevice) else self.task  # figures: CPU
        return draw_run_figures(self.run_dir, self.config, task, self.model.cpu(), self.progress.best_step)
