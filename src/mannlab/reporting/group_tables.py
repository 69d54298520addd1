"""Per-group test error tables of data-set runs (bAbI tasks, MNIST digits, SNLI labels) for
`mannlab report`: the layout of the bAbI tables of the D-NTM and partially non-recurrent papers.

Each run's numbers come from its ``eval-<split>.json``, written by
``mannlab eval RUN --split test``. A column gathers the runs whose
config.toml agree on everything but the seed, the run directory, the data directory and the
bAbI task selection (task.tasks, task.language): the seeds of one jointly trained model (the
partially non-recurrent paper's set-up), or one model per bAbI task (the D-NTM paper's, e.g.
``runs/babi-dntm-soft-1step/qa<N>/seed0``). Its label is the runs' common directory. A cell
is the error in percent, the mean over the seeds that evaluated that group. Below the groups:
the mean over groups, the number of failed groups (error above the evaluation's threshold, 5 %
for bAbI) as the papers report, and the error over all examples (what the MNIST papers report as
test accuracy). One table per task."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from mannlab.errors import DataError
from mannlab.rundir.files import read_json

# config keys that do not separate columns: which seed, where, and which bAbI tasks
_NOT_A_COLUMN = {("seed",), ("run_dir",), ("task", "tasks"), ("task", "language"), ("task", "data_dir")}

__all__ = ["GroupEval", "find_group_evals", "by_task", "group_error_rows", "column_key"]


@dataclass
class GroupEval:
    """One run's evaluation on a split: error per group (a fraction) and the fail threshold."""

    path: Path
    column: str
    task: str
    per_group: dict[str, float]
    error: float | None  # over all examples
    fail_threshold: float | None


def find_group_evals(run_paths: list[Path], split: str = "test") -> list[GroupEval]:
    """The ``eval-<split>.json`` of each run that has one and reports errors per group
    (``column`` left empty: the caller names the columns)."""
    evals = []
    for path in run_paths:
        file = path / f"eval-{split}.json"
        if not file.is_file():
            continue
        data = read_json(file)
        groups = data.get("per_group") if isinstance(data, dict) else None
        if not groups:
            continue
        try:
            per_group = {str(name): float(row["error"]) for name, row in groups.items()}
        except (TypeError, KeyError, ValueError):
            raise DataError(f"{file}: expected per_group entries with an 'error' number") from None
        threshold, error = data.get("fail_threshold"), data.get("error")
        evals.append(
            GroupEval(
                path,
                "",
                str(data.get("task", "?")),
                per_group,
                None if error is None else float(error),
                None if threshold is None else float(threshold),
            )
        )
    return evals


def column_key(config: dict) -> str:
    """The run's config without seed, place and bAbI task selection, as a comparable string:
    runs with equal keys share a column."""
    return json.dumps(_without(config), sort_keys=True, default=str)


def _without(table: dict, prefix: tuple = ()) -> dict:
    return {
        k: _without(v, prefix + (k,)) if isinstance(v, dict) else v
        for k, v in table.items()
        if prefix + (k,) not in _NOT_A_COLUMN
    }


def _natural(name: str) -> tuple:
    """qa2 before qa10: digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def group_error_rows(evals: list[GroupEval]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: a row per group, a column per ``column``; then the mean, the failed
    groups and the error over all examples. ``evals`` should be of one task (see ``by_task``)."""
    columns = sorted({e.column for e in evals})
    groups = sorted({g for e in evals for g in e.per_group}, key=_natural)
    means: dict[str, dict[str, float]] = {}
    for column in columns:
        cell_evals = [e for e in evals if e.column == column]
        means[column] = {
            g: statistics.fmean(e.per_group[g] for e in cell_evals if g in e.per_group)
            for g in groups
            if any(g in e.per_group for e in cell_evals)
        }
    thresholds = {e.fail_threshold for e in evals if e.fail_threshold is not None}
    rows = [[g] + [_percent(means[c].get(g)) for c in columns] for g in groups]
    rows.append(
        ["**mean**"] + [_percent(statistics.fmean(means[c].values()) if means[c] else None) for c in columns]
    )
    if len(thresholds) == 1:
        limit = thresholds.pop()
        rows.append(
            [f"failed (> {100 * limit:g} %)"]
            + [f"{sum(v > limit for v in means[c].values())} of {len(means[c])}" for c in columns]
        )
    overall = {c: [e.error for e in evals if e.column == c and e.error is not None] for c in columns}
    rows.append(
        ["all examples"] + [_percent(statistics.fmean(overall[c]) if overall[c] else None) for c in columns]
    )
    return ["group"] + [f"`{c}`" for c in columns], rows


def by_task(evals: list[GroupEval]) -> dict[str, list[GroupEval]]:
    """The evaluations grouped by task name, in name order."""
    tasks: dict[str, list[GroupEval]] = {}
    for e in sorted(evals, key=lambda e: e.task):
        tasks.setdefault(e.task, []).append(e)
    return tasks


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"
