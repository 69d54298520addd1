"""Where the metric rows go besides metrics.jsonl: ``train.logger`` (``--logger``) names any of

    tensorboard  <run_dir>/tensorboard/, scalars "<split>/<metric>" ("val_len<L>/..." per
                 validation length): pip install "mannlab[tensorboard]", then
                 tensorboard --logdir runs
    csv          <run_dir>/metrics.csv: the rows of metrics.jsonl as a table, a column per key
    wandb        a Weights & Biases run named after the run directory, with the run config
                 (pip install wandb; WANDB_MODE=offline keeps it in <run_dir>/wandb/)

A logger has ``log(row, metrics)`` (the metrics.jsonl row, and its metric values alone) and
``close()``; ``MetricsLog`` calls them for every row.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mannlab.config import TrainConfig
from mannlab.errors import ConfigError
from mannlab.file_kinds import read_regular
from mannlab.rundir.files import replacing, write_atomic
from mannlab.rundir.metrics_log import read_metrics
from mannlab.safe_writes import make_directory, open_for_writing, refuse_link


def logger_names(train: TrainConfig) -> list[str]:
    """The loggers a run asks for: ``train.logger``, and tensorboard if ``train.tensorboard``."""
    names = [name.strip() for name in train.logger.split(",") if name.strip()]
    return list(dict.fromkeys(names + (["tensorboard"] if train.tensorboard else [])))


def check_loggers(train: TrainConfig) -> None:
    """ConfigError now, before a run writes anything, if an asked-for logger cannot work."""
    for name in logger_names(train):
        if name == "tensorboard":
            _summary_writer_class()
        elif name == "wandb":
            _wandb()


def open_loggers(config: Any, run_dir: str | Path) -> list[Any]:
    """The loggers of ``config`` (a RunConfig) writing into ``run_dir``."""
    run_dir = Path(run_dir)
    opened: list[Any] = []
    for name in logger_names(config.train):
        if name == "tensorboard":
            opened.append(TensorBoardLogger(make_directory(run_dir / "tensorboard")))
        elif name == "csv":
            opened.append(CsvLogger(run_dir / "metrics.csv", run_dir / "metrics.jsonl"))
        else:
            opened.append(WandbLogger(run_dir, config.to_dict()))
    return opened


def scalar_name(row: Mapping[str, Any], key: str) -> str:
    """ "train/loss", "val_len20/bce": one curve per split and validation length."""
    prefix = row["split"] if "length" not in row else f"{row['split']}_len{row['length']}"
    return f"{prefix}/{key}"


class TensorBoardLogger:
    def __init__(self, log_dir: str | Path):
        self.writer = _summary_writer_class()(log_dir=str(log_dir))

    def log(self, row: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(scalar_name(row, key), value, row["step"])

    def close(self) -> None:
        self.writer.close()


class CsvLogger:
    """metrics.csv: a row per metrics.jsonl line. Rows differ in keys (train, validation per
    length, test), so a key seen for the first time rewrites the file with a new column; on a
    resume the table starts from the (truncated) metrics.jsonl."""

    def __init__(self, path: str | Path, jsonl: str | Path | None = None):
        self.path = Path(path)
        self.rows = read_metrics(jsonl) if jsonl is not None and Path(jsonl).exists() else []
        self.columns: list[str] = []
        self._rewrite()

    def log(self, row: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        self.rows.append(dict(row))
        if set(row) <= set(self.columns):
            with open_for_writing(self.path, "a", newline="") as fh:
                csv.DictWriter(fh, self.columns).writerow(row)
        else:
            self._rewrite()

    def _rewrite(self) -> None:
        self.columns = list(dict.fromkeys(["step", "split", *(k for r in self.rows for k in r)]))
        with replacing(self.path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, self.columns)
            writer.writeheader()
            writer.writerows(self.rows)

    def close(self) -> None:
        """Every row is on disk when log returns."""


class WandbLogger:
    """A wandb run in ``run_dir`` named after it (resumed by that id), the config attached."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any]):
        wandb = _wandb()
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "mannlab"),
            dir=str(run_dir),
            name=run_dir.name,
            config=dict(config),
            resume="allow",
            id=_wandb_id(run_dir),
        )

    def log(self, row: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        self.run.log({scalar_name(row, key): value for key, value in metrics.items()}, step=row["step"])

    def close(self) -> None:
        self.run.finish()


def _wandb_id(run_dir: Path) -> str:
    """A wandb run id kept in the run directory, so a resumed run continues the same one."""
    path = make_directory(run_dir / "wandb") / "run_id"
    refuse_link(path)  # read as well as written: a link would send another file's start to wandb
    if not os.path.lexists(path):
        write_atomic(path, os.urandom(6).hex())
    return read_regular(path, ConfigError, 1 << 10).decode("ascii", "replace").strip()


def _summary_writer_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            "the tensorboard logger needs the tensorboard package: pip install "
            "'mannlab[tensorboard]' (or drop it from train.logger / set "
            "train.tensorboard=false)"
        ) from None
    return SummaryWriter


def _wandb():
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            "the wandb logger needs the wandb package: pip install wandb (or drop it from train.logger)"
        ) from None
    return wandb
