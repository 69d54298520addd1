"""Truncated-BPTT training of the character-level LM runs (mannlab.tasks.charlm).

``mannlab train --task ptb-char|text8|enwik8-char`` comes here instead of loop.py, whose
batches are independent samples: here the training set is cut into ``train.batch_size``
contiguous streams, step ``i`` trains on segment ``i mod S`` of them (S segments of
``task.bptt`` symbols per epoch), and the hidden state and memory are carried from one
segment to the next, detached (ARMIN section 4.2); a new epoch starts from the initial
state. What it shares with loop.py: the run directory layout, the optimizer, the
checkpoint files (``checkpoints/{last,best}``, safetensors + JSON + weights-only
``train_state.pt``, written atomically), metrics.jsonl, the gumbel temperature schedule
(``start_minibatch``), the resume checks and the learning-curve figure.

Exact resume: the data position is the step number; ``train_state.pt`` holds the
optimizer, the torch RNG (zoneout, dropout, gumbel noise) and the carried state, so a
resumed run takes the same steps as an uninterrupted one (a test compares them).

Metrics: train rows ``loss`` (nats per symbol) and ``bpc``; validation rows ``bpc`` on the
valid split (``task.valid_batch_size`` streams, state carried, eval mode); at the end one
``test`` row: the best checkpoint's test BPC (``task.test_batch_size`` streams, 1 by
default: the test split as one sequence). ``train.max_minutes`` bounds the training time
(validations included, the final test not), checked before each step, on the clock
``train.budget_clock`` names: wall seconds, or CPU seconds of the process.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import mannlab
from mannlab.config import RunConfig, default_run_dir, save_config
from mannlab.errors import ConfigError
from mannlab.state import detach_state, map_state
from mannlab.tasks.charlm import evaluate_bpc, num_segments, segment_at
from mannlab.training.checkpoint import load_checkpoint, save_checkpoint
from mannlab.training.clock import SessionClock
from mannlab.training.loop import (NonFiniteLossError, make_optimizer, model_aux_loss, prepare_run_dir,
                                   restore_last)
from mannlab.training.metrics_log import MetricsLog, check_tensorboard
from mannlab.training.schedules import start_minibatch

LN2 = math.log(2)


@dataclass
class TBPTTProgress:
    """Everything besides weights, optimizer, RNG and carried state that a resume restores."""
    step: int = 0                       # optimizer steps (segments) done
    elapsed: float = 0.0                # training wall seconds over all sessions
    cpu: float = 0.0                    # training CPU seconds of this process, all sessions
    best_bpc: float | None = None       # best validation BPC
    best_step: int | None = None
    last_checkpoint_step: int | None = None


def is_tbptt_run(config: RunConfig) -> bool:
    """True for the runs this module trains (the char-LM tasks)."""
    from mannlab.tasks.charlm import is_charlm_task
    return is_charlm_task(config.task)


def train(config: RunConfig, resume: bool = False, force: bool = False) -> dict[str, Any]:
    """Train a char-LM ``config`` into its run directory; return the summary (summary.json)."""
    if config.run_dir is None:
        config = config.replace(run_dir=default_run_dir(config))
    run_dir = Path(config.run_dir)
    torch.manual_seed(config.seed)
    task, model = config.build()
    config = config.replace(task_args=dict(task.params))
    optimizer = make_optimizer(model, config.train)
    streams = task.streams("train", config.train.batch_size)
    if config.train.tensorboard:
        check_tensorboard()
    carried = None
    if resume:
        progress, carried = _restore(run_dir, config, model, optimizer)
    else:
        prepare_run_dir(run_dir, force)
        progress = TBPTTProgress()
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.toml")
    threads = torch.get_num_threads()
    try:
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        tensorboard_dir = run_dir / "tensorboard" if config.train.tensorboard else None
        with MetricsLog(run_dir / "metrics.jsonl", tensorboard_dir) as log:
            trainer = _TBPTTTrainer(config, task, model, optimizer, streams, progress, log, run_dir)
            trainer.run(carried)
            return trainer.finish()
    finally:
        torch.set_num_threads(threads)


def tbptt_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, state: Any,
               optimizer: torch.optim.Optimizer, clip: float) -> tuple[float, Any]:
    """One truncated-BPTT update on segment (x, y) (B, T) from ``state``; returns the mean
    loss (nats per symbol) and the new state, detached. Raises NonFiniteLossError (without
    updating the weights) when the loss or the gradient is not finite."""
    targets = y.long()
    if model.uses_aux_loss:   # TARDIS with REINFORCE: eq. 17's auxiliary reward needs the targets
        logits, state, trace = model(x, state, return_trace=True)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")    # (B, T)
        task_loss = nll.mean()
        loss = task_loss + model_aux_loss(
            model.core, trace, nll.detach(),
            lambda out: F.cross_entropy(out.transpose(1, 2), targets, reduction="none"),
            outputs_per_step=1)   # the loss is a mean per symbol
    else:
        logits, state = model(x, state)
        loss = task_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    if not torch.isfinite(loss):
        raise NonFiniteLossError(f"the loss is {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip or math.inf)
    if not torch.isfinite(norm):
        raise NonFiniteLossError(f"the gradient norm is {norm.item()}")
    optimizer.step()
    return task_loss.item(), detach_state(state)


class _TBPTTTrainer:
    """One training session: `run` steps over the streams, `finish` tests and summarises."""

    def __init__(self, config, task, model, optimizer, streams, progress, log, run_dir):
        self.config, self.cfg, self.task, self.model = config, config.train, task, model
        self.optimizer, self.streams, self.progress, self.log = optimizer, streams, progress, log
        self.run_dir, self.checkpoints = run_dir, run_dir / "checkpoints"
        self.bptt = task.params["bptt"]
        self.per_epoch = num_segments(streams, self.bptt)
        self.log_every = max(1, self.cfg.val_every // 20)
        self.carried: Any = None
        self.last_val: float | None = None
        self.last_val_step: int | None = None
        self.stopped = "steps"
        self._losses: list[float] = []
        self._last_train: float | None = None
        self.clock = SessionClock(progress.elapsed, progress.cpu)

    def run(self, carried: Any) -> None:
        cfg, progress = self.cfg, self.progress
        self.carried = carried
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr
        bar = tqdm(total=cfg.steps, initial=progress.step, disable=not cfg.progress, unit="seg",
                   desc=f"{self.config.model}-{self.config.task}", dynamic_ncols=True)
        self.model.train()
        try:
            while progress.step < cfg.steps:
                if self.clock.out_of_time(cfg.max_minutes, cfg.budget_clock):
                    self.stopped = "time"
                    break
                index = progress.step % self.per_epoch
                if index == 0:
                    self.carried = None                  # a new epoch starts the streams again
                x, y = segment_at(self.streams, index, self.bptt)
                start_minibatch(self.model.core, progress.step)     # gumbel temperature
                try:
                    loss, self.carried = tbptt_step(self.model, x, y, self.carried, self.optimizer,
                                                    cfg.clip_grad_norm)
                except NonFiniteLossError as exc:
                    self._fail(str(exc))
                progress.step += 1
                self._losses.append(loss)
                bar.update(1)
                if progress.step % self.log_every == 0:
                    self._flush_train_log()
                    bar.set_postfix(self._postfix(), refresh=False)
                if progress.step % cfg.val_every == 0:
                    self._validate()
                    bar.set_postfix(self._postfix(), refresh=False)
                if progress.step % cfg.checkpoint_every == 0:
                    self._save("last")
        finally:
            bar.close()
        self._flush_train_log()
        if self.last_val_step != progress.step:
            self._validate()
        self._save("last")

    def _fail(self, what: str) -> None:
        self._flush_train_log()
        last = self.progress.last_checkpoint_step
        where = (f"the last good checkpoint is {self.checkpoints / 'last'} (step {last})"
                 if last is not None else "no checkpoint was saved yet")
        raise NonFiniteLossError(f"training stopped at step {self.progress.step + 1}: {what}; the "
                                 f"weights were not updated and {where}. Try a lower train.lr or "
                                 f"train.clip_grad_norm (now {self.cfg.clip_grad_norm}).")

    def _flush_train_log(self) -> None:
        if not self._losses:
            return
        loss = sum(self._losses) / len(self._losses)
        self.log.log(self.progress.step, "train", {"loss": loss, "bpc": loss / LN2}, self.clock.wall(),
                     epoch=round(self.progress.step / self.per_epoch, 4))
        self._losses, self._last_train = [], loss / LN2

    def _postfix(self) -> dict[str, str]:
        out = {"epoch": f"{self.progress.step / self.per_epoch:.2f}"}
        if self.cfg.max_minutes:    # with a time budget the step total is only an upper bound
            out["min"] = self.clock.budget_text(self.cfg.max_minutes, self.cfg.budget_clock)
        if self._last_train is not None:
            out["bpc"] = f"{self._last_train:.3f}"
        if self.last_val is not None:
            out["val_bpc"] = f"{self.last_val:.3f}"
        return out

    def _validate(self) -> None:
        progress = self.progress
        with torch.random.fork_rng(devices=[]):
            bpc = evaluate_bpc(self.model, self.task.streams("valid", self.task.params["valid_batch_size"]),
                               self.bptt)
        self.log.log(progress.step, "val", {"bpc": bpc, "loss": bpc * LN2}, self.clock.wall(),
                     cpu=round(self.clock.cpu(), 3))
        self.last_val, self.last_val_step = bpc, progress.step
        if progress.best_bpc is None or bpc < progress.best_bpc:
            progress.best_bpc, progress.best_step = bpc, progress.step
            self._save("best")

    def _save(self, kind: str) -> None:
        progress = self.progress
        if kind == "last":
            progress.last_checkpoint_step = progress.step
        progress.elapsed, progress.cpu = self.clock.wall(), self.clock.cpu()
        meta = {"mannlab_version": mannlab.__version__, "kind": kind, "step": progress.step,
                "model": self.config.model, "task": self.config.task,
                "config": self.config.to_dict(), "epoch": progress.step / self.per_epoch,
                "val_bpc": self.last_val if self.last_val_step == progress.step else None}
        train_state = {**progress.__dict__, "optimizer": self.optimizer.state_dict(),
                       "torch_rng_state": torch.get_rng_state(),
                       "carried": None if self.carried is None else flatten_state(self.carried)}
        save_checkpoint(self.checkpoints / kind, self.model, meta, train_state)

    def finish(self) -> dict[str, Any]:
        """Test the best checkpoint, draw the learning curve, write summary.json."""
        progress, task = self.progress, self.task
        train_seconds = self.clock.wall()        # training and validation, not the test below
        train_cpu = self.clock.cpu()
        load_checkpoint(self.checkpoints / "best", self.model)
        test_batch = task.params["test_batch_size"]
        test_streams = task.streams("test", test_batch)
        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            test_bpc = evaluate_bpc(self.model, test_streams, self.bptt)
        test_seconds = time.perf_counter() - start
        self.log.log(progress.step, "test", {"bpc": test_bpc, "loss": test_bpc * LN2}, self.clock.wall(),
                     checkpoint_step=progress.best_step, batch=test_batch)
        summary = {
            "model": self.config.model, "task": self.config.task, "seed": self.config.seed,
            "run_dir": str(self.run_dir), "steps": progress.step, "configured_steps": self.cfg.steps,
            "stopped_by": self.stopped, "max_minutes": self.cfg.max_minutes,
            "budget_clock": self.cfg.budget_clock,
            "epochs": round(progress.step / self.per_epoch, 4), "segments_per_epoch": self.per_epoch,
            "wall_seconds": round(train_seconds, 3), "cpu_seconds": round(train_cpu, 3),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "symbols_per_step": int(self.streams.shape[0] * self.bptt),
            "best_val": {"step": progress.best_step, "bpc": progress.best_bpc},
            "final_val": {"step": self.last_val_step, "bpc": self.last_val},
            "test": {"bpc": test_bpc, "checkpoint": "best", "step": progress.best_step,
                     "batch_size": test_batch, "symbols": int(task.split("test").numel()),
                     "seconds": round(test_seconds, 3)},
            "figures": self._figures(),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def _figures(self) -> dict[str, str]:
        path = self.run_dir / "figures" / "learning_curve.png"
        try:
            from mannlab import plot
            plot.learning_curve(self.run_dir / "metrics.jsonl", path, metric="bpc",
                                title=f"{self.config.model} on {self.config.task} (bits per character)")
        except Exception as exc:  # noqa: BLE001 - the run is saved; a figure is a convenience
            import warnings
            warnings.warn(f"could not draw {path}: {type(exc).__name__}: {exc}", RuntimeWarning,
                          stacklevel=2)
            return {}
        return {"learning_curve": str(path)}


# ------------------------------------------------------------------ states

def flatten_state(state: Any) -> list[torch.Tensor]:
    """The tensors of a nested NamedTuple state, in order (for weights-only train_state.pt)."""
    tensors: list[torch.Tensor] = []
    map_state(lambda t: tensors.append(t.detach().clone()) or t, state)
    return tensors


def unflatten_state(template: Any, tensors: list[torch.Tensor]) -> Any:
    """Rebuild a state shaped like ``template`` from flatten_state's list."""
    count = len(flatten_state(template))
    if count != len(tensors):
        raise ConfigError(f"the saved carried state has {len(tensors)} tensors, the model's "
                          f"state {count}")
    items = iter(tensors)
    return map_state(lambda _: next(items), template)


def _restore(run_dir: Path, config: RunConfig, model, optimizer) -> tuple[TBPTTProgress, Any]:
    """loop.restore_last, with the batch size fixed too (it is the stream layout), and the
    carried state rebuilt."""
    progress, state = restore_last(run_dir, config, model, optimizer, TBPTTProgress,
                                   train_invariants=("optimizer", "batch_size"))
    carried = state.get("carried")
    if carried is not None:
        carried = unflatten_state(model.core.initial_state(config.train.batch_size), carried)
    return progress, carried


# ------------------------------------------------------- evaluate, report

def evaluate_run(run_dir: str | Path, checkpoint: str = "best",
                 splits: tuple[str, ...] = ("valid", "test")) -> dict[str, Any]:
    """BPC of a char-LM run's checkpoint on its splits, with the run's protocol (streams of
    task.valid_batch_size / task.test_batch_size, state carried over task.bptt segments)."""
    from mannlab.training.evaluate import load_run
    config, task, model, meta = load_run(run_dir, checkpoint)
    out: dict[str, Any] = {"step": meta.get("step"), "checkpoint": meta.get("kind", checkpoint)}
    for split in splits:
        batch = task.params["valid_batch_size" if split == "valid" else "test_batch_size"]
        out[split] = {"bpc": evaluate_bpc(model, task.streams(split, batch), task.params["bptt"]),
                      "batch_size": batch, "symbols": int(task.split(split).numel())}
    return out


def describe(summary: dict[str, Any]) -> str:
    """What `mannlab train` prints at the end of a char-LM run."""
    best, test = summary["best_val"], summary["test"]
    why = "the time budget" if summary["stopped_by"] == "time" else "the step budget"
    lines = [f"{summary['steps']} segments ({summary['epochs']:.3g} epochs) in "
             f"{summary['wall_seconds'] / 60:.1f} min, stopped by {why}; "
             f"{summary['parameters']:,} parameters",
             f"best valid BPC {best['bpc']:.4f} at step {best['step']}",
             f"test BPC {test['bpc']:.4f} (best checkpoint, {test['symbols']:,} symbols in "
             f"{test['batch_size']} stream(s), state carried)",
             f"checkpoints: {Path(summary['run_dir']) / 'checkpoints'} (best, last)"]
    lines += [f"{name.replace('_', ' ')}: {path}" for name, path in summary.get("figures", {}).items()]
    return "\n".join(lines)


def seeds_table(summaries: list[dict[str, Any]]) -> str:
    """Markdown table over the seeds of a char-LM recipe."""
    lines = ["| seed | steps | epochs | minutes | parameters | best valid BPC (step) | test BPC |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for s in summaries:
        lines.append(f"| {s['seed']} | {s['steps']} | {s['epochs']:.3g} | {s['wall_seconds'] / 60:.1f} "
                     f"| {s['parameters']:,} | {s['best_val']['bpc']:.4f} ({s['best_val']['step']}) "
                     f"| {s['test']['bpc']:.4f} |")
    return "\n".join(lines)
