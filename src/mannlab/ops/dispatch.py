"""The one switch between the kernels and the tensor paths, and the one place that decides,
call by call, which path runs. "Kernels" is the one word for a model's fast path: a whole
sequence (or a memory step) as one compiled loop, numba on the CPU, Triton on the GPU.

    MANNLAB_KERNELS=1 (default)              the kernels where they apply: numba on CPU
                                             tensors, Triton on CUDA tensors
    MANNLAB_KERNELS=0                        the tensor paths everywhere
    MANNLAB_KERNELS=triton                   force the Triton kernels, on CPU tensors too
                                             (with TRITON_INTERPRET=1: Triton's interpreter,
                                             how the GPU kernels are tested without a GPU)
    MANNLAB_KERNELS=compiled                 force the "compiled" backend: the op's step
                                             under torch.compile (ops/compiled.py)
    with mannlab.ops.use_kernels(False):     this thread's calls inside the block take the
        y, state = model(x)                  tensor paths (True: the kernels, "triton": force
                                             Triton, "compiled": force the compiled step); the
                                             backward follows its forward's path

A numba path runs where the switch is on, autocast is off, the tensors are CPU
float32/float64 and the kernels of ``mannlab.ops.<name>.kernels`` import (numba present;
they compile on first use, then load from numba's disk cache). A Triton path runs on CUDA
tensors (or anywhere when forced) where the op lists "triton" in its ``BACKENDS`` and
``mannlab.ops.<name>.triton_kernels`` imports (the ``mannlab[gpu]`` extra); without Triton the
GPU takes the tensor path and says so once. The NTM and DNC memory steps of the step loop ask
:func:`kernels_apply`. A whole-sequence pass asks :func:`choose`, handing it the op package
(a :class:`SequenceOp`) and the records the op would run on: the op says what its backends
cover (``covers``) and where numba beats the step loop (``pays``); this module adds the
device, the dtype, the switch and the batch limits, and never calls back into a model.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from functools import cache
from types import ModuleType
from typing import Any, Protocol

import torch

from mannlab.ops import notice

ENV_VAR = "MANNLAB_KERNELS"

#: the switch's settings: "on" (the kernels where they apply), "off", "triton" and "compiled"
#: (those backends forced)
MODES = ("on", "off", "triton", "compiled")


def _mode_of(value: bool | str) -> str:
    if value is True or value in ("1", "on", ""):
        return "on"
    if value is False or value in ("0", "off"):
        return "off"
    if value in ("triton", "compiled"):
        return str(value)
    raise ValueError(
        f"the kernels switch takes True, False, 'triton' or 'compiled' ({ENV_VAR}=1, 0, triton or "
        f"compiled), got {value!r}"
    )


_mode: ContextVar[str] = ContextVar("mannlab_kernels", default=_mode_of(os.environ.get(ENV_VAR, "1").lower()))


def kernels_enabled() -> bool:
    """Whether kernels may run here (the environment, or the innermost :func:`use_kernels`
    block)."""
    return _mode.get() != "off"


def kernels_mode() -> str:
    """The switch as it stands here: one of :data:`MODES`."""
    return _mode.get()


@contextmanager
def use_kernels(enabled: bool | str = True) -> Iterator[None]:
    """Turn the kernels on (True), off (False) or force the Triton kernels ("triton") or the
    compiled step ("compiled") for the calls inside the block."""
    token = _mode.set(_mode_of(enabled))
    try:
        yield
    finally:
        _mode.reset(token)


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


@cache
def load_triton(name: str) -> ModuleType | None:
    """mannlab.ops.<name>.triton_kernels, imported on first use; None if Triton is missing
    (then the GPU takes the tensor path, said once)."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        notice.triton_missing(exc)
        return None
    return importlib.import_module(f"mannlab.ops.{name}.triton_kernels")


def triton_applies(name: str, tensor: torch.Tensor) -> bool:
    """Whether the Triton kernels of ops/<name> run on this tensor: on CUDA tensors with the
    switch on (kernels checked on a GPU only: ``triton_checked``), or on any device when it
    is forced ("triton"); autocast off, float32 (or
    float64 where the kernels list it: the interpreter's gradient checks) and Triton present."""
    if torch.compiler.is_compiling():
        return False
    mode = kernels_mode()
    if mode in ("off", "compiled") or autocast_active(tensor):
        return False
    if mode == "on" and tensor.device.type != "cuda":
        return False
    module = load_triton(name)
    if module is None or (mode == "on" and not module.GPU_CHECKED):
        return False
    return tensor.dtype in module.DTYPES


def triton_checked(name: str) -> bool:
    """Whether the Triton kernels of ops/<name> load and have run on a GPU (the module's
    GPU_CHECKED): only those are used without being forced, and only those count for the
    device policy. Kernels tested in the interpreter alone run when forced ("triton")."""
    module = load_triton(name)
    return module is not None and module.GPU_CHECKED


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


def kernels_apply(name: str, tensor: torch.Tensor) -> bool:
    """Whether the kernels of ops/<name> run on this tensor: the switch is on, autocast is
    off (the kernels read one float dtype, autocast mixes two), the tensor is a CPU
    float32/float64 one and the kernels load. Never while torch.compile traces: it cannot
    trace numba, and the tensor path is what it compiles."""
    if torch.compiler.is_compiling():
        return False
    return (
        kernels_mode() == "on"
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


class SequenceOp(Protocol):
    """What a whole-sequence op package (``mannlab.ops.<name>``) exports for :func:`choose`:
    its name, its backends and what each covers. The op alone decides what its kernels
    implement; dispatch adds the device, dtype, the user's switch and batch limits."""

    NAME: str
    BACKENDS: tuple[str, ...]

    def covers(self, options: Any, weights: Any, backend: str) -> bool: ...

    def pays(self, options: Any, weights: Any, batch: int) -> bool: ...


def records_graph(parameters: Iterable[torch.Tensor], x: torch.Tensor, state: Any) -> bool:
    """Whether a pass over x from ``state`` with these ``parameters`` records a graph (then a
    compiled pass keeps what its backward reads; otherwise only one step's scratch)."""
    return torch.is_grad_enabled() and (
        x.requires_grad
        or any(p.requires_grad for p in parameters)
        or any(t.requires_grad for t in _tensors(state))
    )


#: The batch from which a GPU's step loop beats the Triton kernels of ARMIN and the NTM (each
#: program carries a 16-row tile through every step; the step loop's wide matrix products win
#: once the batch fills the GPU: benchmarks/README.md, bench_gpu.py).
TRITON_MAX_BATCH = 2048


def choose(op: SequenceOp, x: torch.Tensor, options: Any, weights: Any) -> str:
    """The backend of ``op`` a pass over x (B, T, I) takes: "compiled" where forced and
    covered (autocast off); "triton" where its Triton kernels
    cover ``options``/``weights`` and apply to x, below :data:`TRITON_MAX_BATCH` (at any batch
    when forced); else "numba" where its numba kernels cover them, apply to x and pay at this
    batch (``op.pays``); else "" (the caller's step loop)."""
    if torch.compiler.is_compiling():  # torch.compile traces the step loop
        return ""
    if kernels_mode() == "compiled":
        covered = "compiled" in op.BACKENDS and op.covers(options, weights, "compiled")
        return "compiled" if covered and not autocast_active(x) else ""
    if "triton" in op.BACKENDS and triton_applies(op.NAME, x) and op.covers(options, weights, "triton"):
        forced = kernels_mode() == "triton"
        return "triton" if forced or x.shape[0] < TRITON_MAX_BATCH else ""
    if kernels_mode() == "triton" or x.device.type == "cuda":
        return ""  # forced Triton that cannot run, or a GPU without it: the tensor path
    numba = "numba" in op.BACKENDS and op.covers(options, weights, "numba") and kernels_apply(op.NAME, x)
    return "numba" if numba and op.pays(options, weights, x.shape[0]) else ""


def available(op: SequenceOp, options: Any, weights: Any) -> tuple[str, ...]:
    """The compiled backends of ``op`` that cover ``options``/``weights`` and are usable here
    without being forced: numba, and Triton where it is installed and its kernels have run on
    a GPU (:func:`triton_checked`). What the device policy of ``--device auto`` reads."""
    found = []
    if "numba" in op.BACKENDS and op.covers(options, weights, "numba"):
        found.append("numba")
    if "triton" in op.BACKENDS and triton_checked(op.NAME) and op.covers(options, weights, "triton"):
        found.append("triton")
    return tuple(found)
