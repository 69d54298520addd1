"""Temporal action proposals as a task the trainer trains: SST (Buch et al. CVPR 2017) as the
ARMIN paper runs it (section 4.3, appendix C.3), on the synthetic benchmark or THUMOS'14.

A proposal task holds whole videos (``ProposalVideo``: one feature vector per step, the
ground-truth segments in steps) in three splits and trains on windows of them::

    task = mannlab.tasks.make("proposals-synthetic")
    inputs, targets, mask = task.sample(16, seed)           # (16, 128, D), (16, 128, K), (16, 128)
    task.videos("test")                                     # whole videos for evaluation

- **Labels** (SST): anchor k has length ``lengths[k] = anchor_stride (k + 1)`` steps; its
  proposal at step t is ``[t + 1 - lengths[k], t + 1)`` and is positive when its tIoU with a
  ground-truth segment is > ``label_tiou`` (0.5). They are computed once per whole video
  (``proposal_math.proposal_labels``), so a window's labels are the video's at those
  steps: a proposal that starts before the window keeps its label, as at evaluation, where
  the state runs through the whole video.
- **Windows**: a training batch is ``batch_size`` windows of ``window`` steps (SST: 128
  snippets), each drawn uniformly from all window positions of the split (a video of T
  steps has max(T - window + 1, 1) of them; a shorter video is one window, padded at the
  end with mask 0). The model starts each window from its initial state (SST's training).
  ``sample(length=L)`` draws windows of L steps instead.
- **Epoch**: as many windows as tile the training videos once, ``sum_v ceil(T_v / window)``;
  with ``batch_size`` windows per step that is ``steps_per_epoch(batch_size) =
  ceil(windows / batch_size)`` optimizer steps (what ``train.epochs`` and
  ``train.lr_decay_epochs`` count: appendix C.3 trains 300 epochs, lr / 10 for the last 60).
- **Loss** (``loss_key`` "wbce"): SST's weighted multi-label BCE with the per-anchor weights
  of the training split's positive rates (``anchor_weights``, computed once from the
  whole training videos): w+_k = 1 - p_k, w-_k = p_k, mean over the scored (step, anchor)
  pairs (nats). ``metrics`` adds the unweighted ``bce`` and ``positive_rate`` (of the labels).
- **Inputs** are declared as ``input_kinds = ("snippets",)``: mannlab.wrappers puts SST's input
  projection in front of the registered model (``wrappers.SST``), whose head gives the K
  anchor logits.

Evaluation over whole videos (scores, NMS, recall) is mannlab.evaluation.proposals.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from mannlab.errors import ConfigError
from mannlab.tasks.base import Task, as_generator, check_int, masked_bce
from mannlab.tasks.proposal_math import (
    ProposalVideo,
    anchor_lengths,
    anchor_weights,
    proposal_labels,
    weighted_pair_losses,
    weighted_proposal_loss,
)
from mannlab.tasks.proposal_synthetic import synthetic_videos

SPLITS = ("train", "valid", "test")


def check_number(params: dict, key: str, low: float, high: float, low_open: bool = False) -> float:
    """Validate ``params[key]`` as a finite number in [low, high] (``low_open``: > low)."""
    value = params[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (value > low if low_open else value >= low) or value > high:
        bound = f"> {low}" if low_open else f">= {low}"
        raise ConfigError(f"{key} must be a finite number {bound} and <= {high}, got {value!r}")
    params[key] = float(value)
    return float(value)


class ProposalTask(Task):
    """Base of the proposal tasks (see the module docstring): a subclass loads its videos in
    ``load_videos`` (split -> list of ProposalVideo) and validates its own parameters."""

    kind: ClassVar[str] = "proposals"
    splits: ClassVar[tuple[str, ...]] = SPLITS
    input_kinds: ClassVar[tuple[str, ...]] = ("snippets",)
    loss_key: ClassVar[str] = "wbce"
    length_name: ClassVar[str] = "window (steps)"
    #: the parameters every proposal task has (SST's settings as defaults)
    common: ClassVar[dict[str, Any]] = {
        "window": 128,
        "anchors": 32,
        "anchor_stride": 1,
        "label_tiou": 0.5,
        "nms_tiou": 0.8,
        "score_threshold": 0.0,
        "max_proposals": 1000,
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        p = self.params
        self.lengths = anchor_lengths(p["anchors"], p["anchor_stride"])
        self._videos = self.load_videos()
        for split in SPLITS:
            if not self._videos.get(split):
                raise ConfigError(f"split {split!r} of task '{self.name}' has no videos")
        self._labels = {  # 0/1 as uint8: a quarter of the memory of float32
            split: [self.labels_of(video).astype(np.uint8) for video in videos]
            for split, videos in self._videos.items()
        }
        self.weights = anchor_weights(self._labels["train"])  # (K, 2), once, from the training split
        self.input_size = int(self._videos["train"][0].features.shape[1])
        self.output_size = int(p["anchors"])
        self.train_length = int(p["window"])
        self.input_names = [f"f{i}" for i in range(self.input_size)]
        self.output_names = [f"len{int(n)}" for n in self.lengths]

    # ------------------------------------------------------------ subclass API

    @abstractmethod
    def load_videos(self) -> dict[str, list[ProposalVideo]]:
        """The videos of each split ("train", "valid", "test")."""

    def _validate(self, params: dict[str, Any]) -> None:
        check_int(params, "window", minimum=1)
        check_int(params, "anchors", minimum=1)
        check_int(params, "anchor_stride", minimum=1)
        check_number(params, "label_tiou", 0.0, 1.0)
        check_number(params, "nms_tiou", 0.0, 1.0)
        check_number(params, "score_threshold", 0.0, 1.0)
        check_int(params, "max_proposals", minimum=1)

    # ------------------------------------------------------------------ videos

    def videos(self, split: str) -> list[ProposalVideo]:
        """The whole videos of ``split`` (``ProposalVideo``: features, segments in steps)."""
        self._check_split(split)
        return self._videos[split]

    def labels(self, split: str) -> list[np.ndarray]:
        """The (T_v, K) labels (0 or 1, uint8) of each video of ``split``, in the order of
        ``videos``."""
        self._check_split(split)
        return self._labels[split]

    def labels_of(self, video: ProposalVideo) -> np.ndarray:
        """SST's labels of one whole video: (T, K) float32 (proposal_math.proposal_labels)."""
        return proposal_labels(video.segments, len(video.features), self.lengths, self.params["label_tiou"])

    def windows(self, split: str = "train") -> int:
        """How many windows tile the videos of ``split`` once: sum of ceil(T_v / window)."""
        window = self.params["window"]
        return sum(-(-len(v.features) // window) for v in self.videos(split))

    def steps_per_epoch(self, batch_size: int) -> int:
        """Optimizer steps of one epoch at ``batch_size`` windows per step (module docstring)."""
        batch_size = check_int({"batch_size": batch_size}, "batch_size")
        return -(-self.windows("train") // batch_size)

    def _check_split(self, split: str) -> None:
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r} for task '{self.name}'; valid: {', '.join(SPLITS)}")

    # ---------------------------------------------------------------- sampling

    def sample(
        self,
        batch_size: int,
        seed: int | Sequence[int] | np.random.Generator,
        length: int | None = None,
        split: str = "train",
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` windows of ``length`` (default ``window``) steps of ``split``, each
        uniform over all window positions: features (B, L, D), labels (B, L, K), mask (B, L)
        (0 on the padding after a video shorter than the window)."""
        window = self.params["window"] if length is None else check_int({"length": length}, "length")
        chosen, starts = self.window_positions(batch_size, seed, window, split)
        videos, labels = self.videos(split), self.labels(split)
        inputs = np.zeros((batch_size, window, self.input_size), np.float32)
        targets = np.zeros((batch_size, window, self.output_size), np.float32)
        mask = np.zeros((batch_size, window), np.float32)
        for b, (v, start) in enumerate(zip(chosen, starts)):
            part = videos[v].features[start : start + window]
            inputs[b, : len(part)] = part
            targets[b, : len(part)] = labels[v][start : start + window]
            mask[b, : len(part)] = 1.0
        return torch.from_numpy(inputs), torch.from_numpy(targets), torch.from_numpy(mask)

    def window_positions(
        self,
        batch_size: int,
        seed: int | Sequence[int] | np.random.Generator,
        window: int,
        split: str = "train",
    ) -> tuple[np.ndarray, np.ndarray]:
        """(video index, first step) of each window ``sample`` draws with these arguments:
        videos in proportion to their window positions, then a uniform position."""
        check_int({"batch_size": batch_size}, "batch_size")
        videos = self.videos(split)
        rng = as_generator(seed)
        positions = np.array([max(len(v.features) - window + 1, 1) for v in videos], dtype=np.float64)
        chosen = rng.choice(len(videos), size=int(batch_size), p=positions / positions.sum())
        return chosen, rng.integers(0, positions[chosen].astype(np.int64))

    def _sequence(self, rng: np.random.Generator, length: int | None):
        raise TypeError("proposal tasks sample windows of whole videos (see sample)")

    # ----------------------------------------------------------------- scoring

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """SST's weighted multi-label BCE (nats per scored (step, anchor) pair)."""
        return weighted_proposal_loss(logits, targets, mask, self.weights)

    def step_nll(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) weighted BCE summed over the anchors of each step, times ``mask``."""
        return weighted_pair_losses(logits, targets, self.weights).sum(-1) * mask.to(logits.dtype)

    def metrics(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        inputs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """``wbce`` (the loss), ``bce`` (unweighted, nats per scored pair) and
        ``positive_rate`` (of the scored labels, the chance level of the anchors)."""
        with torch.no_grad():
            m = mask.to(logits.dtype)
            scored = (m.sum() * targets.shape[-1]).clamp_min(1.0)
            return {
                "wbce": float(self.loss(logits, targets, mask)),
                "bce": float(masked_bce(logits, targets, mask)),
                "positive_rate": float((targets.to(logits.dtype) * m[..., None]).sum() / scored),
            }

    def render(self, inputs, targets, mask, logits=None, index: int = 0) -> str:
        """The labels (and thresholded outputs) of one window, one row per anchor; the
        features are left out (hundreds of channels)."""
        return super().render(inputs[..., :0], targets, mask, logits, index)


# --------------------------------------------------------------------- synthetic


def _synthetic(seed: int, videos: int, steps: int, options: tuple) -> list[ProposalVideo]:
    return synthetic_videos(seed, videos, steps, **dict(options))


class SyntheticProposalTask(ProposalTask):
    """The synthetic proposal benchmark (tasks/proposal_synthetic.py) as a proposal task:
    planted segments whose start the model must remember until their end. The three splits
    come from disjoint generator seeds (``3 data_seed``, ``3 data_seed + 1``, ``+ 2``), so no
    video is in two splits and every run with the same ``data_seed`` sees the same data.
    Anchors of stride 2 cover the segment lengths up to 64 steps with 32 anchors. 1,024
    training videos of 512 steps: with 256 an LSTM of 95,000 parameters learned the training
    videos' noise within 1,500 steps of 32 windows (validation loss rising from step 750
    while the training loss fell); with 1,024 both still fell together at 1,500 steps."""

    name = "proposals-synthetic"
    #: the generator's own options (its defaults), passed through
    GENERATOR = {
        "feature_size": 32,
        "min_length": 4,
        "max_length": 64,
        "gap": [2, 40],
        "noise": 1.0,
        "marker": 6.0,
        "false_starts": 0.3,
        "classes": 4,
    }
    defaults = {
        "data_seed": 0,
        "train_videos": 1024,
        "valid_videos": 32,
        "test_videos": 64,
        "video_steps": 512,
        **GENERATOR,
        **ProposalTask.common,
        "anchor_stride": 2,
    }

    def _validate(self, params: dict[str, Any]) -> None:
        super()._validate(params)
        check_int(params, "data_seed", minimum=0, maximum=(2**63 - 1) // 3 - 1)
        for key in ("train_videos", "valid_videos", "test_videos", "video_steps"):
            check_int(params, key, minimum=1)
        if isinstance(params["gap"], tuple):
            params["gap"] = list(params["gap"])  # TOML (the saved config) has lists

    def load_videos(self) -> dict[str, list[ProposalVideo]]:
        p = self.params
        options = tuple((key, tuple(p[key]) if key == "gap" else p[key]) for key in self.GENERATOR)
        counts = {"train": p["train_videos"], "valid": p["valid_videos"], "test": p["test_videos"]}
        try:
            return {
                split: _synthetic(3 * p["data_seed"] + i, counts[split], p["video_steps"], options)
                for i, split in enumerate(SPLITS)
            }
        except ConfigError as exc:  # the generator's "steps" is the task's video_steps
            raise ConfigError(f"task '{self.name}': {exc} (steps: the task's video_steps)") from None
