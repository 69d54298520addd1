"""Figures of temporal action proposals: ARMIN figure 2 (as SST plots them), one curve per model.

- :func:`plot_recall_vs_proposals` (figure 2 left): average recall (tIoU 0.5:0.05:1.0)
  against the average number of proposals per video, log x axis.
- :func:`plot_recall_vs_tiou` (figure 2 right): recall at 1,000 average proposals against
  the tIoU threshold.

The curves come from :mod:`mannlab.evaluation.proposal_recall`; this module only draws. A
curve is ``(x, y)``; a list of curves under one name (one per seed, on the same x) is drawn
as their mean with a min-max band. Like :mod:`mannlab.reporting.figures`, each function
returns the Figure, and saves it as PNG (atomically) and closes it when ``path`` is given.
:func:`draw_evaluation_figures` draws both for one evaluation of a run (`mannlab eval`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from mannlab.reporting.figures import finish_figure
from mannlab.safe_writes import make_directory

__all__ = ["plot_recall_vs_proposals", "plot_recall_vs_tiou", "draw_evaluation_figures"]

#: the figures of a run's evaluation, in its directory (``{split}`` filled in)
EVALUATION_FIGURES = {
    "recall_vs_proposals": "figures/proposals_{split}_ar_vs_proposals.png",
    "recall_vs_tiou": "figures/proposals_{split}_recall_vs_tiou.png",
}

Curve = tuple[Sequence[float], Sequence[float]]
Curves = Mapping[str, Curve | Sequence[Curve]]


def plot_recall_vs_proposals(
    curves: Curves, path: str | os.PathLike | None = None, title: str | None = None
) -> Figure:
    """ARMIN figure 2 left: average recall against the average number of proposals.

    ``curves`` maps a model name to ``(numbers, average recall)`` or to a list of them (one
    per seed, same numbers): mean line and min-max band. The x axis is logarithmic (points
    at N <= 0 cannot be drawn and are left out), y runs from 0 to 1.
    """
    fig, ax = _axes()
    _draw(ax, curves, positive_x=True)
    ax.set_xscale("log")
    ax.set_xlabel("average number of proposals")
    ax.set_ylabel("average recall")
    return _finish(fig, ax, title, path)


def plot_recall_vs_tiou(
    curves: Curves,
    path: str | os.PathLike | None = None,
    title: str | None = None,
    n_proposals: int = 1000,
) -> Figure:
    """ARMIN figure 2 right: recall at ``n_proposals`` (1,000) average proposals against tIoU.

    ``curves`` maps a model name to ``(tious, recall)`` or to a list of them (one per seed,
    same tIoUs): mean line and min-max band. Both axes run from 0 to 1.
    """
    fig, ax = _axes()
    _draw(ax, curves, positive_x=False)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("tIoU")
    ax.set_ylabel(f"recall@{n_proposals} proposals")
    return _finish(fig, ax, title, path)


def draw_evaluation_figures(
    evaluation: Mapping[str, Any], out_dir: str | os.PathLike, label: str = "model"
) -> dict[str, str]:
    """Figure 2's two plots of one evaluation (evaluate_proposals's result: its ``split`` and
    ``curves``) in ``out_dir`` (a run directory), the curve named ``label``; their paths by
    name (the keys of EVALUATION_FIGURES)."""
    split, curves = evaluation["split"], evaluation["curves"]
    paths = {name: str(Path(out_dir) / path.format(split=split)) for name, path in EVALUATION_FIGURES.items()}
    make_directory(Path(out_dir) / "figures")  # mannlab's name: never a link planted there
    plot_recall_vs_proposals({label: curves["recall_vs_proposals"]}, paths["recall_vs_proposals"])
    plot_recall_vs_tiou({label: curves["recall_vs_tiou"]}, paths["recall_vs_tiou"])
    return paths


def _axes() -> tuple[Figure, Axes]:
    fig = plt.figure(figsize=(5.2, 4.2), layout="constrained")
    return fig, fig.add_subplot()


def _finish(fig: Figure, ax: Axes, title: str | None, path: str | os.PathLike | None) -> Figure:
    ax.set_ylim(0.0, 1.0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title)
    return finish_figure(fig, path)


def _draw(ax: Axes, curves: Curves, positive_x: bool) -> None:
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError("curves must be a non-empty dict: name -> (x, y) or a list of (x, y)")
    for name, value in curves.items():
        x, ys = _seeds(name, value)
        keep = x > 0 if positive_x else np.ones_like(x, dtype=bool)
        x, ys = x[keep], ys[:, keep]
        (line,) = ax.plot(x, ys.mean(axis=0), lw=1.6, label=name if ys.shape[0] == 1 else f"{name} (mean)")
        if ys.shape[0] > 1:
            ax.fill_between(
                x,
                ys.min(axis=0),
                ys.max(axis=0),
                color=line.get_color(),
                alpha=0.2,
                lw=0,
                label=f"{name} (min-max of {ys.shape[0]})",
            )


def _seeds(name: str, value: Any) -> tuple[np.ndarray, np.ndarray]:
    """One curve ``(x, y)`` or a list of curves on the same x, as x (n,) and ys (seeds, n)."""
    runs = [value] if _is_curve(value) else list(value) if isinstance(value, (list, tuple)) else []
    if not runs or not all(_is_curve(run) for run in runs):
        raise ValueError(f"curve {name!r} must be (x, y) of equal-length 1-d arrays, or a list of them")
    x = np.asarray(runs[0][0], dtype=np.float64)
    for i, (xi, _) in enumerate(runs):
        xi = np.asarray(xi, dtype=np.float64)
        if xi.shape != x.shape or not np.allclose(xi, x):
            raise ValueError(
                f"curve {name!r}: seed {i} has other x values than seed 0; a band needs the same x"
            )
    ys = np.stack([np.asarray(y, dtype=np.float64) for _, y in runs])
    return x, ys


def _is_curve(value: Any) -> bool:
    """Whether ``value`` is one ``(x, y)`` pair of equal-length 1-d numeric arrays."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return False
    try:
        x = np.asarray(value[0], dtype=np.float64)
        y = np.asarray(value[1], dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return x.ndim == 1 and y.ndim == 1 and x.shape == y.shape and x.size > 0
