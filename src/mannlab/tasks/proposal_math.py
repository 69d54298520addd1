"""The arithmetic of temporal action proposals (SST, Buch et al. CVPR 2017; ARMIN section 4.3).

Time is in steps (snippet indices). A segment is a float pair ``[start, end)`` in steps.
Anchor ``k`` has length ``lengths[k]`` steps; its proposal at step ``t`` is
``[max(0, t + 1 - lengths[k]), t + 1)``: it ends where the model has just read.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mannlab.errors import ConfigError


class ProposalVideo(NamedTuple):
    """One video of a proposal data set (THUMOS'14 or synthetic)."""

    name: str
    features: np.ndarray  # (T, D) float32
    segments: np.ndarray  # (M, 2) float64, [start, end) in steps
    fps: float  # frames per second of the source video (synthetic: 0.0)
    snippet_frames: int  # frames per step (THUMOS C3D: 16; synthetic: 1)


def segment_tiou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Temporal IoU ``|a ∩ b| / |a ∪ b|`` of every segment of ``a`` (N, 2) with every one of ``b`` (M, 2).

    Returns an (N, M) float64 array; disjoint or touching segments give 0. This is the
    tIoU of SST's labels and of the proposal recall (ARMIN section 4.3).
    """
    a = _segments(a, "a")
    b = _segments(b, "b")
    inter = np.minimum(a[:, None, 1], b[None, :, 1]) - np.maximum(a[:, None, 0], b[None, :, 0])
    inter = np.clip(inter, 0.0, None)
    union = (a[:, 1] - a[:, 0])[:, None] + (b[:, 1] - b[:, 0])[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    return out


def anchor_lengths(K: int, stride: int = 1) -> np.ndarray:
    """SST's anchor lengths in steps: ``stride * (k + 1)`` for k = 0..K-1, as int64 (K,)."""
    if int(K) != K or K < 1:
        raise ConfigError(f"number of anchors K must be an integer >= 1, got {K!r}")
    if int(stride) != stride or stride < 1:
        raise ConfigError(f"anchor stride must be an integer >= 1, got {stride!r}")
    return int(stride) * np.arange(1, int(K) + 1, dtype=np.int64)


def anchor_segments(steps: int, lengths: np.ndarray) -> np.ndarray:
    """The proposal of every (step, anchor): (steps, K, 2) float64 ``[max(0, t+1-len_k), t+1)``."""
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    end = np.arange(1, int(steps) + 1, dtype=np.float64)[:, None]
    start = np.maximum(0.0, end - lengths[None, :])
    return np.stack(np.broadcast_arrays(start, end), axis=-1)


def proposal_labels(
    segments: np.ndarray, steps: int, lengths: np.ndarray, threshold: float = 0.5
) -> np.ndarray:
    """SST's training labels: ``y[t, k] = 1`` iff proposal (t, k) has tIoU > ``threshold`` with some segment.

    ``segments`` (M, 2) are the ground-truth ``[start, end)`` in steps; the comparison is
    strictly greater, as in SST (threshold 0.5). Returns (steps, K) float32.
    """
    if int(steps) != steps or steps < 0:
        raise ConfigError(f"steps must be an integer >= 0, got {steps!r}")
    lengths = np.asarray(lengths).reshape(-1)
    gt = _segments(segments, "segments")
    out = np.zeros((int(steps), lengths.size), dtype=np.float32)
    if gt.shape[0] == 0 or steps == 0:
        return out
    props = anchor_segments(int(steps), lengths).reshape(-1, 2)
    best = np.zeros(props.shape[0])
    for seg in gt:  # one ground truth at a time keeps memory at O(T K)
        best = np.maximum(best, segment_tiou(props, seg[None, :])[:, 0])
    out[:] = (best > threshold).reshape(int(steps), lengths.size)
    return out


def _segments(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise ValueError(f"{name} must be an (N, 2) array of [start, end), got shape {arr.shape}")
    return arr[:, :2]
