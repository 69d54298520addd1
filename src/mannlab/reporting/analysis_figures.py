"""Figures of the analyses: TARDIS paper figures 3 and 5, and gradient flow against distance.

Each function draws one figure, saves it as PNG when ``path`` is given (and
closes it), and returns it, like mannlab.reporting.figures.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from mannlab.reporting.figures import finish_figure

SCHEME_LABELS = {"tardis": "TARDIS", "umann": "uMANN", "urmann": "urMANN"}
POLICY_STYLES = {"written": "-", "empty": "--"}


def wormhole_lengths(
    curves: Mapping[str, Any], cells: int, simulations: int, path: str | os.PathLike | None = None
) -> Figure:
    """Figure 3: eq. 40 path length stored in each cell against time, one panel per scheme.

    ``curves`` maps a scheme name to its :class:`mannlab.analysis.wormhole.LengthCurves`.
    Thin grey lines: the k cells (mean over simulations); black: their mean;
    red dashed: the analytic t/k - 1 (0 while the memory fills).
    """
    fig, axes = plt.subplots(
        1, len(curves), figsize=(4.2 * len(curves), 3.6), sharey=True, layout="constrained", squeeze=False
    )
    for ax, (scheme, curve) in zip(axes[0], curves.items()):
        t = np.arange(1, curve.mean.shape[0] + 1)
        ax.plot(t, curve.cells_mean, color="0.6", lw=0.4)
        ax.plot(t, curve.mean, color="black", lw=1.6, label="mean over cells")
        ax.plot(t, curve.analytic, color="tab:red", ls="--", lw=1.2, label="t/k - 1")
        ax.set_title(
            f"{SCHEME_LABELS.get(scheme, scheme)}: T/k - 1 = {curve.analytic[-1]:g}, "
            f"simulated {curve.mean[-1]:.2f}",
            fontsize=9,
        )
        ax.set_xlabel("time step t")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("expected wormhole path length in a cell")
    axes[0, 0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"eq. 40, k = {cells} cells, {simulations} simulations (grey: each cell)", fontsize=10)
    return finish_figure(fig, path)


def wormhole_paths(
    rows: Sequence[Mapping], t0: int, t1: int, simulations: int, path: str | os.PathLike | None = None
) -> Figure:
    """Figure 5: (a) expected shortest-path length h_t0 -> h_t1 and (b) the part of it
    outside wormholes, against the memory size, one colour per scheme and one line
    style per policy for unwritten cells (rows from ``path_sweep``), log y axis."""
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.0), layout="constrained")
    keys = list(dict.fromkeys((r["scheme"], r["unwritten"]) for r in rows))
    colours = {s: f"C{i}" for i, s in enumerate(dict.fromkeys(s for s, _ in keys))}
    for ax, field, title in (
        (axes[0], "total", f"a) shortest path h_{t0} -> h_{t1}"),
        (axes[1], "outside", "b) length outside wormholes"),
    ):
        for scheme, policy in keys:
            group = [r for r in rows if (r["scheme"], r["unwritten"]) == (scheme, policy)]
            ax.errorbar(
                [r["cells"] for r in group],
                [r[f"{field}_mean"] for r in group],
                yerr=[r[f"{field}_sem"] for r in group],
                color=colours[scheme],
                ls=POLICY_STYLES.get(policy, ":"),
                marker="o",
                ms=3,
                lw=1.2,
                capsize=2,
                label=f"{SCHEME_LABELS.get(scheme, scheme)}, unwritten: {policy}",
            )
        ax.axvline(t1, color="0.5", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_yticks([1, 2, 3, 5, 10, 20, 30, 50])
        ax.set_xlabel("memory size k (cells)")
        ax.set_ylabel("expected length (edges)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"dependency {t1} -> {t0}, {simulations} simulations per point (dotted line: k = t1)", fontsize=10
    )
    return finish_figure(fig, path)


def gradient_flow(
    results: Mapping[str, Any],
    ylabel: str = "Jacobian norm",
    title: str = "",
    path: str | os.PathLike | None = None,
) -> Figure:
    """Jacobian norm against distance t1 - t0 (log y), one colour per model: the mean over
    samples (solid, with a band of +- one standard error) and the median (dotted), since
    a few samples can dominate the mean (``results`` maps a label to a GradientFlow)."""
    fig = plt.figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, flow in results.items():
        floor = np.finfo(np.float64).tiny
        (line,) = ax.plot(flow.distances, np.maximum(flow.mean, floor), lw=1.4, label=label)
        ax.fill_between(
            flow.distances,
            np.maximum(flow.mean - flow.sem, floor),
            flow.mean + flow.sem,
            color=line.get_color(),
            alpha=0.2,
            lw=0,
        )
        ax.plot(flow.distances, np.maximum(flow.median, floor), color=line.get_color(), lw=1.0, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("distance t1 - t0 (steps)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="major")
    ax.legend(fontsize=8, title="solid: mean, dotted: median", title_fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return finish_figure(fig, path)
