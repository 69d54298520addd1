"""Training: the loop, checkpoints, the metrics log and evaluation over lengths."""
from mannlab.training.checkpoint import load_checkpoint, save_checkpoint
from mannlab.training.evaluate import evaluate, format_table, load_run
from mannlab.training.loop import NonFiniteLossError, make_optimizer, train, validate
from mannlab.training.metrics_log import MetricsLog, read_metrics, truncate_metrics

__all__ = ["train", "validate", "make_optimizer", "NonFiniteLossError", "save_checkpoint",
           "load_checkpoint", "evaluate", "format_table", "load_run", "MetricsLog",
           "read_metrics", "truncate_metrics"]
