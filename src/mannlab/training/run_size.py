"""A training run's memory, estimated before its batches are drawn: a batch size or a sequence
length that cannot fit fails at once, with the estimate, instead of growing the process until
the OS kills it (models/size_check.py holds the estimate)."""

from __future__ import annotations

from typing import Any

import torch

from mannlab.config import RunConfig
from mannlab.models.size_check import check_batch_memory


def check_run_memory(config: RunConfig, task: Any, model: torch.nn.Module) -> None:
    """ConfigError when a training step or the fixed validation sets of ``config`` cannot fit.
    A generated task's sequences have at least as many steps as their length (the training
    length, its multiples for validation); other tasks count one step, a lower bound."""
    cfg = config.train
    generated = task.kind == "generated"
    length = task.train_length if generated else 1
    per_step = task.input_size + task.output_size + 1  # inputs, targets and mask of a batch
    validation = 0
    if generated:
        sets = cfg.val_batches * cfg.val_batch_size * length * per_step
        validation = sum(sets * multiple for multiple in cfg.val_length_multiples)
    check_batch_memory(
        f"training {config.model} on {config.task} (train.batch_size={cfg.batch_size}, length {length})",
        model,
        cfg.batch_size,
        length,
        per_step + task.output_size,  # and the outputs
        extra=validation,
        extra_detail=f"{validation:.3g} values of validation batches",
    )
