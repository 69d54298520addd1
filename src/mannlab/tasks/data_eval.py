"""Evaluate a run of a data-set task on a whole split, with errors per group.

    python -m mannlab.tasks.data_eval runs/babi-dnc-lstm/seed0 --split test
    python -m mannlab.tasks.data_eval runs/strokes-tardis/seed0 --split test --limit 2000

Prints a table (bAbI: error per task, the mean over tasks and the failed tasks, error above
5%, as the papers report; MNIST: per digit class; SNLI: per label) and writes it with the
numbers to ``<RUN>/eval-<split>.json`` (``ce``, ``error``, ``per_group``, ``mean_group_error``,
``failed_groups``). For the stroke task it also runs the
paper's test protocol (predictions fed back, per-digit error). ``--data-dir`` replaces the
run's ``task.data_dir`` (the files may live elsewhere on this machine).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

from mannlab.config import load_config
from mannlab.errors import ConfigError
from mannlab.tasks.dataset import DatasetTask, evaluate_split, format_results
from mannlab.tasks.strokes import StrokesTask, evaluate_feedback
from mannlab.training.checkpoint import load_checkpoint
from mannlab.training.evaluate import use_run_threads


def evaluate_run(run_dir: str | Path, split: str = "test", limit: Optional[int] = None,
                 data_dir: Optional[str] = None, checkpoint: str = "best", batch_size: int = 100) -> dict:
    """The results of ``evaluate_split`` (and, for strokes, ``evaluate_feedback``) of a run."""
    run_dir = Path(run_dir)
    overrides = [f"task.data_dir={json.dumps(data_dir)}"] if data_dir else []
    config = load_config(run_dir / "config.toml", overrides)
    use_run_threads(config)
    task, model = config.build()
    if not isinstance(task, DatasetTask):
        raise ConfigError(f"{run_dir} trained task '{config.task}', not a data-set task; use `mannlab eval`")
    load_checkpoint(run_dir / "checkpoints" / checkpoint, model)
    result = evaluate_split(model, task, split, batch_size, limit)
    if isinstance(task, StrokesTask):
        result["fed_back"] = evaluate_feedback(model, task, split, limit, batch_size)
    result.update(run_dir=str(run_dir), checkpoint=checkpoint, task=config.task, model=config.model)
    return result


def main(argv: Optional[list[str]] = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m mannlab.tasks.data_eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN")
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"))
    parser.add_argument("--limit", type=int, help="evaluate only the first N examples of the split")
    parser.add_argument("--data-dir", metavar="DIR", help="where the data files are (default: the run's)")
    parser.add_argument("--checkpoint", default="best", choices=("best", "last"))
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args(argv)
    result = evaluate_run(args.run_dir, args.split, args.limit, args.data_dir, args.checkpoint, args.batch_size)
    print(f"{result['model']} on {result['task']}, {args.split} split, {result['checkpoint']} checkpoint")
    print(format_results(result))
    if "fed_back" in result:
        fb = result["fed_back"]
        print(f"predictions fed back: per-digit error {100 * fb['digit_error']:.2f}%, "
              f"sequence error {100 * fb['sequence_error']:.2f}% over {fb['sequences']} sequences")
    out = Path(args.run_dir) / f"eval-{args.split}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")
    return result


if __name__ == "__main__":
    main()
