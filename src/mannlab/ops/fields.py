"""Records across an autograd boundary: a torch.autograd.Function takes and saves tensors side
by side, the ops speak NamedTuples; :func:`split_records` rebuilds them by their field counts,
so no backend slices its arguments by hand-counted offsets. :func:`expect_shape` checks a
record's field where an op takes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch


def split_records(flat: Sequence[Any], *kinds: type) -> tuple:
    """The records of ``kinds`` (NamedTuple classes) from their fields side by side, as an
    autograd Function receives or saves them, then the tuple of what follows them."""
    records, at = [], 0
    for kind in kinds:
        fields = len(kind._fields)  # type: ignore[attr-defined]
        records.append(kind._make(flat[at : at + fields]))  # type: ignore[attr-defined]
        at += fields
    return (*records, tuple(flat[at:]))


def expect_shape(name: str, value: Optional[torch.Tensor], shape: tuple) -> None:
    """An op's input check: ``value`` (None: absent, not checked) must have ``shape``."""
    if value is not None and tuple(value.shape) != shape:
        raise ValueError(f"{name} must be {shape}, got {tuple(value.shape)}")
