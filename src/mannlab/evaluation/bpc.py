"""Bits per character of a char-LM over contiguous streams, state carried across segments."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mannlab.tasks.charlm import segments

LN2 = math.log(2)


@torch.no_grad()
def evaluate_bpc(model: torch.nn.Module, streams: torch.Tensor, length: int) -> float:
    """Bits per character over ``streams`` (B, L) with the state carried across segments
    (batch 1 evaluates the whole split as one sequence), in eval mode."""
    was_training = model.training
    model.eval()
    total, count, state = 0.0, 0, None
    try:
        for x, y in segments(streams, length):
            logits, state = model(x, state)
            total += F.cross_entropy(
                logits.reshape(-1, model.vocab_size), y.reshape(-1).long(), reduction="sum"
            ).item()
            count += y.numel()
    finally:
        model.train(was_training)
    return total / count / LN2


def split_bpc(model: torch.nn.Module, task, split: str) -> dict:
    """BPC of ``split`` with the run's protocol: ``task.valid_batch_size`` (or
    ``test_batch_size``) streams, state carried over ``task.bptt`` segments."""
    batch = task.params["valid_batch_size" if split == "valid" else "test_batch_size"]
    return {
        "bpc": evaluate_bpc(model, task.streams(split, batch), task.params["bptt"]),
        "batch_size": batch,
        "symbols": int(task.split(split).numel()),
    }
