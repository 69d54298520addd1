"""Validation of a recurrent state passed back into a model, before any kernel reads it.

A state is checked against the one the model itself would start from for this input
(``initial_state(B, device, dtype)``): the same NamedTuple types, nesting, tensor shapes
(batch included), dtypes and devices, and finite values below MAX_MAGNITUDE. A state from
another model, another batch or another memory size would otherwise be read out of bounds by
the compiled kernels, or broadcast silently by the tensor path.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


def values_checkable(tensor: torch.Tensor) -> bool:
    """Whether a check may read the tensor's values: not while torch.compile traces (a
    data-dependent check breaks its graph), not on the "meta" device (no values)."""
    return not torch.compiler.is_compiling() and tensor.device.type != "meta"


#: inputs and state values are refused at or above this magnitude: squared inside layer norm,
#: cosine similarity or a softmax they overflow float32 (3.4e38) to NaN without a word
MAX_MAGNITUDE = 1e15


def check_values(tensor: torch.Tensor, what: str) -> None:
    """ValueError when a tensor whose values can be read holds NaN, infinity or a value of
    magnitude MAX_MAGNITUDE or more (one reduction over the tensor)."""
    if not (tensor.is_floating_point() and values_checkable(tensor)) or tensor.numel() == 0:
        return
    largest = float(tensor.detach().abs().max())
    if largest != largest or largest == float("inf"):
        raise ValueError(f"{what} containing NaN or infinity")
    if largest >= MAX_MAGNITUDE:
        raise ValueError(
            f"{what} with a value of magnitude {largest:.3g}; values must stay below {MAX_MAGNITUDE:g} "
            "(larger ones overflow float32 inside the model); scale the input"
        )


def _type_name(value: Any) -> str:
    return type(value).__name__


def _compare(given: Any, expected: Any, path: str, owner: str) -> None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(given, torch.Tensor):
            raise TypeError(
                f"{owner} state field {path} must be a tensor of shape "
                f"{tuple(expected.shape)}, got {_type_name(given)}"
            )
        if given.shape != expected.shape:
            raise ValueError(
                f"{owner} state field {path} must have shape {tuple(expected.shape)} "
                f"for this input and model, got {tuple(given.shape)} (a state from "
                f"another batch size or model configuration?)"
            )
        if given.dtype != expected.dtype:
            raise TypeError(
                f"{owner} state field {path} must be {expected.dtype} like the input, got {given.dtype}"
            )
        if given.device != expected.device:
            raise ValueError(
                f"{owner} state field {path} must be on {expected.device} like the input, got {given.device}"
            )
        check_values(given, f"{owner} got a state field {path}")
        return
    if isinstance(expected, tuple):
        if type(given) is not type(expected):
            kind = _type_name(expected)
            where = "" if path == "state" else f" field {path}"
            if type(expected) is tuple and not expected:  # an option that is off keeps no state
                raise TypeError(
                    f"{owner} state{where} must be () (this model configuration keeps no state "
                    f"there), got {_type_name(given)}"
                )
            raise TypeError(
                f"{owner} state{where} must be of type {kind} (as the model returns "
                f"it), got {_type_name(given)}"
            )
        fields = getattr(expected, "_fields", None) or [str(i) for i in range(len(expected))]
        if len(given) != len(expected):
            raise ValueError(
                f"{owner} state field {path} must have {len(expected)} entries, got {len(given)}"
            )
        for name, g, e in zip(fields, given, expected):
            _compare(g, e, f"{path}.{name}" if fields[0] != "0" else f"{path}[{name}]", owner)
        return
    if given is not expected and given != expected:
        raise ValueError(f"{owner} state field {path} must be {expected!r}, got {given!r}")


class Stateful(Protocol):
    """A model or cell: what a state is checked against."""

    def initial_state(self, batch_size: int, device: Any = None, dtype: Any = None) -> Any: ...


def check_state(
    model: Stateful, state: Any, batch_size: int, device: torch.device, dtype: torch.dtype
) -> None:
    """Raise TypeError/ValueError naming the first field of ``state`` that does not fit a
    ``batch_size`` input of ``dtype`` on ``device`` for ``model`` (which provides
    ``initial_state``). Finiteness is checked where values can be read (values_checkable)."""
    with torch.no_grad():
        expected = model.initial_state(batch_size, device=device, dtype=dtype)
    _compare(state, expected, "state", type(model).__name__)
