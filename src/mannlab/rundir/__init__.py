"""The files of a run directory: checkpoints, the metrics log, and opening a saved run.

config.toml  metrics.jsonl  summary.json  checkpoints/{best,last}/  figures/
"""

from mannlab.rundir.checkpoint import load_checkpoint, save_checkpoint, seal_checkpoint
from mannlab.rundir.files import replacing, write_atomic
from mannlab.rundir.load import load_run, save_config, use_run_threads
from mannlab.rundir.metrics_log import MetricsLog, read_metrics, truncate_metrics

__all__ = [
    "load_checkpoint",
    "save_checkpoint",
    "seal_checkpoint",
    "load_run",
    "save_config",
    "use_run_threads",
    "MetricsLog",
    "read_metrics",
    "truncate_metrics",
    "replacing",
    "write_atomic",
]
