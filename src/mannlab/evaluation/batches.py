"""Task metrics of a model over fixed batches: what validation and evaluation share."""

from __future__ import annotations

from typing import Any

import torch

from mannlab.tasks.dataset import count_group_errors

#: (multiple, length, batches): one set of fixed batches at one length
BatchSet = tuple[Any, int, list]


def validate(model: torch.nn.Module, task: Any, sets: list[BatchSet]) -> list[dict[str, Any]]:
    """Mean task metrics per (multiple, length, batches) set, in eval mode without gradients
    and without moving torch's RNG."""
    was_training = model.training
    model.eval()
    rows = []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for multiple, length, batches in sets:
                rows.append({"multiple": multiple, "length": length, **mean_metrics(model, task, batches)})
    finally:
        model.train(was_training)
    return rows


def mean_metrics(model: torch.nn.Module, task: Any, batches: list) -> dict[str, float]:
    """Task metrics averaged over equally sized batches. A batch may carry a fourth item, the
    group of each example (data-set tasks): the task's ``group_metrics`` (error per group,
    their mean, failed groups) are then added, pooled over the batches."""
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
    """The metrics key of ``task``'s loss: "bce" (bits), "ce" (categorical tasks), "wbce"
    (proposals), "bpc" (char-LM)."""
    return task.loss_key
