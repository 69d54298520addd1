"""Whole-video evaluation of temporal action proposals (ARMIN section 4.3, table 3, figure 2;
SST, Buch et al. CVPR 2017).

Each video of a split is run whole, in one pass (SST's single stream): the model reads it in
chunks of ``chunk`` steps with its state carried, which equals one call over the whole video
and bounds the memory of long videos. Videos are batched by length (trailing padding never
changes a causal model's earlier outputs). Then per video:

    scores (T, K) = sigmoid(logits)            the K anchors ending at every step
    proposals = decode_proposals(scores, ...)  score threshold, temporal NMS at tIoU 0.8,
                                               at most max_proposals (the task's settings)

and over the split the recall of the ground truth (evaluation/proposal_recall.py: recall at
1,000 average proposals at tIoU 0.6 and 0.8, table 3; AR at N; the two curves of figure 2).
``evaluate_proposals(..., out_dir=RUN)`` writes ``proposals-<split>.json`` (every video's
proposals and ground truth, in seconds when the videos have a frame rate, THUMOS'14, else in
steps) and ``eval-<split>.json`` (the numbers and curves); figure 2's plots of those curves
are reporting's (mannlab.reporting.proposal_figures.draw_evaluation_figures).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mannlab.evaluation import proposal_recall
from mannlab.rundir import write_atomic
from mannlab.tasks.proposal_math import ProposalVideo, decode_proposals

#: file names in the run directory (``{split}`` filled in)
PROPOSALS_FILE = "proposals-{split}.json"
EVAL_FILE = "eval-{split}.json"


def score_videos(
    model: torch.nn.Module, videos: list[ProposalVideo], chunk: int = 512, batch_size: int = 16
) -> list[np.ndarray]:
    """The (T_v, K) anchor probabilities of each video, in eval mode without gradients and
    without moving torch's RNG: batches of up to ``batch_size`` videos of similar length
    (padded at the end), each read in chunks of ``chunk`` steps with the state carried."""
    if chunk < 1 or batch_size < 1:
        raise ValueError(f"chunk and batch_size must be >= 1, got {chunk} and {batch_size}")
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    order = sorted(range(len(videos)), key=lambda i: len(videos[i].features))
    out: list[np.ndarray | None] = [None] * len(videos)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for first in range(0, len(order), batch_size):
                group = order[first : first + batch_size]
                steps = max(len(videos[i].features) for i in group)
                x = np.zeros((len(group), steps, videos[group[0]].features.shape[1]), np.float32)
                for row, i in enumerate(group):
                    x[row, : len(videos[i].features)] = videos[i].features
                inputs = torch.from_numpy(x).to(device=device, dtype=dtype)
                state, parts = None, []
                for part in inputs.split(chunk, dim=1):
                    logits, state = model(part, state)
                    parts.append(torch.sigmoid(logits.float()).cpu())
                scores = torch.cat(parts, dim=1).double().numpy()
                for row, i in enumerate(group):
                    out[i] = scores[row, : len(videos[i].features)]
    finally:
        model.train(was_training)
    # every video was scored (order holds each index once): no None is left
    return out  # type: ignore[return-value]


def propose(
    model: torch.nn.Module, task: Any, videos: list[ProposalVideo], chunk: int = 512, batch_size: int = 16
) -> dict[str, np.ndarray]:
    """Video name -> proposals (P, 3) ``[start, end, score]`` in steps, score descending, with
    the task's ``score_threshold``, ``nms_tiou`` and ``max_proposals``."""
    p = task.params
    scores = score_videos(model, videos, chunk, batch_size)
    return {
        video.name: decode_proposals(
            s, task.lengths, p["score_threshold"], p["nms_tiou"], max_proposals=p["max_proposals"]
        )
        for video, s in zip(videos, scores)
    }


def recall_report(proposals: dict[str, np.ndarray], ground_truth: dict[str, np.ndarray]) -> dict[str, Any]:
    """Table 3's numbers and figure 2's curves: ``summary`` (recall@1000 at tIoU 0.6 / 0.8,
    AR at 50..1000), ``curves`` (``recall_vs_proposals``: average numbers and AR;
    ``recall_vs_tiou``: tIoUs and recall at 1,000)."""
    numbers, ar = proposal_recall.average_recall_vs_proposals(proposals, ground_truth)
    tious, recall = proposal_recall.recall_vs_tiou(proposals, ground_truth)
    return {
        "summary": proposal_recall.summary(proposals, ground_truth),
        "curves": {
            "recall_vs_proposals": [numbers.tolist(), ar.tolist()],
            "recall_vs_tiou": [tious.tolist(), recall.tolist()],
        },
    }


def evaluate_proposals(
    model: torch.nn.Module,
    task: Any,
    split: str = "test",
    out_dir: str | Path | None = None,
    chunk: int = 512,
    about: dict[str, Any] | None = None,
    limit: int | None = None,
    batch_size: int = 16,
) -> dict[str, Any]:
    """Proposals and recall of ``model`` on the whole videos of ``split`` (module docstring;
    ``limit``: the first that many only; ``batch_size`` videos scored together). With
    ``out_dir`` (a run directory), writes the proposals JSON and the eval JSON there and
    lists their paths under ``files``. ``about`` (run directory, model, task, checkpoint) is
    added to the result first."""
    videos = task.videos(split)[:limit]
    proposals = propose(model, task, videos, chunk, batch_size)
    truth = {v.name: v.segments for v in videos}
    report = recall_report(proposals, truth)
    counts = [len(p) for p in proposals.values()]
    result: dict[str, Any] = {
        **(about or {}),
        "split": split,
        "videos": len(videos),
        "instances": int(sum(len(t) for t in truth.values())),
        "proposals_per_video": float(np.mean(counts)) if counts else 0.0,
        "unit": output_unit(videos),
        "settings": {
            k: task.params[k]
            for k in ("anchors", "anchor_stride", "nms_tiou", "score_threshold", "max_proposals")
        },
        **report,
    }
    if out_dir is not None:
        result["files"] = write_results(Path(out_dir), split, videos, proposals, result)
    return result


def output_unit(videos: list[ProposalVideo]) -> str:
    """ "seconds" when every video has a frame rate (THUMOS'14), else "steps" (synthetic)."""
    return "seconds" if videos and all(v.fps > 0 for v in videos) else "steps"


def to_unit(segments: np.ndarray, video: ProposalVideo, unit: str) -> np.ndarray:
    """The [start, end] columns of ``segments`` (steps) in ``unit``: seconds are steps times
    snippet_frames / fps (step t covers frames [16 t, 16 t + 16) of a THUMOS'14 video)."""
    out = np.array(segments, dtype=np.float64, copy=True)
    if unit == "seconds":
        out[:, :2] *= video.snippet_frames / video.fps
    return out


def write_results(
    out_dir: Path,
    split: str,
    videos: list[ProposalVideo],
    proposals: dict[str, np.ndarray],
    result: dict[str, Any],
) -> dict[str, str]:
    """proposals-<split>.json (the ActivityNet proposal layout: video -> [{"segment": [start,
    end], "score": s}], plus the ground truth) and eval-<split>.json."""
    unit = result["unit"]
    digits = 3 if unit == "seconds" else 2
    results, truth = {}, {}
    for video in videos:
        rows = to_unit(proposals[video.name], video, unit)
        results[video.name] = [
            {"segment": [round(float(s), digits), round(float(e), digits)], "score": round(float(p), 6)}
            for s, e, p in rows
        ]
        truth[video.name] = [
            [round(float(s), digits), round(float(e), digits)]
            for s, e in to_unit(video.segments, video, unit)
        ]
    files = {
        "proposals": str(out_dir / PROPOSALS_FILE.format(split=split)),
        "eval": str(out_dir / EVAL_FILE.format(split=split)),
    }
    document = {"unit": unit, "split": split, "results": results, "ground_truth": truth}
    write_atomic(Path(files["proposals"]), json.dumps(document) + "\n")
    write_atomic(Path(files["eval"]), json.dumps({**result, "files": files}, indent=2) + "\n")
    return files
