"""Evaluation: task metrics of a model on batches, lengths, data-set splits and streams, and
``evaluate_run``, the one entry point behind `mannlab eval`."""

from mannlab.evaluation.batches import loss_key, mean_metrics, validate
from mannlab.evaluation.bpc import evaluate_bpc, split_bpc
from mannlab.evaluation.lengths import evaluate_lengths
from mannlab.evaluation.run import evaluate_run

__all__ = [
    "evaluate_run",
    "evaluate_lengths",
    "evaluate_bpc",
    "split_bpc",
    "validate",
    "mean_metrics",
    "loss_key",
]
