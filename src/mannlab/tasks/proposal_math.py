"""The arithmetic of temporal action proposals (SST, Buch et al. CVPR 2017; ARMIN section 4.3
and appendix C.3): tIoU, anchors, training labels, class weights, the weighted multi-label
loss, temporal NMS and the decoding of a score map into proposals.

Time is in steps (snippet indices). A segment is a float pair ``[start, end)`` in steps.
Anchor ``k`` has length ``lengths[k]`` steps; its proposal at step ``t`` is
``[max(0, t + 1 - lengths[k]), t + 1)``: SST scores, at every step, the K proposals that
end where the model has just read. Proposals of a video are (P, 3) float64 rows
``[start, end, score]``, sorted by score descending.

Everything is numpy except the loss, which is torch so that it backpropagates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

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


def anchor_weights(label_arrays: Iterable[np.ndarray]) -> np.ndarray:
    """SST's per-anchor class weights from training labels: (K, 2) float64.

    ``label_arrays`` are the (T_i, K) label arrays of the training videos or windows (from
    :func:`proposal_labels`). ``p_k`` is the positive rate of anchor ``k`` over all steps of
    all arrays; column 0 is the positive label's weight ``1 - p_k`` and column 1 the
    negative's ``p_k`` (SST's training loss), so that the rare positives of long anchors are not
    drowned by their negatives. An anchor never positive gets weights (1, 0): its negatives
    then cost nothing, as in SST's formula.
    """
    positives: np.ndarray | None = None
    steps = 0
    for i, labels in enumerate(label_arrays):
        arr = np.asarray(labels, dtype=np.float64)
        if arr.ndim != 2:
            raise ValueError(f"label array {i} must be (T, K), got shape {arr.shape}")
        if positives is None:
            positives = np.zeros(arr.shape[1])
        elif arr.shape[1] != positives.size:
            raise ValueError(f"label array {i} has {arr.shape[1]} anchors, the first had {positives.size}")
        positives += arr.sum(axis=0)
        steps += arr.shape[0]
    if positives is None or steps == 0:
        raise ValueError("anchor_weights needs at least one label array with at least one step")
    rate = positives / steps
    return np.stack([1.0 - rate, rate], axis=1)


def weighted_pair_losses(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | np.ndarray
) -> torch.Tensor:
    """The terms of SST's weighted multi-label loss, one per (step, anchor), unmasked:
    ``-(w+_k y log σ(l) + w-_k (1 - y) log(1 - σ(l)))`` with the logs as ``logsigmoid(±l)``;
    ``logits`` and ``labels`` (..., K), ``weights`` (K, 2) from :func:`anchor_weights`."""
    w = torch.as_tensor(weights, dtype=logits.dtype, device=logits.device)
    if tuple(w.shape) != (logits.shape[-1], 2):
        raise ValueError(f"weights must be (K, 2) = ({logits.shape[-1]}, 2), got {tuple(w.shape)}")
    y = labels.to(logits.dtype)
    return -(w[:, 0] * y * F.logsigmoid(logits) + w[:, 1] * (1.0 - y) * F.logsigmoid(-logits))


def weighted_proposal_loss(
    logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | np.ndarray
) -> torch.Tensor:
    """SST's weighted multi-label loss (ARMIN appendix C.3 trains with it).

    ``logits`` and ``labels`` are (B, T, K), ``mask`` (B, T) (1 where a step is scored) and
    ``weights`` (K, 2) from :func:`anchor_weights`. Returns the scalar mean, over the scored
    (step, anchor) pairs, of ``-(w+_k y log σ(l) + w-_k (1 - y) log(1 - σ(l)))``. The logs are
    ``logsigmoid(l)`` and ``logsigmoid(-l)``, so large logits neither overflow nor give
    ``log(0)``. A mask of all zeros gives 0 (still connected to ``logits``). A fractional
    mask weights its steps.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be (B, T, K), got shape {tuple(logits.shape)}")
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError(
            f"labels must have the shape of logits {tuple(logits.shape)}, got {tuple(labels.shape)}"
        )
    if tuple(mask.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"mask must be (B, T) = {tuple(logits.shape[:2])}, got {tuple(mask.shape)}")
    m = mask.to(logits.dtype)
    total = (weighted_pair_losses(logits, labels, weights) * m[..., None]).sum()
    count = m.sum() * logits.shape[2]
    return total / count if count.item() > 0 else total * 0.0


def nms(proposals: np.ndarray, threshold: float, max_keep: int | None = None) -> np.ndarray:
    """Greedy temporal non-maximum suppression (SST's inference, tIoU 0.8).

    ``proposals`` (P, 3) are ``[start, end, score]`` in any order. The highest-scoring
    proposal is kept, every remaining one with tIoU > ``threshold`` with it is dropped, and
    so on. Returns the kept rows (Q, 3) float64, score descending (ties in input order).
    ``max_keep`` stops after that many: the result is then exactly the first ``max_keep``
    rows of the full NMS.

    Cost: the Python loop visits the candidates in score order, but numpy work happens only
    for kept ones, and only over the candidates that can overlap the kept one enough: a
    segment b with tIoU(a, b) > θ has ``|a ∩ b| > θ |a|``, so its end lies in
    ``(start_a + θ|a|, end_a - θ|a| + min(|a| / θ, longest))``, a window found by binary
    search in the candidates sorted by end. For SST's decoded maps (anchors up to 32 steps,
    θ = 0.8) that window holds a few hundred candidates whatever the video length, so NMS is
    linear in the video length, and a pre-cap of the candidates by score is not needed.
    """
    props = _proposal_rows(proposals, "proposals")
    threshold = _unit_float(threshold, "NMS threshold")
    if max_keep is not None and (int(max_keep) != max_keep or max_keep < 0):
        raise ConfigError(f"max_keep must be an integer >= 0 or None, got {max_keep!r}")
    limit = props.shape[0] if max_keep is None else min(int(max_keep), props.shape[0])
    order = np.argsort(-props[:, 2], kind="stable")
    props = props[order]
    if limit == 0:
        return props[:0]
    start, end = props[:, 0], props[:, 1]
    longest = float((end - start).max())
    by_end = np.argsort(end, kind="stable")
    sorted_end = end[by_end]
    dropped = np.zeros(props.shape[0], dtype=bool)
    kept: list[int] = []
    for i in range(props.shape[0]):
        if dropped[i]:
            continue
        kept.append(i)
        if len(kept) == limit:
            break
        length = end[i] - start[i]
        reach = min(length / threshold, longest) if threshold > 0 else longest
        slack = 1e-9 * (1.0 + abs(end[i]) + reach)  # rounding: the window only pre-selects
        lo = np.searchsorted(sorted_end, start[i] + threshold * length - slack, side="left")
        hi = np.searchsorted(sorted_end, end[i] - threshold * length + reach + slack, side="right")
        near = by_end[lo:hi]
        near = near[near > i]  # only later (lower-scored) candidates can be dropped
        if near.size:  # segment_tiou inlined: this loop is the hot path of decoding
            inter = np.minimum(end[near], end[i]) - np.maximum(start[near], start[i])
            inter = np.maximum(inter, 0.0)
            union = (end[near] - start[near]) + length - inter
            with np.errstate(invalid="ignore"):  # 0 / 0 of two empty segments: NaN, never > θ
                dropped[near[inter / union > threshold]] = True
    return props[kept]


def decode_proposals(
    scores: np.ndarray,
    lengths: np.ndarray,
    score_threshold: float = 0.0,
    nms_threshold: float = 0.8,
    max_proposals: int | None = None,
) -> np.ndarray:
    """Turn SST's (T, K) score map of probabilities into a video's proposals (P, 3).

    Every (t, k) with ``scores[t, k] > score_threshold`` becomes
    ``[max(0, t + 1 - lengths[k]), t + 1, scores[t, k]]`` (SST's inference); then greedy
    temporal NMS at ``nms_threshold`` (:func:`nms`; SST uses 0.8) and at most
    ``max_proposals`` of the best (None: all). Rows are score descending. All candidates
    go into NMS (no pre-cap by score): the windowed NMS is linear in T, and with
    ``max_proposals`` it stops as soon as that many are kept, which is the exact answer.
    """
    s = np.asarray(scores, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    if s.ndim != 2 or s.shape[1] != lengths.size:
        raise ValueError(f"scores must be (T, K) with K = {lengths.size} anchor lengths, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite probabilities; found NaN or inf")
    if (lengths <= 0).any():
        raise ConfigError(f"anchor lengths must be > 0, got {lengths.tolist()}")
    score_threshold = float(score_threshold)
    if not math.isfinite(score_threshold):
        raise ConfigError(f"score_threshold must be a finite number, got {score_threshold!r}")
    t, k = np.nonzero(s > score_threshold)
    end = (t + 1).astype(np.float64)
    rows = np.stack([np.maximum(0.0, end - lengths[k]), end, s[t, k]], axis=1)
    return nms(rows, nms_threshold, max_keep=max_proposals)


def _proposal_rows(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 3)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name} must be a (P, 3) array of [start, end, score], got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite; found NaN or inf")
    if (arr[:, 1] < arr[:, 0]).any():
        raise ValueError(f"{name} must have start <= end in every row")
    return arr


def _unit_float(value: float, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}") from None
    if not 0.0 <= out <= 1.0:
        raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}")
    return out


def _segments(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise ValueError(f"{name} must be an (N, 2) array of [start, end), got shape {arr.shape}")
    return arr[:, :2]
