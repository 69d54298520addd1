"""Proposal recall in the ActivityNet / Escorcia convention (ARMIN section 4.3, table 3 and
figure 2), on two hand-worked videos."""

import numpy as np
import pytest

from mannlab.errors import ConfigError, DataError
from mannlab.evaluation.proposal_recall import (
    AR_TIOUS,
    average_recall_vs_proposals,
    recall_at,
    recall_vs_tiou,
    summary,
)

GT = {"a": np.array([[0.0, 10.0], [20.0, 30.0]]), "b": np.array([[0.0, 4.0]])}
PROPS = {
    "a": np.array(
        [
            [0, 10, 0.9],  # instance a0, tIoU 1
            [40, 50, 0.8],  # nothing
            [20, 28, 0.7],  # instance a1, tIoU 0.8
            [21, 30, 0.6],  # instance a1, tIoU 0.9
        ],
        dtype=float,
    ),
    "b": np.array([[0, 2, 0.5], [0, 4, 0.4]], dtype=float),  # tIoU 0.5, then 1
}
# 2 videos, 6 proposals: at N average proposals video a keeps int(4 N 2 / 6), b int(2 N 2 / 6).


def test_recall_keeps_each_videos_share():
    # N = 1: a keeps 1, b keeps 0 (the same N for every video would give b one: 2/3)
    assert recall_at(PROPS, GT, 1, 0.5) == pytest.approx(1 / 3)
    # N = 1.5: a keeps 2, b keeps 1 ([0, 2) reaches tIoU 0.5 exactly: >= counts)
    assert recall_at(PROPS, GT, 1.5, 0.5) == pytest.approx(2 / 3)
    assert recall_at(PROPS, GT, 1.5, 0.6) == pytest.approx(1 / 3)
    # N = 2.25: a keeps 3 ([20, 28) at exactly 0.8), b keeps 1
    assert recall_at(PROPS, GT, 2.25, 0.8) == pytest.approx(2 / 3)
    assert recall_at(PROPS, GT, 2.25, 0.85) == pytest.approx(1 / 3)
    # N = 3 and beyond: everything kept
    assert recall_at(PROPS, GT, 3, 0.85) == 1.0
    assert recall_at(PROPS, GT, 1000, 0.95) == pytest.approx(2 / 3)


def test_recall_sorts_by_score_and_counts_missing_videos_as_empty():
    shuffled = {name: props[::-1].copy() for name, props in PROPS.items()}
    assert recall_at(shuffled, GT, 1, 0.5) == pytest.approx(1 / 3)
    # b has no proposals: a's share is int(4 N 2 / 4) = 2 N; b's instance is missed
    only_a = {"a": PROPS["a"]}
    assert recall_at(only_a, GT, 1, 0.5) == pytest.approx(1 / 3)
    assert recall_at(only_a, GT, 2, 0.5) == pytest.approx(2 / 3)
    assert recall_at({}, GT, 1000, 0.5) == 0.0


def test_one_proposal_recalls_several_instances():
    gt = {"v": np.array([[0.0, 10.0], [0.0, 9.0]])}
    assert recall_at({"v": np.array([[0.0, 10.0, 1.0]])}, gt, 1, 0.9) == 1.0


def test_average_recall_vs_proposals():
    numbers, ar = average_recall_vs_proposals(PROPS, GT, points=[1, 3])
    np.testing.assert_array_equal(numbers, [1, 3])
    # N = 1: only a0 (tIoU 1) at all 11 thresholds. N = 3: a0 and b at all 11, a1 (0.9) at 9.
    np.testing.assert_allclose(ar, [1 / 3, (11 + 9 + 11) / 33])
    assert len(AR_TIOUS) == 11 and AR_TIOUS[0] == 0.5 and AR_TIOUS[-1] == 1.0
    numbers, ar = average_recall_vs_proposals(PROPS, GT)
    assert numbers[0] == 1 and numbers[-1] == 1000 and np.all(np.diff(ar) >= 0)


def test_recall_vs_tiou():
    tious, recall = recall_vs_tiou(PROPS, GT, n_proposals=3, tious=[0.5, 0.9, 0.95, 1.0])
    np.testing.assert_array_equal(tious, [0.5, 0.9, 0.95, 1.0])
    np.testing.assert_allclose(recall, [1, 1, 2 / 3, 2 / 3])
    tious, recall = recall_vs_tiou(PROPS, GT)
    assert len(tious) == 20 and tious[0] == 0.05 and tious[-1] == 1.0 and recall[0] == 1.0


def test_summary_is_table_3():
    out = summary(PROPS, GT)
    assert set(out) == {
        "recall@1000_tiou0.6",
        "recall@1000_tiou0.8",
        "ar@50",
        "ar@100",
        "ar@200",
        "ar@500",
        "ar@1000",
    }
    assert out["recall@1000_tiou0.6"] == 1.0 and out["recall@1000_tiou0.8"] == 1.0
    assert out["ar@1000"] == pytest.approx(31 / 33)
    assert all(isinstance(v, float) for v in out.values())


def test_input_errors():
    with pytest.raises(DataError, match="not in the ground truth.*'c'"):
        recall_at({**PROPS, "c": np.zeros((1, 3))}, GT, 1, 0.5)
    with pytest.raises(DataError, match=r"proposals of video 'a'.*\(N, 3\)"):
        recall_at({"a": np.zeros((2, 2))}, GT, 1, 0.5)
    with pytest.raises(DataError, match="end < start"):
        recall_at({}, {"a": np.array([[5.0, 1.0]])}, 1, 0.5)
    with pytest.raises(DataError, match="no instance"):
        recall_at({}, {"a": np.zeros((0, 2))}, 1, 0.5)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        recall_at(PROPS, GT, 1, 1.5)
    with pytest.raises(ConfigError, match=">= 0"):
        average_recall_vs_proposals(PROPS, GT, points=[-1])
