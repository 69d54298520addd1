"""Wormhole simulations (TARDIS paper section 6): hand-worked cases, eq. 40 vs T/k - 1, paths."""

import numpy as np
import pytest

from mannlab.analysis import length_curves, path_sweep, shortest_paths, simulate

# T = 6, k = 2, TARDIS with fixed reads (-1 = no read at t = 1). Worked by hand:
# t:        1  2  3  4  5  6
# read j_t: -  0  1  1  0  1      write i_t: 0 1 (sequential), then i_t = j_t: 1 1 0 1
# source:   0  1  2  3  1  4      (cell 0 holds h_1 until t = 5, cell 1 holds h_2, h_3, h_4, h_6)
# eq. 40:   lengths written at t <= k are 0; t = 3: len(cell 1) = 0 + 1 = 1; t = 4: 2;
#           t = 5: len(cell 0) = 0 + 1 = 1; t = 6: len(cell 1) = 2 + 1 = 3.
HAND_READS = np.array([-1, 0, 1, 1, 0, 1])


def test_tardis_hand_worked_heads_and_lengths():
    run = simulate("tardis", 6, 2, reads=HAND_READS)
    assert run.writes.tolist() == [[0, 1, 1, 1, 0, 1]]
    assert run.sources.tolist() == [[0, 1, 2, 3, 1, 4]]
    assert run.lengths[0].tolist() == [[0, 0], [0, 0], [0, 1], [0, 2], [1, 2], [1, 3]]
    assert run.lengths[0, -1].mean() == 6 / 2 - 1  # T/k - 1, exactly for TARDIS


def test_shortest_paths_hand_worked():
    sources = simulate("tardis", 6, 2, reads=HAND_READS).sources
    # 1 -> 6: wormhole 1 -> 5 (h_1 read at t = 5), then recurrent 5 -> 6.
    total, outside = shortest_paths(sources, 1, 6)
    assert (total.tolist(), outside.tolist()) == ([2], [1])
    # 2 -> 6: 2 -> 3 -> 4 (reads of h_{t-1} count as recurrent), wormhole 4 -> 6.
    total, outside = shortest_paths(sources, 2, 6)
    assert (total.tolist(), outside.tolist()) == ([3], [2])
    # 5 -> 6: one recurrent step.
    assert [a.tolist() for a in shortest_paths(sources, 5, 6)] == [[1], [1]]


def test_umann_hand_worked_with_given_writes():
    # k = 2: writes 0 1 0 0 1 1, reads - 0 1 0 1 0 (uMANN heads are independent).
    # cell 0 holds h_1, h_3 (t = 3), h_4 (t = 4); cell 1 holds h_2, then h_5, h_6.
    run = simulate("umann", 6, 2, reads=np.array([-1, 0, 1, 0, 1, 0]), writes=np.array([0, 1, 0, 0, 1, 1]))
    assert run.sources.tolist() == [[0, 1, 2, 3, 2, 4]]
    # t = 3 writes len(cell 1) + 1 = 1 into cell 0; t = 4: len(cell 0) + 1 = 2 into cell 0;
    # t = 5: len(cell 1) + 1 = 1 into cell 1; t = 6: len(cell 0) + 1 = 3 into cell 1.
    assert run.lengths[0, -1].tolist() == [2, 3]


def test_unwritten_cells_policies():
    # "written": the reader only picks cells that hold a micro-state, so every read
    # after t = 1 returns one; "empty": a read of a never-written cell returns none (0).
    written = simulate("urmann", 30, 100, simulations=50, seed=1, unwritten="written")
    assert (written.reads[:, 0] == -1).all() and (written.sources[:, 1:] >= 1).all()
    assert (written.sources[:, 1:] < np.arange(2, 31)).all()  # always an earlier step
    empty = simulate("urmann", 30, 100, simulations=50, seed=1, unwritten="empty")
    assert (empty.sources == 0).mean() > 0.5  # most cells are empty
    assert ((empty.sources == 0) == (empty.reads >= np.arange(30))).all()


@pytest.mark.parametrize("scheme", ["tardis", "umann"])
@pytest.mark.parametrize("steps,cells", [(200, 50), (60, 6), (40, 20)])
def test_mean_length_matches_t_over_k_minus_one(scheme, steps, cells):
    curves = length_curves(scheme, steps, cells, simulations=200, seed=3)
    expected = steps / cells - 1
    assert curves.analytic[-1] == pytest.approx(expected)
    if scheme == "tardis":
        # each write after the memory is full adds 1 to one cell: the mean is exact
        np.testing.assert_allclose(curves.mean, curves.analytic, atol=1e-12)
    else:
        assert abs(curves.mean[-1] - expected) < 4 * curves.sem[-1]
    # every cell has the same expectation: the per-cell means scatter around it
    assert abs(curves.cells_mean[-1].mean() - expected) < 0.1 * expected + 4 * curves.sem[-1] + 1e-9


def test_shortest_path_bounds():
    for scheme in ("tardis", "umann", "urmann"):
        for unwritten in ("empty", "written"):
            run = simulate(scheme, 60, 7, simulations=100, seed=4, unwritten=unwritten)
            for t0, t1 in ((5, 50), (1, 60), (30, 31)):
                total, outside = shortest_paths(run.sources, t0, t1)
                assert (total <= t1 - t0).all() and (total >= 1).all()
                assert (outside <= total).all() and (outside >= 0).all()
                # no wormhole that skips a step and starts at or after t0 -> plain path
                steps = np.arange(t0 + 1, t1 + 1)
                src = run.sources[:, t0:t1]
                none = ~((src >= t0) & (src < steps - 1)).any(axis=1)
                assert (total[none] == t1 - t0).all() and (outside[none] == t1 - t0).all()
                assert (total[~none] < t1 - t0).all()


def test_path_sweep_rows_and_trend():
    rows = path_sweep(
        [2, 10], t0=5, t1=50, simulations=100, seed=0, schemes=["tardis"], unwritten=["written"]
    )
    assert [r["cells"] for r in rows] == [2, 10]
    assert rows[1]["total_mean"] < rows[0]["total_mean"] <= 45
    assert set(rows[0]) >= {
        "scheme",
        "unwritten",
        "total_mean",
        "total_sem",
        "outside_mean",
        "outside_sem",
        "unshortened",
    }


def test_same_seed_same_run():
    a = simulate("umann", 20, 4, simulations=10, seed=7)
    b = simulate("umann", 20, 4, simulations=10, seed=7)
    assert all((x == y).all() for x, y in zip(a, b))


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: simulate("ntm", 5, 2), "scheme must be one of"),
        (lambda: simulate("tardis", 5, 0), "cells (k) must be an integer >= 1"),
        (lambda: simulate("tardis", 0, 2), "steps (T) must be an integer >= 1"),
        (lambda: simulate("tardis", 5, 2, unwritten="zero"), "unwritten must be one of"),
        (lambda: simulate("tardis", 5, 2, reads=np.array([0, 0, 5, 0, 0])), "cell indices in [-1, 1]"),
        (lambda: simulate("tardis", 5, 2, reads=np.array([0, 0, -1, 0, 0])), "needs a read at every step"),
        (lambda: simulate("tardis", 5, 2, reads=np.array([0, 0])), "shape (simulations, steps)"),
        (lambda: simulate("urmann", 3, 2, writes=np.array([0, 0, 0])), "only be given for scheme 'umann'"),
        (lambda: shortest_paths(np.zeros((2, 10), int), 5, 5), "expected t0 < t1"),
        (lambda: shortest_paths(np.zeros((2, 10), int), 0, 5), "t0 must be an integer >= 1"),
        (lambda: shortest_paths(np.zeros((2, 10), int), 2, 11), "beyond the 10 simulated steps"),
        (lambda: path_sweep([]), "at least one size"),
    ],
)
def test_bad_parameters_fail_clearly(call, message):
    with pytest.raises(
        ValueError,
        match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        call()
