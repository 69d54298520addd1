"""DNC addressing primitives against hand-worked values, invariants, and gradcheck in float64."""

import pytest
import torch

from mannlab.nn import addressing as A


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_retention_hand_values():
    # R=2 heads, N=3: (1 - 0.5 [1, 0, 0]) o (1 - 1.0 [0.5, 0.5, 0]) = [0.5, 1, 1] o [0.5, 0.5, 1]
    psi = A.retention(t([[0.5, 1.0]]), t([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]]))
    assert torch.allclose(psi, t([[0.25, 0.5, 1.0]]))


def test_retention_closed_free_gates_keep_everything():
    psi = A.retention(torch.zeros(2, 3), torch.rand(2, 3, 5))
    assert torch.equal(psi, torch.ones(2, 5))


def test_usage_hand_values():
    # u + w - u w = [0.5 + 0.5 - 0.25, 0 + 0.5 - 0, 1 + 0 - 0, 0.2] = [0.75, 0.5, 1, 0.2]
    # times psi [1, 1, 0.5, 0.5]                                  -> [0.75, 0.5, 0.5, 0.1]
    u = A.usage(t([[0.5, 0.0, 1.0, 0.2]]), t([[0.5, 0.5, 0.0, 0.0]]), t([[1.0, 1.0, 0.5, 0.5]]))
    assert torch.allclose(u, t([[0.75, 0.5, 0.5, 0.1]]))


def test_allocation_hand_values():
    # u = [0.4, 0.1, 0.9, 0.5]: free list phi = [1, 0, 3, 2], sorted u = [0.1, 0.4, 0.5, 0.9]
    # a[phi] = [0.9, 0.6 * 0.1, 0.5 * 0.1 * 0.4, 0.1 * 0.1 * 0.4 * 0.5] = [0.9, 0.06, 0.02, 0.002]
    a = A.allocation(t([[0.4, 0.1, 0.9, 0.5]]))
    assert torch.allclose(a, t([[0.06, 0.9, 0.002, 0.02]]))
    assert torch.allclose(a.sum(), t(1 - 0.4 * 0.1 * 0.9 * 0.5))  # sum a = 1 - prod u


def test_allocation_ties_go_to_the_lower_slot_first():
    # u = [0.5, 0.2, 0.5, 0.2]: stable order phi = [1, 3, 0, 2], sorted u = [0.2, 0.2, 0.5, 0.5]
    # a[phi] = [0.8, 0.8 * 0.2, 0.5 * 0.04, 0.5 * 0.02] = [0.8, 0.16, 0.02, 0.01]
    a = A.allocation(t([[0.5, 0.2, 0.5, 0.2]]))
    assert torch.allclose(a, t([[0.02, 0.8, 0.01, 0.16]]))


@pytest.mark.parametrize(
    "u, expected",
    [
        ([0.0, 0.0, 0.0], [1.0, 0.0, 0.0]),  # empty memory: the first slot
        ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]),  # full memory: nothing to allocate
        ([1.0, 0.0, 1.0], [0.0, 1.0, 0.0]),  # the one free slot
    ],
)
def test_allocation_edge_cases(u, expected):
    assert torch.allclose(A.allocation(t([u])), t([expected]))


def test_allocation_batched_rows_sorted_independently():
    u = t([[0.4, 0.1, 0.9, 0.5], [0.5, 0.2, 0.5, 0.2]])
    assert torch.allclose(A.allocation(u), t([[0.06, 0.9, 0.002, 0.02], [0.02, 0.8, 0.01, 0.16]]))


def test_write_weighting_hand_values():
    # 0.5 * (0.25 [1, 0, 0] + 0.75 [0.2, 0.3, 0.5]) = 0.5 [0.4, 0.225, 0.375]
    w = A.write_weighting(t([[1.0, 0.0, 0.0]]), t([[0.2, 0.3, 0.5]]), t([0.5]), t([0.25]))
    assert torch.allclose(w, t([[0.2, 0.1125, 0.1875]]))


def test_precedence_hand_values():
    # (1 - 0.75) [0.5, 0.5, 0] + [0, 0.25, 0.5]
    p = A.precedence(t([[0.5, 0.5, 0.0]]), t([[0.0, 0.25, 0.5]]))
    assert torch.allclose(p, t([[0.125, 0.375, 0.5]]))


def test_link_matrix_hand_values():
    links = t([[[0.0, 0.5, 0.2], [0.1, 0.0, 0.4], [0.3, 0.6, 0.0]]])
    w, p = t([[0.5, 0.0, 0.25]]), t([[0.2, 0.6, 0.2]])
    # L[i,j] = (1 - w[i] - w[j]) L[i,j] + w[i] p[j]:
    #   [0,1] = 0.5 * 0.5 + 0.5 * 0.6 = 0.55     [0,2] = 0.25 * 0.2 + 0.5 * 0.2 = 0.15
    #   [1,0] = 0.5 * 0.1 + 0 = 0.05             [1,2] = 0.75 * 0.4 + 0 = 0.3
    #   [2,0] = 0.25 * 0.3 + 0.25 * 0.2 = 0.125  [2,1] = 0.75 * 0.6 + 0.25 * 0.6 = 0.6
    expected = t([[[0.0, 0.55, 0.15], [0.05, 0.0, 0.3], [0.125, 0.6, 0.0]]])
    assert torch.allclose(A.link_matrix(links, w, p), expected)


def test_link_matrix_diagonal_is_zero_even_from_a_bad_start():
    links = A.link_matrix(torch.rand(2, 5, 5), torch.rand(2, 5) / 5, torch.rand(2, 5) / 5)
    assert torch.equal(torch.diagonal(links, dim1=1, dim2=2), torch.zeros(2, 5))


def test_write_order_recorded_and_followed():
    # Write slot 2, then slot 0, then slot 1 (one-hot), from the zero state.
    links, p = torch.zeros(1, 3, 3, dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64)
    for slot in (2, 0, 1):
        w = torch.nn.functional.one_hot(torch.tensor([slot]), 3).double()
        links, p = A.link_matrix(links, w, p), A.precedence(p, w)
    assert torch.allclose(links, t([[[0, 0, 1], [1, 0, 0], [0, 0, 0]]]))  # 0 after 2, 1 after 0
    assert torch.allclose(p, t([[0.0, 1.0, 0.0]]))
    forward, backward = A.directional_weights(links, t([[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]]))
    assert torch.allclose(forward, t([[[1, 0, 0], [0, 1, 0]]]))  # after 2 comes 0, after 0 comes 1
    assert torch.allclose(backward, t([[[0, 0, 0], [0, 0, 1]]]))  # nothing before 2, 2 before 0


def test_directional_weights_hand_values():
    links = t([[[0.0, 0.55, 0.15], [0.05, 0.0, 0.3], [0.125, 0.6, 0.0]]])
    forward, backward = A.directional_weights(links, t([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]]))
    assert torch.allclose(forward, t([[[0.0, 0.05, 0.125], [0.275, 0.025, 0.3625]]]))  # L w
    assert torch.allclose(backward, t([[[0.0, 0.55, 0.15], [0.025, 0.275, 0.225]]]))  # L^T w


def test_read_weighting_hand_values():
    b, c, f = t([[[1.0, 0.0, 0.0]]]), t([[[0.0, 1.0, 0.0]]]), t([[[0.0, 0.5, 0.5]]])
    w = A.read_weighting(b, c, f, t([[[0.2, 0.5, 0.3]]]))
    assert torch.allclose(w, t([[[0.2, 0.5 + 0.15, 0.15]]]))


def _sub_simplex(*shape, generator):
    """Random weightings with sum <= 1 (a softmax over N + 1 with the last entry dropped)."""
    n = shape[-1]
    return torch.softmax(3 * torch.randn(*shape[:-1], n + 1, dtype=torch.float64, generator=generator), -1)[
        ..., :n
    ]


def test_weightings_stay_sub_distributions_over_many_random_steps():
    g = torch.Generator().manual_seed(0)
    B, R, N = 4, 2, 6
    links, p = torch.zeros(B, N, N, dtype=torch.float64), torch.zeros(B, N, dtype=torch.float64)
    u, write_w = torch.zeros(B, N, dtype=torch.float64), torch.zeros(B, N, dtype=torch.float64)
    read_w = torch.zeros(B, R, N, dtype=torch.float64)
    for _ in range(200):
        free = torch.rand(B, R, dtype=torch.float64, generator=g)
        u = A.usage(u, write_w, A.retention(free, read_w))
        alloc = A.allocation(u)
        gates = torch.rand(2, B, dtype=torch.float64, generator=g)
        write_w = A.write_weighting(alloc, _sub_simplex(B, N, generator=g), *gates)
        links, p = A.link_matrix(links, write_w, p), A.precedence(p, write_w)
        forward, backward = A.directional_weights(links, read_w)
        modes = torch.softmax(torch.randn(B, R, 3, dtype=torch.float64, generator=g), -1)
        read_w = A.read_weighting(backward, _sub_simplex(B, R, N, generator=g), forward, modes)
        tol = 1e-12
        assert (u >= 0).all() and (u <= 1 + tol).all()
        assert (alloc >= 0).all() and (alloc.sum(-1) <= 1 + tol).all()
        assert (write_w.sum(-1) <= 1 + tol).all() and (p.sum(-1) <= 1 + tol).all()
        assert (links >= -tol).all()
        assert (links.sum(-1) <= 1 + tol).all() and (links.sum(-2) <= 1 + tol).all()
        assert (forward.sum(-1) <= 1 + tol).all() and (backward.sum(-1) <= 1 + tol).all()
        assert (read_w >= 0).all() and (read_w.sum(-1) <= 1 + tol).all()
    assert torch.equal(torch.diagonal(links, dim1=1, dim2=2), torch.zeros(B, N, dtype=torch.float64))


def _unit(*shape):
    return torch.rand(*shape, dtype=torch.float64).requires_grad_()


def test_gradcheck_every_dnc_primitive():
    torch.manual_seed(0)
    B, R, N = 2, 3, 5
    gc = torch.autograd.gradcheck
    assert gc(A.retention, (_unit(B, R), _unit(B, R, N) / N))
    assert gc(A.usage, (_unit(B, N), _unit(B, N) / N, _unit(B, N)))
    # Allocation is piecewise smooth: keep the usages apart (no ties within eps of gradcheck).
    distinct = (torch.randperm(B * N, dtype=torch.float64).view(B, N) + 0.5) / (B * N)
    assert gc(A.allocation, (distinct.requires_grad_(),))
    assert gc(A.write_weighting, (_unit(B, N), _unit(B, N), _unit(B), _unit(B)))
    assert gc(A.precedence, (_unit(B, N) / N, _unit(B, N) / N))
    assert gc(A.link_matrix, (_unit(B, N, N) / N, _unit(B, N) / N, _unit(B, N) / N))
    assert gc(A.directional_weights, (_unit(B, N, N) / N, _unit(B, R, N) / N))
    assert gc(A.read_weighting, (_unit(B, R, N), _unit(B, R, N), _unit(B, R, N), _unit(B, R, 3)))


def test_allocation_gradient_at_zero_usage():
    # a = [1 - u0, (1 - u1) u0, (1 - u2) u0 u1, (1 - u3) u0 u1 u2]; at u = 0 the gradient of
    # a . [1, 2, 3, 4] is [-1 + 2, 0, 0, 0]: the exclusive cumprod must not give NaN at zeros.
    u = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
    (A.allocation(u) * t([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert torch.equal(u.grad, t([[1.0, 0.0, 0.0, 0.0]]))
