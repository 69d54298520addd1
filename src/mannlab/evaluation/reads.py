"""Where the reads land: do a memory model's reads find the cell its due item was written to?

For a task that names, for each step, the earlier input step whose content the step
reproduces or asks for (``Task.source_steps``: the element a copy output copies, the
rows of the item an associative-recall query repeats and of the item it answers), the
cell written at that source step is where a read *should* land. The numbers say how much
read weight lands there, or on the cells written k steps after it (k > 0, reads running
ahead of the output) or before it, and whether that cell still holds the item when it is
read (no later write chose it). They turn a memory-access picture into a curve over
training (``train.val_reads``) and make the D-NTM and TARDIS papers' tasks diagnosable.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import torch

#: Offsets k of the cells measured: the cell written at source step s + k.
OFFSETS = (-1, 0, 1, 2)


def _name(k: int) -> str:
    if k == 0:
        return "on_source"
    return f"ahead_{k}" if k > 0 else f"behind_{-k}"


def read_targets(
    read_weights: torch.Tensor,
    write_weights: torch.Tensor,
    sources: np.ndarray | torch.Tensor,
    mask: torch.Tensor,
    offsets: Iterable[int] = OFFSETS,
) -> dict[str, float]:
    """Read weight on the cells the sources were written to, as mean fractions.

    Args:
        read_weights: (B, T, R, N), the weightings the reads used (one-hot for discrete ones).
        write_weights: (B, T, H, N); the cell written at a step is each write head's argmax.
        sources: (B, T) integers, the source step of each step or -1 (``Task.source_steps``).
        mask: (B, T); scored steps (outputs) and unscored steps with a source (the query
            of associative recall) are counted apart.

    Returns keys (each a mean over steps, read heads and sequences; absent where no step
    qualifies): ``reads_on_source``, ``reads_ahead_k`` / ``reads_behind_k`` for the other
    offsets, ``source_kept`` (the fraction of scored steps whose source cell no later write
    chose before the step), and ``query_reads_on_source`` for unscored steps with a source.
    """
    read_w = read_weights.detach().float().cpu()
    write_w = write_weights.detach().float().cpu()
    if read_w.dim() != 4 or write_w.dim() != 4 or read_w.shape[:2] != write_w.shape[:2]:
        raise ValueError(
            "read_weights (B, T, R, N) and write_weights (B, T, H, N) must agree on B and T; got "
            f"{tuple(read_w.shape)} and {tuple(write_w.shape)}"
        )
    batch, steps = read_w.shape[:2]
    src = torch.as_tensor(np.asarray(sources), dtype=torch.long)
    if src.shape != (batch, steps):
        raise ValueError(f"sources must be (B, T) = {(batch, steps)}; got {tuple(src.shape)}")
    scored = mask.detach().cpu().reshape(batch, steps) > 0
    has_source = src >= 0

    written = write_w.argmax(-1)  # (B, T, H) the cell each write head chose
    out: dict[str, float] = {}
    for k in offsets:
        target = src + k
        valid = has_source & (target >= 0) & (target < steps)
        mass = _mass_on(read_w, written, target.clamp(0, steps - 1))  # (B, T)
        for prefix, where in (("reads_", valid & scored), ("query_reads_", valid & ~scored)):
            if where.any() and (k == 0 or prefix == "reads_"):
                out[prefix + _name(k)] = float(mass[where].mean())
    if (has_source & scored).any():
        kept = _kept(written, src.clamp(min=0))
        out["source_kept"] = float(kept[has_source & scored].float().mean())
    return out


def _mass_on(read_w: torch.Tensor, written: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B, T): the read weight at each step on the cells written at step target[b, t], summed
    over the distinct cells of the write heads and averaged over the read heads."""
    batch, steps, _, slots = read_w.shape
    heads = written.shape[-1]
    cells = torch.gather(written, 1, target.unsqueeze(-1).expand(batch, steps, heads))  # (B, T, H)
    chosen = torch.zeros(batch, steps, slots).scatter_(-1, cells, 1.0)  # distinct cells, once each
    return (read_w * chosen.unsqueeze(2)).sum(-1).mean(-1)


def _kept(written: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: no write between source step s (exclusive) and step t (exclusive) chose a
    cell the source's write heads chose."""
    batch, steps, heads = written.shape
    cells = torch.gather(written, 1, source.unsqueeze(-1).expand(batch, steps, heads))  # (B, T, H)
    # hit[b, t, u]: the writes of step u chose one of the cells the source of step t wrote
    hit = (written.unsqueeze(1).unsqueeze(-1) == cells.unsqueeze(2).unsqueeze(3)).any(-1).any(-1)
    u = torch.arange(steps)
    between = (u.view(1, 1, -1) > source.unsqueeze(-1)) & (u.view(1, 1, -1) < u.view(1, -1, 1))
    return ~(hit & between).any(-1)


def trace_read_targets(trace: Any, task: Any, inputs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``read_targets`` of a model's trace (``model(inputs, return_trace=True)``) on a task
    that names its source steps; {} when the task does not or the model has no memory trace."""
    sources = task.source_steps(inputs)
    if sources is None or not hasattr(trace, "read_weights") or not hasattr(trace, "write_weights"):
        return {}
    return read_targets(trace.read_weights, trace.write_weights, sources, mask)
