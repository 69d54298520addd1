"""Wormhole path lengths of untrained MANNs with uniformly random heads (TARDIS paper, section 6).

Gulcehre, Chandar, Bengio (2017), "Memory Augmented Neural Networks with
Wormhole Connections", section 6, eq. 40 and figures 3-5. Everything here is
numpy, vectorised over simulations; the only Python loop is over time.

Time and memory
    Steps are t = 1..T; node 0 is the initial state h_0. At step t the
    controller reads one cell of M_{t-1} (cell j_t), computes h_t, then writes
    its micro-state h_t into one cell (i_t). k is the number of cells.
    Arrays indexed by step use index t - 1.

Schemes (how j_t and i_t are chosen)
    "tardis"  i_t = t - 1 (sequential) for t <= k, then i_t = j_t (write into
              the cell just read); j_t uniform.
    "umann"   j_t and i_t independent and uniform over the k cells.
    "urmann"  sequential writes i_t = (t - 1) mod k (the paper assumes k >= T,
              where this is plain sequential; for k < T the writer wraps round
              and overwrites the oldest cell), j_t uniform.

Cells not yet written (the paper is silent; ``unwritten``)
    "empty"   the reader picks uniformly among all k cells; a never-written cell
              holds the initial memory, which carries no micro-state, so such a
              read creates no wormhole (it is a wasted read).
    "written" the reader picks uniformly among the cells written so far (at
              t = 1 nothing is written and there is no read).

Wormhole path length stored in a cell (eq. 40)
    len(M_t[i_t]) = len(M_{t-1}[j_t]) + 1 and other cells keep theirs. As in the
    paper's proof, lengths written during the first k steps are 0, so for uniform
    reads the mean over cells after step T is T/k - 1 (exactly, for TARDIS).

Dependency graph of section 6 / figure 4
    Nodes h_0..h_T; recurrent edges t-1 -> t; wormhole edges s -> t when the
    cell read at step t held h_s (s >= 1). Every edge has length 1. A read of
    h_{t-1} at step t runs parallel to the recurrent edge and skips nothing; it
    is counted as a recurrent edge. For a dependency of step t1 on step t0 the
    shortest path h_t0 -> h_t1 is found by dynamic programming over t (edges only
    go forward in time); among shortest paths the one with the fewest recurrent
    edges is kept, and that count is "the length travelled outside wormhole
    connections" (figure 5 b).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

SCHEMES = ("tardis", "umann", "urmann")
UNWRITTEN = ("empty", "written")


class HeadRun(NamedTuple):
    """One batch of simulations of the heads; S simulations, T steps, k cells.

    reads    (S, T) int: cell j_t read at step t (index t - 1); -1 = no read.
    writes   (S, T) int: cell i_t written at step t.
    sources  (S, T) int: the step s whose micro-state h_s the read at step t
             returned; 0 when the read returned no micro-state (no read, or a
             never-written cell).
    lengths  (S, T, k) int: eq. 40 path length of every cell after step t.
    """

    reads: np.ndarray
    writes: np.ndarray
    sources: np.ndarray
    lengths: np.ndarray


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")
    return scheme


def check_unwritten(unwritten: str) -> str:
    if unwritten not in UNWRITTEN:
        raise ValueError(f"unwritten must be one of {', '.join(UNWRITTEN)}; got {unwritten!r}")
    return unwritten


def _check_count(name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def _fixed_heads(
    name: str, value: np.ndarray | None, shape: tuple[int, int], cells: int, allow_none: bool
) -> np.ndarray | None:
    """Validate caller-given head choices (S, T) with values in [0, k) (or -1 if allowed)."""
    if value is None:
        return None
    array = np.asarray(value)
    if array.ndim == 1:
        array = array[None, :]
    if array.shape != shape or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{name} must be an integer array of shape (simulations, steps) = {shape}; "
            f"got {array.dtype} {array.shape}"
        )
    low = -1 if allow_none else 0
    if array.min() < low or array.max() >= cells:
        raise ValueError(
            f"{name} must hold cell indices in [{low}, {cells - 1}]; "
            f"got values in [{array.min()}, {array.max()}]"
        )
    return array.astype(np.int64)


def _uniform_read(rng: np.random.Generator, written: np.ndarray, unwritten: str) -> np.ndarray:
    """(S,) cell indices: uniform over all cells, or over each row's written cells (-1 if none)."""
    sims, cells = written.shape
    if unwritten == "empty":
        return rng.integers(0, cells, size=(sims,))
    count = written.sum(axis=1)
    rank = np.floor(rng.random(sims) * count).astype(np.int64)  # which written cell
    pick = np.argmax(written.cumsum(axis=1) > rank[:, None], axis=1)  # index of that cell
    return np.where(count > 0, pick, -1)


def simulate(
    scheme: str,
    steps: int,
    cells: int,
    simulations: int = 100,
    seed: int | Sequence[int] | np.random.Generator = 0,
    unwritten: str = "empty",
    reads: np.ndarray | None = None,
    writes: np.ndarray | None = None,
) -> HeadRun:
    """Simulate the read/write heads of ``scheme`` for ``steps`` steps with ``cells`` cells.

    ``reads`` / ``writes`` (S, T) fix the head choices instead of sampling them
    (hand-worked cases); TARDIS's writes follow from its reads and cannot be given.
    See the module docstring for the schemes, ``unwritten`` and eq. 40.
    """
    check_scheme(scheme)
    check_unwritten(unwritten)
    steps, cells = _check_count("steps (T)", steps), _check_count("cells (k)", cells)
    sims = _check_count("simulations", simulations)
    given = next((np.asarray(a) for a in (reads, writes) if a is not None), None)
    if given is not None:
        sims = 1 if given.ndim == 1 else given.shape[0]
    reads = _fixed_heads("reads", reads, (sims, steps), cells, allow_none=True)
    writes = _fixed_heads("writes", writes, (sims, steps), cells, allow_none=False)
    if writes is not None and scheme != "umann":
        raise ValueError(f"writes can only be given for scheme 'umann'; {scheme} writes by rule")
    rng = np.random.default_rng(seed)
    rows = np.arange(sims)
    stored = np.zeros((sims, cells), np.int64)  # step whose micro-state each cell holds (0 = none)
    length = np.zeros((sims, cells), np.int64)  # eq. 40 len of each cell
    written = np.zeros((sims, cells), bool)
    out = HeadRun(
        np.empty((sims, steps), np.int64),
        np.empty((sims, steps), np.int64),
        np.empty((sims, steps), np.int64),
        np.empty((sims, steps, cells), np.int64),
    )
    for t in range(1, steps + 1):
        j = reads[:, t - 1] if reads is not None else _uniform_read(rng, written, unwritten)
        has_read = j >= 0
        jj = np.where(has_read, j, 0)
        source = np.where(has_read, stored[rows, jj], 0)
        if scheme == "tardis":
            if t > cells and not has_read.all():
                raise ValueError(
                    f"TARDIS needs a read at every step after the memory is full "
                    f"(t > k = {cells}); reads hold -1 at step {t}"
                )
            i = np.full(sims, t - 1) if t <= cells else jj
        elif scheme == "urmann":
            i = np.full(sims, (t - 1) % cells)
        else:
            i = writes[:, t - 1] if writes is not None else rng.integers(0, cells, size=sims)
        new_length = np.where(has_read, length[rows, jj] + 1, 0) if t > cells else 0
        stored[rows, i], length[rows, i], written[rows, i] = t, new_length, True
        out.reads[:, t - 1], out.writes[:, t - 1], out.sources[:, t - 1] = j, i, source
        out.lengths[:, t - 1] = length
    return out


def shortest_paths(sources: np.ndarray, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """Shortest path h_t0 -> h_t1 over recurrent and wormhole edges, per simulation.

    Args:
        sources: (S, T) from :func:`simulate` (``sources[:, t-1]`` = step read at t), T >= t1.
        t0, t1: the dependency, 1 <= t0 < t1 <= T.

    Returns:
        (total, outside): (S,) int path length in edges, and the number of
        recurrent edges on it (ties between shortest paths go to fewer recurrent
        edges). total <= t1 - t0, with equality when no useful wormhole lands in range.
    """
    sources = np.asarray(sources)
    if sources.ndim != 2:
        raise ValueError(f"sources must be (simulations, steps); got shape {sources.shape}")
    check_dependency(t0, t1, sources.shape[1])
    # key = edges * base + recurrent edges: minimising it is the lexicographic minimum.
    base = t1 + 1
    unreachable = np.iinfo(np.int64).max // 2
    key = np.full((sources.shape[0], t1 + 1), unreachable, np.int64)  # nodes h_0..h_t1
    key[:, t0] = 0
    rows = np.arange(sources.shape[0])
    for t in range(t0 + 1, t1 + 1):
        src = sources[:, t - 1]
        skips = (src >= t0) & (src < t - 1)  # h_{t-1} read at t is a recurrent edge
        via_wormhole = np.where(skips, key[rows, np.minimum(src, t1)] + base, unreachable)
        key[:, t] = np.minimum(key[:, t - 1] + base + 1, via_wormhole)
    return key[:, t1] // base, key[:, t1] % base


def check_dependency(t0: int, t1: int, steps: int | None = None) -> None:
    """t0 and t1 must be steps with 1 <= t0 < t1 (<= steps when given)."""
    for name, value in (("t0", t0), ("t1", t1)):
        _check_count(name, value)
    if t0 >= t1:
        raise ValueError(
            f"expected t0 < t1 (a dependency of step t1 on an earlier step t0); got t0={t0}, t1={t1}"
        )
    if steps is not None and t1 > steps:
        raise ValueError(f"t1={t1} is beyond the {steps} simulated steps")


# ------------------------------------------------------------------ the two figures


class LengthCurves(NamedTuple):
    """Figure 3 data for one scheme: ``cells_mean`` (T, k) mean over simulations of the
    eq. 40 length of each cell after step t; ``mean`` (T,) its mean over cells;
    ``sem`` (T,) standard error over simulations of the mean over cells;
    ``analytic`` (T,) max(t/k - 1, 0)."""

    cells_mean: np.ndarray
    mean: np.ndarray
    sem: np.ndarray
    analytic: np.ndarray


def length_curves(
    scheme: str,
    steps: int = 200,
    cells: int = 50,
    simulations: int = 100,
    seed: int = 0,
    unwritten: str = "empty",
) -> LengthCurves:
    """Expected wormhole path length stored in each cell over time (eq. 40, figure 3)."""
    run = simulate(scheme, steps, cells, simulations, [seed, SCHEMES.index(scheme)], unwritten)
    per_sim = run.lengths.mean(axis=2)  # (S, T)
    sem = per_sim.std(axis=0, ddof=1) / np.sqrt(simulations) if simulations > 1 else np.full(steps, np.nan)
    t = np.arange(1, steps + 1)
    return LengthCurves(run.lengths.mean(axis=0), per_sim.mean(axis=0), sem, np.maximum(t / cells - 1.0, 0.0))


def path_sweep(
    memory_sizes: Sequence[int],
    t0: int = 5,
    t1: int = 50,
    simulations: int = 200,
    seed: int = 0,
    schemes: Sequence[str] = SCHEMES,
    unwritten: Sequence[str] = UNWRITTEN,
) -> list[dict]:
    """Figure 5: expected shortest-path length h_t0 -> h_t1 and length outside wormholes.

    One row per (scheme, unwritten policy, memory size k): ``scheme``, ``unwritten``,
    ``cells``, ``total_mean``, ``total_sem``, ``outside_mean``, ``outside_sem``,
    ``unshortened`` (fraction of simulations whose shortest path is the plain t1 - t0).
    Each (scheme, policy, k) uses its own random stream derived from ``seed``;
    the heads are simulated for t1 steps (later steps cannot shorten the path).
    """
    check_dependency(t0, t1)
    sizes = [_check_count("memory size", k) for k in memory_sizes]
    if not sizes:
        raise ValueError("memory_sizes must hold at least one size")
    rows = []
    for scheme in schemes:
        for policy in unwritten:
            for k in sizes:
                stream = [
                    seed,
                    SCHEMES.index(check_scheme(scheme)),
                    UNWRITTEN.index(check_unwritten(policy)),
                    k,
                ]
                run = simulate(scheme, t1, k, simulations, stream, policy)
                total, outside = shortest_paths(run.sources, t0, t1)
                rows.append(
                    {
                        "scheme": scheme,
                        "unwritten": policy,
                        "cells": k,
                        "total_mean": total.mean(),
                        "total_sem": _sem(total),
                        "outside_mean": outside.mean(),
                        "outside_sem": _sem(outside),
                        "unshortened": float((total == t1 - t0).mean()),
                    }
                )
    return rows


def _sem(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else float("nan")
