"""Addressing primitives against hand-worked values, plus gradcheck in float64."""

import math

import pytest
import torch

from mannlab.nn import addressing as A


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_cosine_similarity_hand_values():
    keys = t([[[1.0, 0.0]]])  # (B=1, H=1, W=2)
    memory = t([[[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0], [1.0, 1.0]]])
    sim = A.cosine_similarity(keys, memory)
    assert torch.allclose(sim, t([[[1.0, 0.0, -1.0, 1 / math.sqrt(2)]]]))


def test_cosine_similarity_zero_vectors_are_guarded():
    sim = A.cosine_similarity(torch.zeros(1, 1, 3), torch.zeros(1, 4, 3))
    assert torch.equal(sim, torch.zeros(1, 1, 4))


def test_content_weights_hand_values():
    keys = t([[[1.0, 0.0]]])
    memory = t([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]])
    w = A.content_weights(keys, memory, t([[2.0]]))
    z = math.exp(2) + 1 + math.exp(-2)
    assert torch.allclose(w, t([[[math.exp(2) / z, 1 / z, math.exp(-2) / z]]]))


def test_content_weights_zero_key_is_uniform_not_nan():
    w = A.content_weights(torch.zeros(2, 3, 4), torch.randn(2, 5, 4), torch.ones(2, 3))
    assert torch.allclose(w, torch.full((2, 3, 5), 0.2))


def test_interpolate_hand_values():
    w = A.interpolate(t([[[1.0, 0.0, 0.0]]]), t([[[0.0, 0.0, 1.0]]]), t([[0.25]]))
    assert torch.allclose(w, t([[[0.25, 0.0, 0.75]]]))


@pytest.mark.parametrize(
    "shift, expected",
    [
        ([0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]),  # +1 moves the focus to the next slot
        ([1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]),  # -1 wraps around to the last slot
        ([0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]),
        ([0.2, 0.5, 0.3], [0.5, 0.3, 0.0, 0.2]),
    ],
)
def test_circular_shift_hand_values(shift, expected):
    w = A.circular_shift(t([[[1.0, 0.0, 0.0, 0.0]]]), t([[shift]]))
    assert torch.allclose(w, t([[expected]]))


def test_circular_shift_range_two():
    # shifts -2..2; all mass on +2 moves slot 3 to slot 0 of 5 (wrap).
    w = A.circular_shift(t([[[0.0, 0.0, 0.0, 1.0, 0.0]]]), t([[[0.0, 0.0, 0.0, 0.0, 1.0]]]))
    assert torch.allclose(w, t([[[1.0, 0.0, 0.0, 0.0, 0.0]]]))


def test_circular_shift_rejects_even_or_too_wide_shifts():
    with pytest.raises(ValueError, match="odd"):
        A.circular_shift(torch.ones(1, 1, 4) / 4, torch.ones(1, 1, 2) / 2)
    with pytest.raises(ValueError, match="odd"):
        A.circular_shift(torch.ones(1, 1, 2) / 2, torch.ones(1, 1, 3) / 3)


def test_sharpen_hand_values():
    w = A.sharpen(t([[[0.5, 0.25, 0.25]]]), t([[2.0]]), eps=0.0)
    assert torch.allclose(w, t([[[2 / 3, 1 / 6, 1 / 6]]]))
    same = A.sharpen(t([[[0.5, 0.25, 0.25]]]), t([[1.0]]), eps=0.0)
    assert torch.allclose(same, t([[[0.5, 0.25, 0.25]]]))


def test_sharpen_gradient_finite_at_zero_weight():
    w = t([[[1.0, 0.0, 0.0]]]).requires_grad_()
    gamma = t([[3.0]]).requires_grad_()
    A.sharpen(w, gamma)[..., 0].sum().backward()
    assert torch.isfinite(w.grad).all() and torch.isfinite(gamma.grad).all()


def test_write_single_head_hand_values():
    memory = t([[[1.0, 1.0], [2.0, 2.0]]])
    out = A.write(memory, t([[[1.0, 0.0]]]), t([[[1.0, 0.0]]]), t([[[0.0, 5.0]]]))
    assert torch.allclose(out, t([[[0.0, 6.0], [2.0, 2.0]]]))


def test_write_multiple_heads_multiply_erasures_and_sum_additions():
    memory = t([[[1.0, 1.0], [2.0, 2.0]]])
    weights = t([[[0.5, 0.0], [0.5, 1.0]]])  # two heads
    erase = t([[[1.0, 1.0], [1.0, 0.0]]])
    add = t([[[1.0, 0.0], [0.0, 1.0]]])
    out = A.write(memory, weights, erase, add)
    # slot 0: keep (1-.5)(1-.5)=.25 on col 0, (1-.5)(1-0)=.5 on col 1; add .5*[1,0] + .5*[0,1]
    # slot 1: keep (1-0)(1-1)=0 on col 0, 1 on col 1; add 1*[0,1]
    assert torch.allclose(out, t([[[0.25 + 0.5, 0.5 + 0.5], [0.0, 3.0]]]))


def test_read_hand_values():
    r = A.read(t([[[1.0, 2.0], [3.0, 4.0]]]), t([[[0.25, 0.75], [1.0, 0.0]]]))
    assert torch.allclose(r, t([[[2.5, 3.5], [1.0, 2.0]]]))


def _simplex(*shape):
    return torch.softmax(torch.randn(*shape, dtype=torch.float64), -1).requires_grad_()


def _rand(*shape):
    return torch.randn(*shape, dtype=torch.float64).requires_grad_()


def test_gradcheck_every_primitive():
    torch.manual_seed(0)
    B, H, N, W = 2, 3, 6, 4
    gc = torch.autograd.gradcheck
    assert gc(
        A.content_weights, (_rand(B, H, W), _rand(B, N, W), _rand(B, H).abs().detach().requires_grad_())
    )
    assert gc(
        A.interpolate,
        (_simplex(B, H, N), _simplex(B, H, N), torch.rand(B, H, dtype=torch.float64, requires_grad=True)),
    )
    assert gc(A.circular_shift, (_simplex(B, H, N), _simplex(B, H, 3)))
    gamma = (1 + torch.rand(B, H, dtype=torch.float64)).requires_grad_()
    assert gc(A.sharpen, (_simplex(B, H, N), gamma))
    erase = torch.rand(B, H, W, dtype=torch.float64, requires_grad=True)
    assert gc(A.write, (_rand(B, N, W), _simplex(B, H, N), erase, _rand(B, H, W)))
    assert gc(A.read, (_rand(B, N, W), _simplex(B, H, N)))
