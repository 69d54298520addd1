"""The files of a run directory and of a saved model, read and written; nothing here builds a
model (loading/ builds one and loads these files into it).

config.toml  metrics.jsonl  summary.json  checkpoints/{best,last}/  figures/
"""

from mannlab.rundir.checkpoint import load_checkpoint, save_checkpoint, seal_checkpoint
from mannlab.rundir.files import replacing, write_atomic
from mannlab.rundir.metrics_log import MetricsLog, read_metrics, truncate_metrics
from mannlab.rundir.run_files import load_run_weights, read_run_config, save_config

__all__ = [
    "load_checkpoint",
    "save_checkpoint",
    "seal_checkpoint",
    "load_run_weights",
    "read_run_config",
    "save_config",
    "MetricsLog",
    "read_metrics",
    "truncate_metrics",
    "replacing",
    "write_atomic",
]
