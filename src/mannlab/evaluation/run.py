"""One evaluation of a run directory for every task kind (what the task declares: its
``batching`` and ``kind``).

generated tasks (copy, recall, ...)    metrics at sequence lengths (fresh sampled batches)
data-set tasks (bAbI, MNIST, strokes)  a whole split, with the error per group and the
                                       task's extra_results (strokes: predictions fed
                                       back); written to <RUN>/eval-<split>.json
char-LM tasks (ptb-char, ...)          valid and test bits per character, state carried
proposal tasks (proposals-synthetic,   the whole videos of a split: proposals (NMS), recall at
thumos14-proposals)                    1,000 proposals and AR; written to <RUN>/eval-<split>.json
                                       with proposals-<split>.json (the figures of its
                                       curves: reporting.proposal_figures)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from mannlab.evaluation.bpc import split_bpc
from mannlab.evaluation.lengths import evaluate_lengths
from mannlab.evaluation.proposals import evaluate_proposals
from mannlab.loading import load_run, use_run_threads
from mannlab.rundir import write_atomic
from mannlab.tasks.dataset import evaluate_split


def evaluate_run(
    run_dir: str | Path,
    checkpoint: str = "best",
    overrides: Sequence[str] = (),
    lengths: Sequence[int] | None = None,
    batches: int = 4,
    batch_size: int | None = None,
    seed: int | None = None,
    split: str = "test",
    limit: int | None = None,
    reads: bool = False,
) -> dict[str, Any]:
    """Evaluate a run's checkpoint the way its task is scored; the result's ``kind`` says
    which: "lengths" (``rows`` per length), "split" (evaluate_split's result), "bpc"
    (``valid`` and ``test``) or "proposals" (evaluate_proposals's result). ``overrides``
    change the run's config before its weights load; ``reads`` adds, on generated tasks,
    where a memory model's reads land (evaluation/reads.py)."""
    config, task, model, meta = load_run(run_dir, checkpoint, overrides)
    use_run_threads(config)
    out: dict[str, Any] = {
        "run_dir": str(run_dir),
        "model": config.model,
        "task": config.task,
        "checkpoint": meta.get("kind", checkpoint),
        "step": meta.get("step"),
    }
    if task.batching == "streams":
        return {**out, "kind": "bpc", **{s: split_bpc(model, task, s) for s in ("valid", "test")}}
    if task.kind == "proposals":
        about = dict(
            run_dir=str(run_dir),
            checkpoint=checkpoint,
            step=meta.get("step"),
            task=config.task,
            model=config.model,
        )
        result = evaluate_proposals(
            model,
            task,
            split,
            out_dir=run_dir,
            about=about,
            limit=limit,
            batch_size=batch_size or 16,
        )
        return {**out, "kind": "proposals", "split": split, "result": result, "path": result["files"]["eval"]}
    if task.kind == "data":
        result = evaluate_split(model, task, split, batch_size or 100, limit)
        result.update(task.extra_results(model, split, limit, batch_size or 100))
        result.update(run_dir=str(run_dir), checkpoint=checkpoint, task=config.task, model=config.model)
        path = Path(run_dir) / f"eval-{split}.json"
        write_atomic(path, json.dumps(result, indent=2) + "\n")
        return {**out, "kind": "split", "split": split, "result": result, "path": str(path)}
    lengths = lengths or [task.train_length * m for m in config.train.val_length_multiples]
    rows = evaluate_lengths(
        model, task, lengths, batches, batch_size or 32, config.seed if seed is None else seed, reads
    )
    return {
        **out,
        "kind": "lengths",
        "rows": rows,
        "batches": batches,
        "batch_size": batch_size or 32,
        "length_name": task.length_name,
        "train_length": task.train_length,
    }
