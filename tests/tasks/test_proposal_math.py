"""The arithmetic of SST's temporal action proposals (ARMIN section 4.3): tIoU, anchors,
labels, class weights, the weighted loss, temporal NMS and decoding, on hand-worked cases."""

import math

import numpy as np
import pytest
import torch

from mannlab.errors import ConfigError
from mannlab.tasks.proposal_math import (
    ProposalVideo,
    anchor_lengths,
    anchor_weights,
    decode_proposals,
    nms,
    proposal_labels,
    segment_tiou,
    weighted_proposal_loss,
)


def test_proposal_video_fields():
    video = ProposalVideo("v", np.zeros((3, 2), np.float32), np.zeros((0, 2)), 0.0, 1)
    assert video._fields == ("name", "features", "segments", "fps", "snippet_frames")


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([0, 1], [2, 3], 0.0),  # disjoint
        ([0, 2], [2, 4], 0.0),  # touching: [start, end) share no step
        ([0, 10], [2, 4], 0.2),  # nested: 2 / 10
        ([3, 7], [3, 7], 1.0),  # identical
        ([0, 4], [2, 6], 2 / 6),  # partial: overlap 2, union 6
        ([2, 6], [0, 4], 2 / 6),  # symmetric
    ],
)
def test_segment_tiou_hand_cases(a, b, expected):
    assert segment_tiou(np.array([a]), np.array([b]))[0, 0] == pytest.approx(expected)


def test_segment_tiou_is_all_pairs():
    out = segment_tiou(np.array([[0, 2], [1, 3], [5, 6]]), np.array([[0, 2], [2, 4]]))
    np.testing.assert_allclose(out, [[1, 0], [1 / 3, 1 / 3], [0, 0]])
    assert segment_tiou(np.zeros((0, 2)), np.array([[0, 1]])).shape == (0, 1)
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        segment_tiou(np.zeros((2, 1)), np.zeros((1, 2)))


def test_anchor_lengths():
    np.testing.assert_array_equal(anchor_lengths(4), [1, 2, 3, 4])
    np.testing.assert_array_equal(anchor_lengths(3, stride=2), [2, 4, 6])
    with pytest.raises(ConfigError, match="K"):
        anchor_lengths(0)


def test_proposal_labels_hand_worked():
    # Ground truth [2, 5); anchors of 1..4 steps; proposal (t, k) = [t + 1 - len_k, t + 1).
    y = proposal_labels(np.array([[2.0, 5.0]]), 7, anchor_lengths(4))
    assert y.shape == (7, 4) and y.dtype == np.float32
    positive = {(int(t), int(k)) for t, k in zip(*np.nonzero(y))}
    # [2,4) 2/3, [3,5) 2/3, [2,5) 1, [1,5) 3/4, [2,6) 3/4
    assert positive == {(3, 1), (4, 1), (4, 2), (4, 3), (5, 3)}
    # [1, 4) (t=3, k=2) and [3, 6) (t=5, k=2) have tIoU exactly 0.5: negative (strict >)
    assert y[3, 2] == 0 and y[5, 2] == 0
    looser = proposal_labels(np.array([[2.0, 5.0]]), 7, anchor_lengths(4), threshold=0.49)
    assert looser[3, 2] == 1 and looser[5, 2] == 1


def test_proposal_labels_start_clipped_and_max_over_segments():
    # At t = 0 anchor 2 (length 2) is [0, 1) after clipping: identical to the segment [0, 1).
    y = proposal_labels(np.array([[0.0, 1.0], [4.0, 6.0]]), 6, anchor_lengths(2))
    assert y[0].tolist() == [1, 1]
    assert y[5].tolist() == [0, 1]  # [4, 6) matches the second segment
    assert proposal_labels(np.zeros((0, 2)), 3, anchor_lengths(2)).sum() == 0


def test_anchor_weights_from_all_steps():
    w = anchor_weights([np.array([[1, 0], [0, 0]]), np.array([[1, 1]])])
    # positive rates over 3 steps: 2/3 and 1/3
    np.testing.assert_allclose(w, [[1 / 3, 2 / 3], [2 / 3, 1 / 3]])
    with pytest.raises(ValueError, match="anchors"):
        anchor_weights([np.zeros((2, 2)), np.zeros((2, 3))])
    with pytest.raises(ValueError, match="at least one"):
        anchor_weights([])


def _case():
    logits = torch.tensor([[[0.0, 2.0], [-1.0, 0.0]]], dtype=torch.float64)
    labels = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    weights = torch.tensor([[0.75, 0.25], [0.6, 0.4]], dtype=torch.float64)
    return logits, labels, weights


def test_loss_hand_computed():
    logits, labels, weights = _case()
    terms = [
        0.75 * math.log(2),  # t0 k0: positive, -w+_0 log σ(0)
        0.4 * math.log1p(math.exp(2)),  # t0 k1: negative, -w-_1 log(1 - σ(2))
        0.25 * math.log1p(math.exp(-1)),  # t1 k0: negative, -w-_0 log(1 - σ(-1))
        0.6 * math.log(2),  # t1 k1: positive, -w+_1 log σ(0)
    ]
    loss = weighted_proposal_loss(logits, labels, torch.ones(1, 2, dtype=torch.float64), weights)
    assert loss.item() == pytest.approx(sum(terms) / 4)
    # mask excludes step 1: mean over the 2 pairs of step 0
    loss = weighted_proposal_loss(logits, labels, torch.tensor([[1.0, 0.0]]), weights)
    assert loss.item() == pytest.approx(sum(terms[:2]) / 2)


def test_loss_weights_swap_the_terms():
    logits, labels, weights = _case()
    mask = torch.ones(1, 2)
    swapped = weighted_proposal_loss(logits, labels, mask, weights.flip(1))
    terms = [
        0.25 * math.log(2),
        0.6 * math.log1p(math.exp(2)),
        0.75 * math.log1p(math.exp(-1)),
        0.4 * math.log(2),
    ]
    assert swapped.item() == pytest.approx(sum(terms) / 4)
    # weights from numpy are accepted too
    same = weighted_proposal_loss(logits, labels, mask, weights.numpy())
    assert same.item() == pytest.approx(weighted_proposal_loss(logits, labels, mask, weights).item())


def test_loss_stable_and_empty_mask():
    logits = torch.tensor([[[200.0, -200.0]]], requires_grad=True)
    labels = torch.tensor([[[0.0, 1.0]]])
    loss = weighted_proposal_loss(logits, labels, torch.ones(1, 1), torch.full((2, 2), 0.5))
    assert loss.item() == pytest.approx(100.0)  # (0.5 * 200 + 0.5 * 200) / 2
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    empty = weighted_proposal_loss(logits, labels, torch.zeros(1, 1), torch.full((2, 2), 0.5))
    assert empty.item() == 0.0 and empty.requires_grad


def test_loss_gradcheck():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    labels = (torch.rand(2, 3, 4, generator=gen) > 0.5).double()
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    weights = torch.rand(4, 2, dtype=torch.float64, generator=gen)
    assert torch.autograd.gradcheck(lambda z: weighted_proposal_loss(z, labels, mask, weights), (logits,))


@pytest.mark.parametrize(
    "labels, mask, weights, match",
    [
        ((1, 2, 3), (1, 2), (3, 2), r"labels .*\(1, 2, 2\).*\(1, 2, 3\)"),
        ((1, 2, 2), (2, 1), (2, 2), r"mask .*\(1, 2\).*\(2, 1\)"),
        ((1, 2, 2), (1, 2), (2, 3), r"weights .*\(2, 2\).*\(2, 3\)"),
    ],
)
def test_loss_shape_errors_name_the_shapes(labels, mask, weights, match):
    with pytest.raises(ValueError, match=match):
        weighted_proposal_loss(
            torch.zeros(1, 2, 2), torch.zeros(labels), torch.zeros(mask), torch.zeros(weights)
        )


PROPOSALS = np.array(
    [
        [0, 10, 0.9],
        [1, 10, 0.8],  # tIoU 0.9 with [0, 10): dropped at 0.8
        [0, 5, 0.7],  # tIoU 0.625 with [0, 8), 0.5 with [0, 10): kept at 0.8
        [20, 30, 0.6],
        [0, 8, 0.95],  # the best; tIoU with [0, 10) is exactly 0.8: not > 0.8
    ],
    dtype=float,
)


def test_nms_hand_made_list():
    np.testing.assert_array_equal(
        nms(PROPOSALS, 0.8), [[0, 8, 0.95], [0, 10, 0.9], [0, 5, 0.7], [20, 30, 0.6]]
    )
    np.testing.assert_array_equal(nms(PROPOSALS, 0.5), [[0, 8, 0.95], [20, 30, 0.6]])
    np.testing.assert_array_equal(nms(PROPOSALS, 0.8, max_keep=2), [[0, 8, 0.95], [0, 10, 0.9]])
    assert nms(np.zeros((0, 3)), 0.8).shape == (0, 3)
    with pytest.raises(ValueError, match=r"\(P, 3\)"):
        nms(np.zeros((2, 2)), 0.8)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        nms(PROPOSALS, 1.5)


def _greedy_reference(props, threshold):
    props = props[np.argsort(-props[:, 2], kind="stable")]
    kept, alive = [], np.ones(len(props), dtype=bool)
    for i in range(len(props)):
        if alive[i]:
            kept.append(i)
            alive[i + 1 :] &= segment_tiou(props[i + 1 :, :2], props[i : i + 1, :2])[:, 0] <= threshold
    return props[kept]


def test_nms_matches_the_plain_greedy_loop():
    rng = np.random.default_rng(0)
    for threshold in (0.0, 0.3, 0.5, 0.8, 1.0):
        for _ in range(20):
            n = int(rng.integers(1, 40))
            start = rng.integers(0, 30, n).astype(float)
            props = np.stack([start, start + rng.integers(0, 12, n) * 0.5, rng.choice([0.2, 0.5, 0.9], n)], 1)
            np.testing.assert_array_equal(nms(props, threshold), _greedy_reference(props, threshold))


def test_decode_tiny_score_map():
    scores = np.array([[0.9, 0.3], [0.2, 0.8], [0.05, 0.6]])
    lengths = anchor_lengths(2)
    # Without suppression: every score > 0.15, as [max(0, t+1-len), t+1, score], best first;
    # (t=0, k=1) is clipped to [0, 1).
    np.testing.assert_allclose(
        decode_proposals(scores, lengths, score_threshold=0.15, nms_threshold=1.0),
        [[0, 1, 0.9], [0, 2, 0.8], [1, 3, 0.6], [0, 1, 0.3], [1, 2, 0.2]],
    )
    # SST's NMS at 0.8 drops only the duplicate [0, 1)
    np.testing.assert_allclose(
        decode_proposals(scores, lengths, score_threshold=0.15),
        [[0, 1, 0.9], [0, 2, 0.8], [1, 3, 0.6], [1, 2, 0.2]],
    )
    np.testing.assert_allclose(
        decode_proposals(scores, lengths, score_threshold=0.15, nms_threshold=0.4), [[0, 1, 0.9], [1, 3, 0.6]]
    )
    np.testing.assert_allclose(decode_proposals(scores, lengths, max_proposals=1), [[0, 1, 0.9]])
    assert decode_proposals(scores, lengths, score_threshold=0.95).shape == (0, 3)
    with pytest.raises(ValueError, match=r"\(T, K\)"):
        decode_proposals(scores, anchor_lengths(3))
