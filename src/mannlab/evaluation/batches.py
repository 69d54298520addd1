"""Task metrics of a model over fixed batches: what validation and evaluation share."""

from __future__ import annotations

from typing import Any, Callable

import torch

from mannlab.evaluation.reads import trace_read_targets
from mannlab.tasks.dataset import count_group_errors

#: (multiple, length, batches): one set of fixed batches at one length
BatchSet = tuple[Any, int, list]


def validate(
    model: torch.nn.Module,
    task: Any,
    sets: list[BatchSet],
    reads: bool = False,
    on_batch: Callable[[Any], None] | None = None,
) -> list[dict[str, Any]]:
    """Mean task metrics per (multiple, length, batches) set, in eval mode without gradients
    and without moving torch's RNG; with ``reads``, where the reads land too (reads.py);
    ``on_batch(inputs)`` after each batch (a progress bar)."""
    was_training = model.training
    model.eval()
    rows = []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for multiple, length, batches in sets:
                rows.append(
                    {
                        "multiple": multiple,
                        "length": length,
                        **mean_metrics(model, task, batches, reads, on_batch),
                    }
                )
    finally:
        model.train(was_training)
    return rows


def mean_metrics(
    model: torch.nn.Module,
    task: Any,
    batches: list,
    reads: bool = False,
    on_batch: Callable[[Any], None] | None = None,
) -> dict[str, float]:
    """Task metrics averaged over equally sized batches. A batch may carry a fourth item, the
    group of each example (data-set tasks): the task's ``group_metrics`` (error per group,
    their mean, failed groups) are then added, pooled over the batches. With ``reads`` (a
    memory model that returns a trace, a task that names its source steps), the
    ``read_targets`` numbers of each batch are averaged in as well."""
    totals: dict[str, float] = {}
    seen: dict[str, int] = {}
    counts: dict[int, list[float]] = {}
    for inputs, targets, mask, *groups in batches:
        trace = None
        if reads:
            logits, _, trace = model(inputs, return_trace=True)
        else:
            logits = model(inputs)[0]
        measured = task.metrics(logits, targets, mask, inputs=inputs)
        if trace is not None:
            measured.update(trace_read_targets(trace, task, inputs, mask))
        for key, value in measured.items():
            totals[key] = totals.get(key, 0.0) + float(value)
            seen[key] = seen.get(key, 0) + 1
        if groups:
            count_group_errors(logits, targets, mask, groups[0], counts)
        if on_batch is not None:
            on_batch(inputs)
    # a read-target key is absent from a batch where no step qualifies: mean over those that had it
    out = {key: value / seen[key] for key, value in totals.items()}
    if counts:
        out.update(task.group_metrics(counts))
    return out


def loss_key(task: Any) -> str:
    """The metrics key of ``task``'s loss: "bce" (bits), "ce" (categorical tasks), "wbce"
    (proposals), "bpc" (char-LM)."""
    return task.loss_key
