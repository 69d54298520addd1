"""The figures of a run: its learning curve and, for models with memory, reads and writes
over one sequence (drawn by mannlab.reporting.figures). The trainer draws them at the end of
a run (``draw_run_figures``), `mannlab plot` on demand; the model is given, never built or
trained here: the memory picture runs it on one sequence."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from mannlab.config import RunConfig
from mannlab.evaluation import loss_key
from mannlab.reporting import figures
from mannlab.safe_writes import make_directory

PICTURE_SEED_OFFSET = 10**9 - 1  # the pictured sequence is no training or validation batch


def draw_memory_access(
    model: torch.nn.Module,
    task: Any,
    path: Path,
    seed: int,
    length: int | None = None,
    title: str | None = None,
) -> bool:
    """Plot one sequence of ``length`` (default: the training length); False if the model has no
    read/write weights to show."""
    inputs, targets, mask = task.sample(1, [seed, PICTURE_SEED_OFFSET], length=length or task.train_length)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            logits, _, trace = model(inputs, return_trace=True)
    finally:
        model.train(was_training)
    if not (hasattr(trace, "read_weights") and hasattr(trace, "write_weights")):
        return False
    figures.memory_access(trace, inputs, targets, logits, mask, path=path, title=title)
    return True


def draw_learning_curve(run_dir: Path, config: RunConfig, task: Any, out: Path) -> Path:
    """learning_curve.png in ``out``: BPC for char-LM runs, else the task's loss against
    the solve threshold."""
    path = out / "learning_curve.png"
    if task.batching == "streams":
        figures.learning_curve(
            run_dir / "metrics.jsonl",
            path,
            metric="bpc",
            title=f"{config.model} on {config.task} (bits per character)",
        )
    else:
        figures.learning_curve(
            run_dir / "metrics.jsonl",
            path,
            metric=loss_key(task),
            title=f"{config.model} on {config.task}",
            threshold=config.train.solve_bce or None,  # 0: no solve threshold (proposal tasks)
        )
    return path


def draw_run_figures(
    run_dir: Path, config: RunConfig, task: Any, model: torch.nn.Module, best_step: int | None
) -> dict[str, str]:
    """The figures at the end of a training, of the best checkpoint (the model the papers
    evaluate); a drawing failure warns but keeps the run."""
    out = run_dir / "figures"
    drawn = {}
    try:
        make_directory(out)  # mannlab's name: never a link planted there
        drawn["learning_curve"] = str(draw_learning_curve(run_dir, config, task, out))
        path = out / "memory_access.png"
        if task.batching == "samples" and draw_memory_access(
            model,
            task,
            path,
            config.seed,
            title=f"{config.model} on {config.task}, best checkpoint (step {best_step})",
        ):
            drawn["memory_access"] = str(path)
    except Exception as exc:  # noqa: BLE001 - figures are a convenience, the run is saved
        warnings.warn(
            f"could not draw the figures in {out}: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2
        )
    return drawn
