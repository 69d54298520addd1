"""Generalisation of a generated (algorithmic) task: metrics at chosen sequence lengths."""

from __future__ import annotations

from typing import Any, Iterable

import torch

from mannlab.evaluation.batches import validate

EVAL_SEED_OFFSET = 2 * 10**9  # evaluation batches never coincide with training or validation ones


def evaluate_lengths(
    model: torch.nn.Module,
    task: Any,
    lengths: Iterable[int],
    batches: int = 4,
    batch_size: int = 32,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Mean metrics per length: rows ``{"length": L, "bce": ..., "bit_error_rate": ..., ...}``.
    Batch ``k`` at length ``L`` is sampled with seed ``[seed, 2*10**9 + k, L]``."""
    sets = [
        (
            None,
            length,
            [
                task.sample(batch_size, [seed, EVAL_SEED_OFFSET + k, length], length=length)
                for k in range(batches)
            ],
        )
        for length in lengths
    ]
    rows = validate(model, task, sets)
    for row in rows:
        del row["multiple"]
    return rows
