"""A synthetic temporal-action-proposal benchmark that needs memory, with THUMOS'14's interface.

The ARMIN paper (section 4.3, appendix C.3) compares recurrent models as the sequence encoder
of SST (Buch et al. CVPR 2017): at every step the model scores K anchors, segments of lengths
1..K steps ending at that step. A model that scores the right anchor at a segment's last step
must know how long ago the segment started. This benchmark makes that the only way to know:

- background: every step's features are Gaussian noise, N(0, ``noise``^2) per value;
- a planted segment ``[s, e)`` of action class c has a *start marker* (a fixed direction
  ``start[c]`` of norm ``marker``) added at step s and an *end marker* (``end[c]``) added at
  step e - 1; the steps between are plain background noise (no marker of any kind), so nothing
  inside the segment tells its length or start;
- distractors: with probability ``false_starts`` a background gap gets one lone start
  marker that no end follows, so a start does not imply a segment and the end belongs to the
  latest start before it;
- segment lengths are uniform in [``min_length``, ``max_length``] steps (4 to 64 by
  default, so some starts must be carried across dozens of noisy steps); gaps before and
  between segments are uniform in ``gap``; segments never overlap and every video holds at
  least one.

At the end marker the model must recall the step of the latest start marker (up to
``max_length`` steps back, through noise) to score the anchor of the right length: the
"start must be remembered until the end" of long segments.

The marker directions come from a fixed generator (``MARKER_SEED``), the same for every seed,
so train, validation and test sets made with different seeds share the action classes; the
seed draws the videos (video i from ``(seed, i)``, so a longer list starts with the shorter
one). The same arguments give identical arrays. Videos are ``ProposalVideo`` records with
``fps`` 0.0 and ``snippet_frames`` 1 (time is steps).

    train = synthetic_videos(seed=0, videos=256, steps=512)
    test = synthetic_videos(seed=1, videos=64, steps=512)
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from mannlab.errors import ConfigError
from mannlab.tasks.proposal_math import ProposalVideo

#: the seed of the marker directions (the "action classes"), fixed for every data seed
MARKER_SEED = 20170721


def marker_directions(classes: int, feature_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The (classes, feature_size) unit start and end directions: orthonormal columns of a
    Gaussian matrix from ``MARKER_SEED`` (so all 2 * classes markers are orthogonal)."""
    gaussian = np.random.default_rng(MARKER_SEED).standard_normal((feature_size, 2 * classes))
    q, r = np.linalg.qr(gaussian)
    q = q * np.sign(np.diag(r))  # a unique sign per column
    directions = q.T.astype(np.float64)
    return directions[:classes], directions[classes:]


def synthetic_videos(
    seed: int,
    videos: int,
    steps: int,
    feature_size: int = 32,
    min_length: int = 4,
    max_length: int = 64,
    gap: tuple[int, int] = (2, 40),
    noise: float = 1.0,
    marker: float = 6.0,
    false_starts: float = 0.3,
    classes: int = 4,
) -> list[ProposalVideo]:
    """``videos`` synthetic videos of ``steps`` steps with planted segments (module docstring).

    ``marker`` is the norm of a marker vector (in units of the features, whose noise has
    standard deviation ``noise`` along any direction); ``false_starts`` is the probability
    that a background gap holds a lone start marker. ConfigError for parameters out of range.
    """
    _check(
        seed, videos, steps, feature_size, min_length, max_length, gap, noise, marker, false_starts, classes
    )
    starts, ends = marker_directions(classes, feature_size)
    out = []
    for index in range(videos):
        rng = np.random.default_rng([seed, index])
        features = noise * rng.standard_normal((steps, feature_size))
        segments, kinds, lone = _layout(rng, steps, min_length, max_length, gap, false_starts, classes)
        for (start, end), c in zip(segments, kinds):
            features[start] += marker * starts[c]
            features[end - 1] += marker * ends[c]
        for step, c in lone:
            features[step] += marker * starts[c]
        out.append(
            ProposalVideo(
                name=f"synthetic-{seed}-{index}",
                features=features.astype(np.float32),
                segments=np.array(segments, dtype=np.float64).reshape(-1, 2),
                fps=0.0,
                snippet_frames=1,
            )
        )
    return out


def _layout(
    rng: np.random.Generator,
    steps: int,
    min_length: int,
    max_length: int,
    gap: tuple[int, int],
    false_starts: float,
    classes: int,
) -> tuple[list[tuple[int, int]], list[int], list[tuple[int, int]]]:
    """Segments [s, e) (gap, segment, gap, segment, ... while one fits), their classes, and
    the lone start markers (step, class) placed in background gaps."""
    segments, kinds, gaps = [], [], []
    t = 0
    while True:
        before = int(rng.integers(gap[0], gap[1] + 1))
        length = int(rng.integers(min_length, max_length + 1))
        if t + before + length > steps:
            break
        gaps.append((t, t + before))
        segments.append((t + before, t + before + length))
        kinds.append(int(rng.integers(classes)))
        t += before + length
    if t < steps:
        gaps.append((t, steps))
    lone = []
    for low, high in gaps:
        if rng.random() < false_starts:
            lone.append((int(rng.integers(low, high)), int(rng.integers(classes))))
    return segments, kinds, lone


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_number(value) -> bool:
    return (
        isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    )


def _check(
    seed, videos, steps, feature_size, min_length, max_length, gap, noise, marker, false_starts, classes
):
    """ConfigError naming the first parameter out of range and what it must be."""
    for name, value, low in (
        ("seed", seed, 0),
        ("videos", videos, 1),
        ("steps", steps, 1),
        ("feature_size", feature_size, 1),
        ("min_length", min_length, 2),
        ("max_length", max_length, 2),
        ("classes", classes, 1),
    ):
        if not _is_int(value) or value < low:
            raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
    if min_length > max_length:
        raise ConfigError(f"min_length must be <= max_length, got {min_length} > {max_length}")
    if not (isinstance(gap, (tuple, list)) and len(gap) == 2 and all(_is_int(g) for g in gap)):
        raise ConfigError(f"gap must be a pair of integers (shortest, longest), got {gap!r}")
    if not 1 <= gap[0] <= gap[1]:
        raise ConfigError(f"gap must be positive integers with shortest <= longest, got {tuple(gap)}")
    if max_length + gap[1] > steps:
        raise ConfigError(
            f"max_length + the longest gap must fit in steps (so every video holds a segment), "
            f"got {max_length} + {gap[1]} > {steps}"
        )
    if 2 * classes > feature_size:
        raise ConfigError(
            f"feature_size must be >= 2 * classes (orthogonal start and end markers per class), "
            f"got feature_size {feature_size} < 2 * {classes}"
        )
    if not _is_number(noise) or noise < 0:
        raise ConfigError(f"noise must be a finite number >= 0, got {noise!r}")
    if not _is_number(marker) or marker <= 0:
        raise ConfigError(f"marker must be a finite number > 0, got {marker!r}")
    if not _is_number(false_starts) or not 0 <= false_starts <= 1:
        raise ConfigError(f"false_starts must be a probability in [0, 1], got {false_starts!r}")
