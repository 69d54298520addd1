"""Records across an autograd boundary: a torch.autograd.Function takes and saves tensors side
by side, the ops speak NamedTuples; :func:`split_records` rebuilds them by their field counts,
so no backend slices its arguments by hand-counted offsets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def split_records(flat: Sequence[Any], *kinds: type) -> tuple:
    """The records of ``kinds`` (NamedTuple classes) from their fields side by side, as an
    autograd Function receives or saves them, then the tuple of what follows them."""
    records, at = [], 0
    for kind in kinds:
        fields = len(kind._fields)  # type: ignore[attr-defined]
        records.append(kind._make(flat[at : at + fields]))  # type: ignore[attr-defined]
        at += fields
    return (*records, tuple(flat[at:]))
