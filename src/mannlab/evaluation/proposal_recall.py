"""Recall of temporal action proposals (ARMIN section 4.3, table 3 and figure 2; SST).

The convention is the ActivityNet / Escorcia et al. (DAPs) proposal evaluation that SST and
the ARMIN authors used:

- For an *average* number of proposals N, each video keeps the same fraction of its own
  list: its top ``int(P_v * N * V / P)`` proposals, where ``P_v`` is the length of the
  video's list, ``V`` the number of videos and ``P`` the total number of proposals. The
  kept lists then average N proposals per video (up to the rounding down), and a video
  with many proposals keeps many.
- A ground-truth instance is recalled at threshold θ when some kept proposal of its video
  has tIoU >= θ with it; one proposal may recall several instances (no one-to-one match).
- Recall = recalled instances / all instances, over all videos (not a mean of per-video
  recalls). Average recall (AR) is the mean of recall over the tIoU thresholds
  0.5:0.05:1.0 (11 values).

Inputs are dicts video name -> array: proposals (P_v, 3) ``[start, end, score]`` and
ground truth (M_v, 2) ``[start, end)``, in the same unit (steps or seconds). Proposals are
sorted here by score, descending (ties keep their order), so the caller's order does not
matter. The videos are the keys of ``ground_truth`` (a video with no instance counts as a
video, its proposals in the total); a video of the ground truth missing from
``proposals`` has zero proposals. Proposals of a video the ground truth does not know are
an error (DataError): they would silently change every other video's share, so the caller
filters them out on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mannlab.errors import ConfigError, DataError
from mannlab.tasks.proposal_math import segment_tiou

__all__ = [
    "AR_TIOUS",
    "DEFAULT_POINTS",
    "RECALL_TIOUS",
    "average_recall_vs_proposals",
    "recall_at",
    "recall_vs_tiou",
    "summary",
]

# tIoU thresholds of average recall: 0.5:0.05:1.0 (SST; ARMIN figure 2 left).
AR_TIOUS = np.round(np.arange(10, 21) * 0.05, 2)
# tIoU thresholds of the recall-vs-tIoU curve: 0.05:0.05:1.0 (ARMIN figure 2 right).
RECALL_TIOUS = np.round(np.arange(1, 21) * 0.05, 2)
# Average numbers of proposals of the AR curve: log-spaced 1..1000, with table 3's points.
DEFAULT_POINTS = np.unique(
    np.concatenate([np.round(np.geomspace(1, 1000, 31)), [50.0, 100.0, 200.0, 500.0, 1000.0]])
)
# Table 3 and the AR points reported beside it.
SUMMARY_RECALL_TIOUS = (0.6, 0.8)
SUMMARY_AR_POINTS = (50, 100, 200, 500, 1000)

Videos = Mapping[str, np.ndarray]


def recall_at(proposals: Videos, ground_truth: Videos, n_proposals: float, tiou: float) -> float:
    """Recall at ``n_proposals`` average proposals per video and tIoU >= ``tiou``
    (ARMIN table 3: recall at 1,000 proposals, tIoU 0.6 and 0.8)."""
    hits, counts, total = _first_hits(proposals, ground_truth, np.array([_threshold(tiou)]))
    return float(_recall(hits, counts, total, len(ground_truth), np.array([_points(n_proposals)[0]]))[0, 0])


def average_recall_vs_proposals(
    proposals: Videos,
    ground_truth: Videos,
    tious: Sequence[float] | np.ndarray = AR_TIOUS,
    points: Sequence[float] | np.ndarray = DEFAULT_POINTS,
) -> tuple[np.ndarray, np.ndarray]:
    """Average recall against the average number of proposals per video (ARMIN figure 2
    left; SST plots the same): AR at each N of ``points`` is the mean over ``tious`` of the recall
    at N. Returns ``(points, average recall)`` as float64 arrays of the same length; past the
    average length of the lists every video keeps all its proposals and the curve is flat."""
    thresholds = _thresholds(tious)
    numbers = _points(points)
    hits, counts, total = _first_hits(proposals, ground_truth, thresholds)
    recall = _recall(hits, counts, total, len(ground_truth), numbers)  # (tious, points)
    return numbers, recall.mean(axis=0)


def recall_vs_tiou(
    proposals: Videos,
    ground_truth: Videos,
    n_proposals: float = 1000,
    tious: Sequence[float] | np.ndarray = RECALL_TIOUS,
) -> tuple[np.ndarray, np.ndarray]:
    """Recall at ``n_proposals`` average proposals against the tIoU threshold (ARMIN figure 2
    right: recall at 1,000 proposals, tIoU 0.05..1.0). Returns ``(tious, recall)``."""
    thresholds = _thresholds(tious)
    hits, counts, total = _first_hits(proposals, ground_truth, thresholds)
    recall = _recall(hits, counts, total, len(ground_truth), np.array([_points(n_proposals)[0]]))
    return thresholds, recall[:, 0]


def summary(proposals: Videos, ground_truth: Videos) -> dict[str, float]:
    """The numbers of ARMIN table 3 and beside it: recall at 1,000 average proposals at tIoU
    0.6 and 0.8 (keys ``recall@1000_tiou0.6``, ``recall@1000_tiou0.8``) and AR over tIoU
    0.5:0.05:1.0 at 50, 100, 200, 500 and 1,000 average proposals (``ar@50`` ... ``ar@1000``)."""
    thresholds = np.array(sorted(set(AR_TIOUS.tolist()) | set(SUMMARY_RECALL_TIOUS)))
    hits, counts, total = _first_hits(proposals, ground_truth, thresholds)
    numbers = np.array(SUMMARY_AR_POINTS, dtype=float)
    recall = _recall(hits, counts, total, len(ground_truth), numbers)  # (thresholds, points)
    out: dict[str, float] = {}
    at_1000 = numbers.tolist().index(1000.0)
    for tiou in SUMMARY_RECALL_TIOUS:
        row = int(np.flatnonzero(np.isclose(thresholds, tiou))[0])
        out[f"recall@1000_tiou{tiou:g}"] = float(recall[row, at_1000])
    ar_rows = np.isin(thresholds, AR_TIOUS)
    for j, n in enumerate(SUMMARY_AR_POINTS):
        out[f"ar@{n}"] = float(recall[ar_rows, j].mean())
    return out


# ----------------------------------------------------------------------------- internals


def _first_hits(
    proposals: Videos, ground_truth: Videos, thresholds: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """Per video: the rank (0-based, in score order) of the first proposal with tIoU >= θ with
    each instance, (M_v, thresholds) int64 (``P_v`` when none reaches θ); the list lengths
    ``P_v`` (V,); the total number of proposals P."""
    if not isinstance(ground_truth, Mapping) or not isinstance(proposals, Mapping):
        raise DataError("proposals and ground_truth must be dicts: video name -> array")
    if not ground_truth:
        raise DataError("ground_truth holds no video")
    unknown = sorted(set(proposals) - set(ground_truth))
    if unknown:
        shown = ", ".join(map(repr, unknown[:5])) + (" ..." if len(unknown) > 5 else "")
        raise DataError(
            f"proposals of {len(unknown)} video(s) not in the ground truth ({shown}); "
            "drop them before evaluating, they would change every video's share of proposals"
        )
    hits: list[np.ndarray] = []
    counts = np.zeros(len(ground_truth), dtype=np.int64)
    for v, (name, segments) in enumerate(ground_truth.items()):
        gt = _array(segments, 2, f"ground truth of video {name!r}", "[start, end)")
        props = _array(
            proposals.get(name, np.zeros((0, 3))), 3, f"proposals of video {name!r}", "[start, end, score]"
        )
        props = props[np.argsort(-props[:, 2], kind="stable")]
        counts[v] = props.shape[0]
        first = np.full((gt.shape[0], thresholds.size), props.shape[0], dtype=np.int64)
        if gt.shape[0] and props.shape[0]:
            # The best tIoU among the top j proposals never decreases with j, so the first rank
            # that reaches θ is a binary search in it.
            best = np.maximum.accumulate(segment_tiou(gt, props[:, :2]), axis=1)  # (M_v, P_v)
            for m in range(gt.shape[0]):
                first[m] = np.searchsorted(best[m], thresholds, side="left")
        hits.append(first)
    return hits, counts, int(counts.sum())


def _recall(
    hits: list[np.ndarray], counts: np.ndarray, total: int, videos: int, numbers: np.ndarray
) -> np.ndarray:
    """Recall (thresholds, numbers): each video keeps its top ``int(P_v * N * V / P)``."""
    n_thresholds = hits[0].shape[1]
    instances = sum(h.shape[0] for h in hits)
    if instances == 0:
        raise DataError("the ground truth holds no instance: recall is undefined")
    recalled = np.zeros((n_thresholds, numbers.size))
    for first, count in zip(hits, counts):
        if first.shape[0] == 0:
            continue
        # The product first, then one division: exact for whole numbers (the spec's int()).
        keep = np.floor(count * numbers * videos / total) if total else np.zeros_like(numbers)
        keep = np.minimum(keep, count)  # (numbers,)
        recalled += (first[:, :, None] < keep[None, None, :]).sum(axis=0)
    return recalled / instances


def _array(value: object, columns: int, name: str, layout: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"{name} must be a numeric (N, {columns}) array of {layout}") from None
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, columns)
    if arr.ndim != 2 or arr.shape[1] != columns:
        raise DataError(f"{name} must be an (N, {columns}) array of {layout}, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise DataError(f"{name} holds NaN or inf")
    if (arr[:, 1] < arr[:, 0]).any():
        raise DataError(f"{name} has a row with end < start")
    return arr


def _threshold(value: float) -> float:
    out = float(value)
    if not 0.0 <= out <= 1.0:
        raise ConfigError(f"a tIoU threshold must be in [0, 1], got {value!r}")
    return out


def _thresholds(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ConfigError(f"tious must be a non-empty list of tIoU thresholds, got {values!r}")
    return np.array([_threshold(t) for t in arr])


def _points(values: float | Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all() or (arr < 0).any():
        raise ConfigError(f"average numbers of proposals must be finite numbers >= 0, got {values!r}")
    return arr
