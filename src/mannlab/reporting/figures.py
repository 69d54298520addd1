"""Figures: memory access over time (as in the NTM paper), learning curves, and the
validation curves of several runs in one picture.

The functions return a :class:`matplotlib.figure.Figure`. When ``path`` is
given the figure is saved as PNG and closed (so calling them in a loop does not
accumulate open figures); without ``path`` the caller owns the figure.

The module never selects a matplotlib backend: on a machine without a screen
matplotlib falls back to Agg by itself, and scripts may call
``matplotlib.use("Agg")`` before importing pyplot.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from mannlab.errors import DataError
from mannlab.rundir.files import replacing
from mannlab.rundir.metrics_log import read_metrics

__all__ = ["memory_access", "learning_curve", "compare_curves"]

# Auto-crop only when memories are larger than this many slots; small memories
# are shown whole so the picture stays comparable between runs.
AUTO_CROP_SLOTS = 32
# A slot counts as "used" once any weighting on it exceeds this value.
USED_WEIGHT = 0.01
# Above this many heads of one kind, the heads are summed into one panel.
MAX_HEAD_PANELS = 4

_BIT_CMAP = "viridis"
_WEIGHT_CMAP = "gray"


# ----------------------------------------------------------------------------
# memory_access


def memory_access(
    trace: Any,
    inputs: Any,
    targets: Any = None,
    outputs: Any = None,
    mask: Any = None,
    path: str | os.PathLike | None = None,
    index: int = 0,
    title: str | None = None,
    max_slots: int | None = None,
    *,
    logits: bool = True,
) -> Figure:
    """Draw inputs, targets, outputs and the heads' weightings of one sequence.

    Panels share the time axis (left to right), top to bottom: inputs
    (channel x time), targets, outputs, then one panel per write head and per
    read head (memory slot x time). With more than ``MAX_HEAD_PANELS`` heads of
    one kind, those heads are summed into a single panel and the label says so.
    Bits (inputs, targets, outputs) use viridis on a fixed 0..1 scale; weightings
    use grayscale from 0 to their maximum, so diffuse weightings of an untrained
    model stay visible (the colour bars give the scale).

    Args:
        trace: NamedTuple from ``model(x, return_trace=True)`` with at least
            ``read_weights (B, T, R, N)`` and ``write_weights (B, T, H, N)``;
            other fields are ignored.
        inputs: ``(B, T, C_in)`` model inputs.
        targets: optional ``(B, T, C_out)`` targets.
        outputs: optional ``(B, T, C_out)`` model outputs. Logits by default
            (what the models return); they are drawn as probabilities
            ``sigmoid(outputs)``. Pass ``logits=False`` if they already are.
        mask: optional ``(B, T)``; steps where it is 0 are left blank in the
            targets and outputs panels (they are not scored).
        path: if given, save a PNG there (parent folders are created) and
            close the figure.
        index: which batch element to draw.
        title: optional figure title.
        max_slots: show at most this many memory slots, as a window starting
            at the first used slot (weight > 0.01). ``None`` crops to the used
            slot range automatically when there are more than 32 slots and at
            most three quarters of them are used. Any
            crop is written in the axis label, e.g. ``memory slot (3-17 of 128)``.
        logits: whether ``outputs`` are logits (default) or probabilities.

    All arrays may be torch tensors (any device, with grad) or numpy arrays.

    Returns:
        The matplotlib Figure.

    Raises:
        ValueError: a missing trace field, wrong number of dimensions,
            inconsistent batch/time sizes or ``index`` out of range.
    """
    read_w = _trace_field(trace, "read_weights")
    write_w = _trace_field(trace, "write_weights")
    if read_w.shape[:2] != write_w.shape[:2] or read_w.shape[3] != write_w.shape[3]:
        raise ValueError(
            "trace.read_weights (B, T, R, N) and trace.write_weights (B, T, H, N) must agree "
            f"on B, T and N; got {tuple(read_w.shape)} and {tuple(write_w.shape)}"
        )
    batch, steps, _, slots = read_w.shape
    if not -batch <= index < batch:
        raise ValueError(f"index must be in [0, {batch}) for a batch of {batch}; got {index}")

    x = _sequence(inputs, "inputs", batch, steps, index)
    y = _sequence(targets, "targets", batch, steps, index) if targets is not None else None
    out = _sequence(outputs, "outputs", batch, steps, index) if outputs is not None else None
    if out is not None and logits:
        out = _sigmoid(out)
    scored = _mask_row(mask, batch, steps, index) if mask is not None else None

    read_w, write_w = read_w[index], write_w[index]  # (T, R, N), (T, H, N)
    lo, hi = _slot_window(np.concatenate([read_w, write_w], axis=1), max_slots)
    slot_label = "memory slot" if (lo, hi) == (0, slots) else f"memory slot ({lo}-{hi - 1} of {slots})"

    # Each panel: (title, image rows x time, row offset, y label, colour map, masked?)
    panels = [("inputs", x.T, 0, "channel", _BIT_CMAP, False)]
    if y is not None:
        panels.append(("targets", y.T, 0, "channel", _BIT_CMAP, True))
    if out is not None:
        name = "outputs (sigmoid of logits)" if logits else "outputs"
        panels.append((name, out.T, 0, "channel", _BIT_CMAP, True))
    for kind, w in (("write", write_w), ("read", read_w)):
        for name, image in _head_images(kind, w):
            panels.append((name, image[lo:hi], lo, slot_label, _WEIGHT_CMAP, False))

    ratios = _height_ratios([p[1].shape[0] for p in panels])
    fig = _new_figure(steps, ratios)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False, height_ratios=ratios)[:, 0]
    for ax, (name, image, offset, ylabel, cmap, use_mask) in zip(axes, panels):
        if use_mask and scored is not None:
            image = np.ma.masked_where(np.broadcast_to(~scored, image.shape), image)
        # Bits use a fixed 0..1 scale; weightings scale to their own maximum so
        # that diffuse weightings (an untrained model) are still visible.
        _draw_image(fig, ax, image, offset, cmap, fixed_unit_scale=cmap == _BIT_CMAP)
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_ylabel(ylabel, fontsize=8)
    axes[-1].set_xlabel("time")
    if title:
        fig.suptitle(title)
    return finish_figure(fig, path)


def _trace_field(trace: Any, name: str) -> np.ndarray:
    """``trace.<name>`` as a 4-d float numpy array, or a clear ValueError."""
    if not hasattr(trace, name):
        fields = getattr(trace, "_fields", None)
        have = f"its fields are {list(fields)}" if fields is not None else f"got {type(trace).__name__}"
        raise ValueError(
            f"trace must be a NamedTuple with read_weights (B, T, R, N) and write_weights "
            f"(B, T, H, N), as returned by model(x, return_trace=True); it has no '{name}' ({have})"
        )
    array = _to_numpy(getattr(trace, name), f"trace.{name}")
    if array.ndim != 4:
        raise ValueError(f"trace.{name} must be 4-d (B, T, heads, slots); got shape {array.shape}")
    return array


def _to_numpy(value: Any, name: str) -> np.ndarray:
    """A torch tensor (any device, with grad) or array-like as a float numpy array."""
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
        value = value.detach().cpu().float().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a torch tensor or numpy array; got {type(value).__name__}") from err


def _sequence(value: Any, name: str, batch: int, steps: int, index: int) -> np.ndarray:
    """Batch element ``index`` of a ``(B, T, C)`` array, checked against the trace."""
    array = _to_numpy(value, name)
    if array.ndim != 3 or array.shape[0] != batch or array.shape[1] != steps:
        raise ValueError(
            f"{name} must have shape ({batch}, {steps}, channels) like the trace; got {array.shape}"
        )
    return array[index]


def _mask_row(mask: Any, batch: int, steps: int, index: int) -> np.ndarray:
    """Boolean ``(T,)`` row: True where the step is scored."""
    array = _to_numpy(mask, "mask")
    if array.shape != (batch, steps):
        raise ValueError(f"mask must have shape ({batch}, {steps}) like the trace; got {array.shape}")
    return array[index] > 0


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # Written via tanh so large |logits| do not overflow exp().
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _slot_window(weights: np.ndarray, max_slots: int | None) -> tuple[int, int]:
    """Slot range ``[lo, hi)`` to draw, from all heads' weightings ``(T, heads, N)``."""
    slots = weights.shape[-1]
    used = np.flatnonzero((weights > USED_WEIGHT).any(axis=(0, 1)))
    first, last = (int(used[0]), int(used[-1])) if used.size else (0, slots - 1)
    if max_slots is None:
        # Crop only when it helps: a large memory of which a minor part is used.
        if slots > AUTO_CROP_SLOTS and last + 1 - first <= 0.75 * slots:
            return first, last + 1
        return 0, slots
    if max_slots < 1:
        raise ValueError(f"max_slots must be a positive integer or None; got {max_slots}")
    width = min(int(max_slots), slots)
    lo = min(first, slots - width)  # keep the window inside the memory
    return lo, lo + width


def _head_images(kind: str, weights: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Panel titles and ``(N, T)`` images for the heads of one kind; ``weights`` is (T, heads, N)."""
    heads = weights.shape[1]
    if heads > MAX_HEAD_PANELS:
        return [(f"{kind} weightings (sum of {heads} {kind} heads)", weights.sum(axis=1).T)]
    if heads == 1:
        return [(f"{kind} weighting", weights[:, 0].T)]
    return [(f"{kind} weighting, head {h}", weights[:, h].T) for h in range(heads)]


def _new_figure(steps: int, ratios: list[float]) -> Figure:
    """A figure whose width follows the sequence length and height the panel ratios."""
    width = min(max(6.0, 2.5 + 0.12 * steps), 20.0)
    height = 0.6 + 1.1 * sum(ratios)
    return plt.figure(figsize=(width, height), layout="constrained")


def _height_ratios(rows_per_panel: list[int]) -> list[float]:
    """Taller panels for more rows (channels or slots), within 1x..4x of the smallest."""
    return [min(max(rows / 8.0, 1.0), 4.0) for rows in rows_per_panel]


def _draw_image(
    fig: Figure, ax, image: np.ndarray, row_offset: int, cmap: str, fixed_unit_scale: bool
) -> None:
    """Draw ``image (rows, T)`` with time on x, row ``row_offset`` at the top, and a colour bar.

    The colour scale starts at 0 (or the minimum, if negative) and ends at 1 (or the
    maximum, if larger) with ``fixed_unit_scale``, else at the maximum.
    """
    rows, steps = image.shape
    finite = np.ma.compressed(image) if np.ma.isMaskedArray(image) else image.ravel()
    finite = finite[np.isfinite(finite)]
    top = float(finite.max()) if finite.size else 1.0
    vmin = min(0.0, float(finite.min())) if finite.size else 0.0
    vmax = max(1.0, top) if fixed_unit_scale else max(top, 1e-6)
    colours = plt.get_cmap(cmap).with_extremes(bad="white")  # masked (unscored) steps
    im = ax.imshow(
        image,
        aspect="auto",
        interpolation="nearest",
        cmap=colours,
        vmin=vmin,
        vmax=vmax,
        extent=(-0.5, steps - 0.5, row_offset + rows - 0.5, row_offset - 0.5),
    )
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.tick_params(labelsize=7)
    bar = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.03)
    bar.ax.tick_params(labelsize=7)


def finish_figure(fig: Figure, path: str | os.PathLike | None) -> Figure:
    """Save as PNG and close when ``path`` is given; return the figure either way."""
    if path is not None:
        with replacing(path, "wb") as handle:
            fig.savefig(handle, format="png", dpi=100)
        plt.close(fig)
    return fig


# ----------------------------------------------------------------------------
# learning_curve


def learning_curve(
    metrics_path_or_rows: str | os.PathLike | Iterable[Mapping[str, Any]],
    path: str | os.PathLike | None = None,
    metric: str | None = None,
    title: str | None = None,
    threshold: float | None = None,
) -> Figure:
    """Plot the training loss and validation ``metric`` against step (log y axis).

    Args:
        metrics_path_or_rows: a ``metrics.jsonl`` file, a run directory holding
            one, or an iterable of dicts. Each row has ``step``, ``split``
            (``"train"`` or ``"val"``), optionally ``length``, and metric values
            (``bce``, ``bit_error_rate``, ``loss``, ...). Rows of other splits
            are ignored. A truncated last line (a run still writing) is skipped.
        path: if given, save a PNG there (parent folders are created) and close
            the figure.
        metric: the validation metric to plot, one line per validation length;
            default: the task's loss, ``bce`` (nats per bit) or else ``ce`` (the
            cross-entropy of categorical, data-set tasks). The training curve uses
            the same key when train rows have it, otherwise ``loss``, otherwise ``bce``.
        title: optional figure title.
        threshold: draw a dashed horizontal line at this value (e.g. 0.02 for
            "solved" on the copy task).

    If a step was logged twice (a run resumed from an earlier checkpoint), the
    later row wins. Values <= 0 (e.g. a bit error rate of 0) cannot be drawn on
    a log axis; they are drawn at a floor value that the figure states.

    Returns:
        The matplotlib Figure.

    Raises:
        DataError: a malformed line other than the last one, or no train or validation row
            has ``metric`` (an empty or damaged log).
    """
    rows = _read_rows(metrics_path_or_rows)
    train_rows = [r for r in rows if r.get("split") == "train"]
    val_rows = [r for r in rows if r.get("split") == "val"]

    if metric is None:
        metric = next((k for k in ("bce", "ce") if any(k in r for r in train_rows + val_rows)), "bce")
    if not val_rows and not any(metric in r for r in train_rows):
        where = f"{metrics_path_or_rows}: " if isinstance(metrics_path_or_rows, (str, os.PathLike)) else ""
        raise DataError(f"{where}no '{metric}' curve to draw: the run stopped before its first validation")
    if not any(metric in r for r in train_rows + val_rows):
        keys = sorted({k for r in rows for k in r} - {"step", "split", "length"})
        where = f"{metrics_path_or_rows}: " if isinstance(metrics_path_or_rows, (str, os.PathLike)) else ""
        raise DataError(f"{where}no train or val row has metric '{metric}'; metrics present: {keys}")
    train_key = next((k for k in (metric, "loss", "bce") if any(k in r for r in train_rows)), None)
    series: list[tuple[str, np.ndarray, np.ndarray, dict]] = []
    if train_key is not None:
        steps, values = _by_step(train_rows, train_key)
        series.append((f"train {train_key}", steps, values, {"lw": 1.0, "alpha": 0.8}))
    lengths = sorted({r.get("length") for r in val_rows if metric in r}, key=_length_order)
    for length in lengths:
        group = [r for r in val_rows if r.get("length") == length]
        steps, values = _by_step(group, metric)
        label = f"val {metric}" if length is None else f"val {metric} (length {length})"
        series.append((label, steps, values, {"marker": "o", "ms": 3, "lw": 1.2}))

    floor = _log_floor([s[2] for s in series], threshold)
    fig = plt.figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, steps, values, style in series:
        ax.plot(steps, np.where(values > 0, values, floor), label=label, **style)
    if threshold is not None:
        ax.axhline(threshold, color="black", ls="--", lw=1.0, label=f"threshold {threshold:g}")
    if any((s[2] <= 0).any() for s in series):
        ax.text(0.01, 0.01, f"values <= 0 drawn at {floor:.1e}", transform=ax.transAxes, fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(metric if train_key in (None, metric) else f"{metric} / train {train_key}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return finish_figure(fig, path)


X_AXES = {"step": ("step", 1.0), "wall": ("wall", 60.0), "cpu": ("cpu", 60.0)}


def compare_curves(
    runs: Mapping[str, str | os.PathLike],
    path: str | os.PathLike | None = None,
    metric: str | None = None,
    x: str = "step",
    title: str | None = None,
    threshold: float | None = None,
) -> Figure:
    """Validation ``metric`` of several runs in one figure, one line per run (log y axis when
    the values span more than a factor of 10).

    Args:
        runs: label -> run directory or metrics.jsonl.
        x: ``"step"``, or ``"wall"`` / ``"cpu"`` minutes of training (rows without that
            clock are left out; older runs log only wall seconds).
        metric: default ``bce``, else ``bpc``, else ``ce``, whichever the first run has.
            Runs that validate at several lengths contribute their training length
            (``multiple`` 1, or the shortest length).

    Raises:
        ValueError: an unknown ``x``.
        DataError: a run without validation rows of ``metric`` on that clock.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    key, scale = X_AXES[x]
    fig = plt.figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    shown: list[float] = []
    for label, source in runs.items():
        rows = [r for r in _read_rows(source) if r.get("split") == "val"]
        metric = metric or next((k for k in ("bce", "bpc", "ce") if any(k in r for r in rows)), "bce")
        rows = [r for r in rows if metric in r and key in r]
        if not rows:
            raise DataError(
                f"{source}: no validation rows with {metric!r} and {key!r} "
                f"(runs from before CPU seconds were logged have no 'cpu')"
            )
        if any("multiple" in r for r in rows):
            rows = [r for r in rows if r.get("multiple") == 1]
        elif any("length" in r for r in rows):
            shortest = min((r["length"] for r in rows if "length" in r), key=_length_order)
            rows = [r for r in rows if r.get("length") == shortest]
        latest = {float(r["step"]): (float(r[key]) / scale, float(r[metric])) for r in rows}
        xs, ys = zip(*(latest[s] for s in sorted(latest)))
        ax.plot(xs, ys, marker="o", ms=2.5, lw=1.2, label=label)
        shown.extend(ys)
    if threshold is not None:
        ax.axhline(threshold, color="black", ls="--", lw=1.0, label=f"threshold {threshold:g}")
    if min(shown) > 0 and max(shown) / min(shown) > 10:  # a log axis only where it helps
        ax.set_yscale("log")
    ax.set_xlabel({"step": "step", "wall": "wall minutes", "cpu": "CPU minutes"}[x])
    ax.set_ylabel(f"validation {metric}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return finish_figure(fig, path)


def _read_rows(source: str | os.PathLike | Iterable[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """Rows from a metrics.jsonl path, a run directory, or an iterable of dicts."""
    if not isinstance(source, (str, os.PathLike)):
        return [dict(r) for r in source]
    file = os.fspath(source)
    if os.path.isdir(file):
        file = os.path.join(file, "metrics.jsonl")
    rows = read_metrics(file)
    for row in rows:
        if not isinstance(row, dict):
            raise DataError(f"{file}: expected JSON objects, got a {type(row).__name__} row")
    return rows


def _by_step(rows: list[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted steps and values of ``key``; a repeated step keeps its last value."""
    latest: dict[float, float] = {}
    for r in rows:
        if key in r and "step" in r and r[key] is not None:
            latest[float(r["step"])] = float(r[key])
    steps = np.array(sorted(latest), dtype=float)
    return steps, np.array([latest[s] for s in steps], dtype=float)


def _length_order(length: Any) -> tuple[int, float, str]:
    """Sort validation lengths numerically, with missing/non-numeric ones last."""
    if isinstance(length, (int, float)) and not isinstance(length, bool):
        return (0, float(length), "")
    return (1, math.inf, str(length))


def _log_floor(values: list[np.ndarray], threshold: float | None) -> float:
    """Where to draw values <= 0 on a log axis: below every positive value shown."""
    positive = [v[v > 0].min() for v in values if (v > 0).any()]
    if threshold is not None and threshold > 0:
        positive.append(threshold)
    return float(min(positive)) / 10.0 if positive else 1e-6
