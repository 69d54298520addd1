"""Where the reads land over training: the read-target numbers a run logged at each
validation (``train.val_reads``; evaluation/reads.py) against the step, one panel."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from mannlab.errors import DataError
from mannlab.reporting.figures import _by_step, _read_rows, finish_figure

#: The logged keys, in the order and with the labels the figure uses.
READ_SERIES = {
    "reads_on_source": "on the cell written at the due step",
    "reads_ahead_1": "on the cell written 1 step later",
    "reads_ahead_2": "on the cell written 2 steps later",
    "reads_behind_1": "on the cell written 1 step earlier",
    "query_reads_on_source": "query's reads on the queried item's cells",
    "source_kept": "due cell not written over",
}


def has_read_curves(metrics_path_or_rows: str | os.PathLike | Iterable[Mapping[str, Any]]) -> bool:
    """Whether the run logged where its reads land."""
    return any("reads_on_source" in r for r in _read_rows(metrics_path_or_rows) if r.get("split") == "val")


def read_curves(
    metrics_path_or_rows: str | os.PathLike | Iterable[Mapping[str, Any]],
    path: str | os.PathLike | None = None,
    title: str | None = None,
) -> Figure:
    """Plot the read-target fractions of the validations at the training length (multiple 1)
    against the step, on a linear 0..1 axis.

    Raises:
        DataError: no validation row has ``reads_on_source`` (the run did not set
            ``train.val_reads``, or its task names no source steps).
    """
    rows = [r for r in _read_rows(metrics_path_or_rows) if r.get("split") == "val"]
    rows = [r for r in rows if r.get("multiple", 1) == 1 and "reads_on_source" in r]
    if not rows:
        raise DataError(
            "no validation row has reads_on_source: train with --set train.val_reads=true on a task "
            "that names its source steps (copy, repeat copy, associative recall)"
        )
    fig = plt.figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for key, label in READ_SERIES.items():
        if any(key in r for r in rows):
            steps, values = _by_step([r for r in rows if key in r], key)
            style = {"ls": "--"} if key == "source_kept" else {"marker": "o", "ms": 2.5}
            ax.plot(steps, values, label=label, lw=1.2, **style)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("fraction of read weight (validation)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return finish_figure(fig, path)
