"""Helpers over recurrent states: nested NamedTuples (or tuples) of tensors."""

from __future__ import annotations

from typing import Any, Callable

import torch


def map_state(fn: Callable[[torch.Tensor], torch.Tensor], state: Any) -> Any:
    """Apply ``fn`` to every tensor in a (nested) NamedTuple/tuple/list state."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*(map_state(fn, s) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(map_state(fn, s) for s in state)
    raise TypeError(f"state must be made of tensors and (named) tuples, got {type(state).__name__}")


def detach_state(state: Any) -> Any:
    """Cut the autograd graph of a state but keep its values (for truncated BPTT)."""
    return map_state(torch.Tensor.detach, state)
