"""The one switch between the compiled kernels and the tensor paths, and the one place
that decides, call by call, which path runs.

    MANNLAB_KERNELS=0                        the tensor paths everywhere (read at import)
    with mannlab.ops.use_kernels(False):     this thread's calls inside the block take the
        y, state = model(x)                  tensor paths (True: the kernels, whatever the
                                             environment says); the backward follows the
                                             path its forward took

A compiled path runs where the switch is on, autocast is off, the tensors are CPU
float32/float64 and the kernels of ``mannlab.ops.<name>.kernels`` import (numba present;
they compile on first use, then load from numba's disk cache). The NTM and DNC memory steps of
the step loop ask :func:`compiled_applies`. The whole-sequence cells (NTM, DNC, D-NTM,
TARDIS, ARMIN) go through
:func:`route`, which reads what only the cell knows (models/base.py gives the defaults):

    compiled_ops                        the name of its ops package ("tardis")
    compiled_covers(with_trace) -> bool the configurations its kernels implement
    compiled_pays(batch, backward)      whether they beat the tensor path at that size
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from functools import cache
from types import ModuleType
from typing import Any, NamedTuple

import torch

from mannlab.ops import notice

ENV_VAR = "MANNLAB_KERNELS"

_enabled: ContextVar[bool] = ContextVar("mannlab_kernels", default=os.environ.get(ENV_VAR, "1") != "0")


def kernels_enabled() -> bool:
    """Whether compiled kernels may run here (the environment, or the innermost
    :func:`use_kernels` block)."""
    return _enabled.get()


@contextmanager
def use_kernels(enabled: bool = True) -> Iterator[None]:
    """Turn the compiled kernels on (True) or off (False) for the calls inside the block."""
    token = _enabled.set(bool(enabled))
    try:
        yield
    finally:
        _enabled.reset(token)


@cache
def load(name: str) -> ModuleType | None:
    """mannlab.ops.<name>.kernels, imported on first use; None if numba is missing or
    broken, so the tensor paths still work."""
    try:
        kernels = importlib.import_module(f"mannlab.ops.{name}.kernels")
    except ImportError as exc:
        notice.kernels_missing(exc)
        return None
    notice.before_compile(name, kernels)
    return kernels


def autocast_active(tensor: torch.Tensor) -> bool:
    """Whether torch.autocast is on for the tensor's device (never on devices without
    autocast, such as "meta")."""
    device = tensor.device.type
    return torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device)


def state_precision(tensor: torch.Tensor) -> AbstractContextManager[None]:
    """Under autocast on the tensor's device, a block that runs with autocast off and on the
    tensor paths: a model's memory equations then run in the dtype of its state (the input's),
    while the layers that feed them ran in autocast's dtype. Elsewhere it changes nothing."""
    return _autocast_off(tensor.device.type) if autocast_active(tensor) else nullcontext()


def in_state_precision(step: Any, params: torch.Tensor, memory: torch.Tensor, *args: Any) -> Any:
    """``step(params, memory, *args)`` under autocast, for a memory step: the layer that
    made ``params`` ran in autocast's dtype; the memory equations run in the memory's (the
    state's) dtype on the tensor path, with autocast off."""
    with _autocast_off(memory.device.type):
        return step(params.to(memory.dtype), memory, *args)


@contextmanager
def _autocast_off(device: str) -> Iterator[None]:
    with torch.autocast(device, enabled=False), use_kernels(False):
        yield


def compiled_applies(name: str, tensor: torch.Tensor) -> bool:
    """Whether the kernels of ops/<name> run on this tensor: the switch is on, autocast is
    off (the kernels read one float dtype, autocast mixes two), the tensor is a CPU
    float32/float64 one and the kernels load. Never while torch.compile traces: it cannot
    trace numba, and the tensor path is what it compiles."""
    if torch.compiler.is_compiling():
        return False
    return (
        kernels_enabled()
        and tensor.device.type == "cpu"
        and not autocast_active(tensor)
        and tensor.dtype in (torch.float32, torch.float64)
        and load(name) is not None
    )


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _tensors(item)


def records_graph(module: torch.nn.Module, x: torch.Tensor, state: Any) -> bool:
    """Whether a pass of ``module`` over x from ``state`` records a graph (then a compiled
    pass keeps what its backward reads; otherwise only one step's scratch)."""
    return torch.is_grad_enabled() and (
        x.requires_grad
        or any(p.requires_grad for p in module.parameters())
        or any(t.requires_grad for t in _tensors(state))
    )


class Route(NamedTuple):
    """Which path a whole-sequence pass takes; ``backward``: a graph is recorded (only
    worked out when the compiled path applies)."""

    compiled: bool
    backward: bool


def sequence_applies(cell: torch.nn.Module, x: torch.Tensor, with_trace: bool = False) -> bool:
    """Whether a pass of ``cell`` over x (B, T, I) can take its compiled path: the kernels
    cover the configuration and apply to x (whether they pay is asked next, in route)."""
    name = getattr(cell, "compiled_ops", None)
    return name is not None and cell.compiled_covers(with_trace) and compiled_applies(name, x)


def route(cell: torch.nn.Module, x: torch.Tensor, state: Any, with_trace: bool) -> Route:
    """The path of a pass of ``cell`` over x (B, T, I): compiled where its kernels cover the
    configuration, apply to x and pay at this batch size; else the step loop."""
    if not sequence_applies(cell, x, with_trace):
        return Route(False, False)
    backward = records_graph(cell, x, state)
    return Route(cell.compiled_pays(x.shape[0], backward), backward)
