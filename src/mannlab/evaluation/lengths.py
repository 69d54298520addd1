"""Generalisation of a generated (algorithmic) task: metrics at chosen sequence lengths."""

from __future__ import annotations

import sys
from typing import Any, Iterable

import torch
from tqdm.auto import tqdm

from mannlab.evaluation.batches import validate
from mannlab.models.size_check import check_batch_memory

EVAL_SEED_OFFSET = 2 * 10**9  # evaluation batches never coincide with training or validation ones
# sequence steps (sequences x length, over every batch) past which an evaluation shows a bar
# with its progress and the time left: long lengths take minutes, and say so from the first batch
PROGRESS_STEPS = 200_000


def evaluate_lengths(
    model: torch.nn.Module,
    task: Any,
    lengths: Iterable[int],
    batches: int = 4,
    batch_size: int = 32,
    seed: int = 0,
    reads: bool = False,
) -> list[dict[str, Any]]:
    """Mean metrics per length: rows ``{"length": L, "bce": ..., "bit_error_rate": ..., ...}``,
    with ``reads`` also where the reads land (evaluation/reads.py). Batch ``k`` at length
    ``L`` is sampled with seed ``[seed, 2*10**9 + k, L]``."""
    lengths = list(lengths)
    check_length_sets(model, task, lengths, batches, batch_size)
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
    total = sum(batch[0].shape[0] * batch[0].shape[1] for _, _, drawn in sets for batch in drawn)
    with tqdm(
        total=total,
        desc=f"evaluating at lengths up to {max(lengths)}",
        unit="step",
        unit_scale=True,
        disable=total < PROGRESS_STEPS,
        leave=False,
        file=sys.stderr,
        mininterval=2.0,
    ) as bar:
        rows = validate(model, task, sets, reads, on_batch=lambda x: bar.update(x.shape[0] * x.shape[1]))
    for row in rows:
        del row["multiple"]
    return rows


def check_length_sets(
    model: torch.nn.Module, task: Any, lengths: list[int], batches: int, batch_size: int
) -> None:
    """ConfigError, before any batch is drawn, when the batches of every length (drawn first)
    and a pass at the longest cannot fit; a sequence has at least as many steps as its length."""
    longest = max((length for length in lengths if isinstance(length, int)), default=0)
    if longest < 1:
        return  # the task's own checks name the bad length
    per_step = task.input_size + task.output_size + 1  # inputs, targets and mask
    drawn = sum(batches * batch_size * length * per_step for length in lengths if isinstance(length, int))
    check_batch_memory(
        f"evaluating at length {longest} ({batches} batches of {batch_size} per length)",
        model,
        batch_size,
        longest,
        task.output_size,  # the outputs of a pass
        extra=drawn,
        extra_detail=f"{drawn:.3g} values of batches drawn for {len(lengths)} lengths",
    )
