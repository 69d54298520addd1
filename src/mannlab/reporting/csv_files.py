"""CSV output of the analyses: one row per dict, columns in the order of the first row."""

from __future__ import annotations

import csv
import os
from typing import Any, Mapping, Sequence

from mannlab.rundir.files import replacing


def write_csv(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write ``rows`` (dicts with the same keys) to ``path``; floats with 6 significant digits."""
    if not rows:
        raise ValueError(f"no rows to write to {os.fspath(path)}")
    with replacing(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{float(v):.6g}" if _is_float(v) else v for k, v in row.items()})


def _is_float(value: Any) -> bool:
    return hasattr(value, "__float__") and not isinstance(value, (bool, int, str))
