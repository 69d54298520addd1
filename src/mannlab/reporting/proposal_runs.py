"""ARMIN figure 2 and table 3 over several runs of a proposal task: one curve per label, the
runs under one label (a model's seeds) drawn as their mean with a min-max band.

The runs' numbers come from their ``eval-<split>.json`` (written by `mannlab eval RUN`,
mannlab.evaluation.proposals); nothing is evaluated or built here.

    compare_proposals({"gru": [run0, run1, run2], "armin": [...]}, "figs/synthetic")
    # -> figs/synthetic-ar-vs-proposals.png, figs/synthetic-recall-vs-tiou.png and the table
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from mannlab.errors import DataError
from mannlab.evaluation.proposals import EVAL_FILE
from mannlab.reporting.proposal_figures import plot_recall_vs_proposals, plot_recall_vs_tiou
from mannlab.rundir.files import read_json

#: the table's columns: ARMIN table 3 (recall at 1,000 proposals) and AR at three sizes (on
#: short videos, as the synthetic ones, 1,000 proposals recall nearly everything: AR at 50
#: and 100 then tells the models apart)
COLUMNS = ("recall@1000_tiou0.6", "recall@1000_tiou0.8", "ar@50", "ar@100", "ar@1000")


def read_proposal_eval(run_dir: str | os.PathLike, split: str = "test") -> dict[str, Any]:
    """The proposal evaluation of one run; DataError saying how to make it when missing."""
    path = Path(run_dir) / EVAL_FILE.format(split=split)
    if not path.is_file():
        raise DataError(
            f"{path} not found: evaluate the run first with `mannlab eval {run_dir} --split {split}`"
        )
    found = read_json(path)
    if not isinstance(found, dict) or "curves" not in found or "summary" not in found:
        raise DataError(f"{path}: not a proposal evaluation (no curves); is {run_dir} a proposal-task run?")
    return found


def group_runs(specs: Sequence[str], split: str = "test") -> dict[str, list[str]]:
    """``LABEL=RUN`` or ``RUN`` specs grouped by label; a run without one is labelled by its
    model (from its evaluation), so the seeds of a model share a curve."""
    groups: dict[str, list[str]] = {}
    for spec in specs:
        label, _, run = str(spec).rpartition("=")
        groups.setdefault(label or str(read_proposal_eval(run, split).get("model", run)), []).append(run)
    return groups


def compare_proposals(
    groups: Mapping[str, Sequence[str | os.PathLike]],
    out: str | os.PathLike,
    split: str = "test",
    title: str | None = None,
) -> tuple[dict[str, str], str]:
    """Figure 2's two plots of the labelled groups of runs (``out`` + "-ar-vs-proposals.png"
    and "-recall-vs-tiou.png") and a markdown table of table 3's numbers per label (mean and
    min-max over the group's runs). Returns (figure paths, table)."""
    base = str(out).removesuffix(".png")
    evals = {label: [read_proposal_eval(run, split) for run in runs] for label, runs in groups.items()}
    ar = {label: [e["curves"]["recall_vs_proposals"] for e in found] for label, found in evals.items()}
    tiou = {label: [e["curves"]["recall_vs_tiou"] for e in found] for label, found in evals.items()}
    paths = {
        "recall_vs_proposals": f"{base}-ar-vs-proposals.png",
        "recall_vs_tiou": f"{base}-recall-vs-tiou.png",
    }
    plot_recall_vs_proposals(ar, paths["recall_vs_proposals"], title=title)
    plot_recall_vs_tiou(tiou, paths["recall_vs_tiou"], title=title)
    return paths, proposal_table(evals)


def proposal_table(evals: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Markdown: a row per label, table 3's recall at 1,000 proposals (tIoU 0.6, 0.8) and AR at
    50, 100 and 1,000 proposals, as the mean over the label's runs with [min, max] when several."""
    lines = [
        "| model | runs | " + " | ".join(COLUMNS) + " |",
        "|---|---:|" + "---:|" * len(COLUMNS),
    ]
    for label, found in evals.items():
        cells = []
        for key in COLUMNS:
            values = np.array([e["summary"][key] for e in found], dtype=np.float64)
            cell = f"{values.mean():.3f}"
            if len(values) > 1:
                cell += f" [{values.min():.3f}, {values.max():.3f}]"
            cells.append(cell)
        lines.append(f"| {label} | {len(found)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
