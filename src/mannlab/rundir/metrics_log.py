"""metrics.jsonl: one JSON object per line, appended as training goes.

Each line is ``{"step": int, "split": "train" | "val", "wall": seconds, ...metrics}``;
validation lines also carry ``cpu`` (training CPU seconds so far) and, for sampled
tasks, ``length`` and ``multiple`` (of the training length).
A crash can cut the last line short, so the reader skips a broken final line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from mannlab.errors import DataError
from mannlab.file_kinds import read_regular
from mannlab.rundir.files import UNREADABLE, replacing
from mannlab.safe_writes import open_for_writing, refuse_link

# a row is a few hundred bytes: a million logged steps fit many times over
MAX_BYTES = 1 << 30


class MetricsLog:
    """Appends metric lines to ``path`` and hands each row to ``loggers`` (rundir.loggers:
    tensorboard, csv, wandb)."""

    def __init__(self, path: str | Path, loggers: Sequence[Any] = ()):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._loggers = list(loggers)
        refuse_link(self.path)  # before reading it: a planted link is neither read nor written
        self.rows = len(read_metrics(self.path)) if os.path.lexists(self.path) else 0
        self._file = open_for_writing(self.path, "a")  # never through a link planted there

    def log(self, step: int, split: str, metrics: Mapping[str, Any], wall: float, **extra: Any) -> None:
        row = {
            "step": int(step),
            "split": split,
            **extra,
            **{k: _number(v) for k, v in metrics.items()},
            "wall": round(float(wall), 3),
        }
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()  # a reader (plot, tail -f) sees every line right away
        self.rows += 1
        for logger in self._loggers:
            logger.log(row, {k: row[k] for k in metrics})

    def close(self) -> None:
        self._file.close()
        for logger in self._loggers:
            logger.close()

    def __enter__(self) -> "MetricsLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a metrics.jsonl file; a truncated last line is ignored. DataError for a
    file that is not UTF-8 JSON lines, not a regular file or larger than ``MAX_BYTES``."""
    path = Path(path)
    try:
        lines = read_regular(path, DataError, MAX_BYTES).decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except UNREADABLE:
            if number == len(lines):
                break  # cut short by a crash mid-write
            raise DataError(f"{path}, line {number}: not a JSON object: {line[:80]!r}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}, line {number}: expected a JSON object, got {line[:80]!r}")
        rows.append(row)
    return rows


def truncate_metrics(path: str | Path, step: int, rows: int | None = None) -> None:
    """Keep only rows up to ``step``, and only the first ``rows`` rows if given (used on
    resume with the checkpoint's step and row count, so nothing is logged twice)."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    kept = [row for row in read_metrics(path)[:rows] if row.get("step", 0) <= step]
    with replacing(path) as fh:
        fh.writelines(json.dumps(row) + "\n" for row in kept)


def _number(value: Any) -> float:
    return float(value)  # tensors and numpy scalars; json writes NaN as NaN


class NullLog:
    """A MetricsLog that writes nothing: the log of ranks other than 0 in data-parallel
    training (rank 0 alone writes the run directory)."""

    rows = 0

    def log(self, step: int, split: str, metrics: Mapping[str, Any], wall: float, **extra: Any) -> None:
        """Discard the row."""

    def close(self) -> None:
        """Nothing to close."""

    def __enter__(self) -> "NullLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
