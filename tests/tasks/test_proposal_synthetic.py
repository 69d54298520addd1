"""The synthetic proposal benchmark: seeded and deterministic, non-overlapping segments of
lengths in range, start and end markers exactly at a segment's first and last steps (and lone
starts only in the background), the same marker directions for every seed, and parameter
errors that name the parameter."""

import numpy as np
import pytest

from mannlab.errors import ConfigError
from mannlab.tasks.proposal_math import ProposalVideo
from mannlab.tasks.proposal_synthetic import marker_directions, synthetic_videos

ARGS = dict(videos=6, steps=300, feature_size=16, min_length=3, max_length=50, gap=(2, 30), classes=3)


def projections(video, classes=3):
    """Each step's features projected on the start and end directions: (T, classes) each."""
    starts, ends = marker_directions(classes, video.features.shape[1])
    return video.features @ starts.T, video.features @ ends.T


def test_same_seed_same_arrays_other_seeds_differ():
    a, b, c = (synthetic_videos(seed, **ARGS) for seed in (3, 3, 4))
    for x, y in zip(a, b):
        assert x.name == y.name and np.array_equal(x.features, y.features)
        assert np.array_equal(x.segments, y.segments)
    assert not any(np.array_equal(x.features, z.features) for x, z in zip(a, c))
    assert [x.segments.tolist() for x in a] != [z.segments.tolist() for z in c]
    assert len({v.name for v in a + c}) == 12
    # video i comes from (seed, i): a shorter list is the start of a longer one
    shorter = synthetic_videos(3, **{**ARGS, "videos": 2})
    assert all(np.array_equal(x.features, y.features) for x, y in zip(shorter, a))


def test_records_follow_the_proposal_interface():
    for video in synthetic_videos(0, **ARGS):
        assert isinstance(video, ProposalVideo)
        assert video.features.shape == (300, 16) and video.features.dtype == np.float32
        assert video.segments.dtype == np.float64 and video.segments.shape[1] == 2
        assert (video.fps, video.snippet_frames) == (0.0, 1)


def test_segments_in_bounds_non_overlapping_lengths_in_range():
    lengths = []
    for video in synthetic_videos(1, **{**ARGS, "videos": 40}):
        seg = video.segments
        assert len(seg) >= 1
        assert (seg[:, 0] >= 2).all() and (seg[:, 1] <= 300).all()  # the first gap is >= 2
        assert (seg == np.round(seg)).all()
        assert (seg[1:, 0] - seg[:-1, 1] >= 2).all()  # in order, gaps of at least 2 steps
        lengths += (seg[:, 1] - seg[:, 0]).tolist()
    assert min(lengths) >= 3 and max(lengths) <= 50
    assert min(lengths) <= 6 and max(lengths) >= 45  # the whole range is drawn


def test_markers_sit_at_segment_starts_and_ends_and_nowhere_else_inside():
    # without noise the projections show exactly where the markers are
    lone_starts = 0
    for video in synthetic_videos(2, **{**ARGS, "videos": 20, "noise": 0.0, "marker": 1.0}):
        start_proj, end_proj = projections(video)
        starts = np.flatnonzero(np.abs(start_proj).max(1) > 0.5)
        ends = np.flatnonzero(np.abs(end_proj).max(1) > 0.5)
        seg = video.segments.astype(int)
        assert ends.tolist() == (seg[:, 1] - 1).tolist()
        assert set(seg[:, 0]) <= set(starts)
        for step in starts:  # a lone start is never inside a segment
            assert not ((seg[:, 0] < step) & (step < seg[:, 1])).any()
        for s, e in seg:  # one class per segment, the same at both ends
            assert start_proj[s].argmax() == end_proj[e - 1].argmax()
            assert np.isclose(start_proj[s].max(), 1.0) and np.isclose(end_proj[e - 1].max(), 1.0)
            assert np.abs(video.features[s + 1 : e - 1]).max(initial=0) == 0  # background inside
        lone_starts += len(set(starts) - set(seg[:, 0]))
    assert lone_starts > 0  # distractors exist
    quiet = synthetic_videos(2, **{**ARGS, "noise": 0.0, "false_starts": 0.0})
    for video in quiet:
        starts = np.flatnonzero(np.abs(projections(video)[0]).max(1) > 0.5)
        assert starts.tolist() == video.segments[:, 0].astype(int).tolist()


def test_marker_directions_are_fixed_and_orthonormal():
    starts, ends = marker_directions(3, 16)
    both = np.concatenate([starts, ends])
    np.testing.assert_allclose(both @ both.T, np.eye(6), atol=1e-12)
    again = marker_directions(3, 16)
    assert np.array_equal(again[0], starts) and np.array_equal(again[1], ends)
    # with noise, a marker stands out along its direction
    video = synthetic_videos(5, **ARGS)[0]
    start_proj, _ = projections(video)
    s = int(video.segments[0, 0])
    assert start_proj[s].max() > 3


@pytest.mark.parametrize(
    "change, what",
    [
        ({"videos": 0}, "videos must be an integer >= 1"),
        ({"steps": 2.5}, "steps must be an integer >= 1"),
        ({"min_length": 1}, "min_length must be an integer >= 2"),
        ({"min_length": 20, "max_length": 10}, "min_length must be <= max_length"),
        ({"max_length": 280}, "max_length \\+ the longest gap must fit in steps.*280 \\+ 30 > 300"),
        ({"gap": (0, 5)}, "gap must be positive integers"),
        ({"gap": (6, 5)}, "gap must be positive integers with shortest <= longest"),
        ({"gap": 5}, "gap must be a pair of integers"),
        ({"classes": 9}, "feature_size must be >= 2 \\* classes"),
        ({"noise": -1.0}, "noise must be a finite number >= 0"),
        ({"marker": 0}, "marker must be a finite number > 0"),
        ({"marker": float("inf")}, "marker must be a finite number > 0"),
        ({"false_starts": 1.5}, "false_starts must be a probability"),
        ({"classes": True}, "classes must be an integer >= 1"),
    ],
)
def test_parameter_errors(change, what):
    with pytest.raises(ConfigError, match=what):
        synthetic_videos(0, **{**ARGS, **change})
    with pytest.raises(ConfigError, match="seed must be an integer >= 0"):
        synthetic_videos(-1, **ARGS)
