"""Where and in what precision a run trains: ``train.device`` and ``train.precision``.

    device      "auto" (the fastest path this machine has for the model: see
                :func:`auto_device`), "cpu", "cuda", "cuda:N" or "mps"; a device this
                machine lacks is a ConfigError
    precision   "32" (float32 throughout), "bf16-mixed" or "16-mixed": forward and loss
                under torch.autocast in bfloat16 / float16, the loss itself in float32;
                "16-mixed" only on CUDA, with a GradScaler

The model and its states move to the device, the task's batches are made there (``OnDevice``)
and metrics come back to the CPU as Python floats. The numba kernels run on CPU tensors, the
Triton kernels on CUDA tensors; elsewhere the models take their tensor paths.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, ContextManager, Optional

import torch

from mannlab.errors import ConfigError
from mannlab.models.base import Model

DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def resolve_device(
    name: str, model: Optional[Model] = None, batch_size: Optional[int] = None
) -> torch.device:
    """The torch device ``train.device`` names on this machine; "auto" with the model to
    train and its batch size picks by :func:`auto_device` (without a model: CUDA, else MPS,
    else the CPU)."""
    if name == "auto":
        if model is not None:
            return auto_device(model, batch_size)[0]
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    kind = name.partition(":")[0]
    if kind not in DEVICES:
        raise ConfigError(f"train.device must be one of {', '.join(DEVICES)} (or cuda:N), got {name!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        build = (
            f"built with CUDA {torch.version.cuda}, but no GPU is visible"
            if torch.version.cuda
            else "a CPU-only build"
        )
        raise ConfigError(
            f"train.device is {name!r} but CUDA is not available here (torch "
            f"{torch.__version__}: {build}); use --device cpu, or --device auto "
            "to take a GPU only when there is one"
        )
    if kind == "cuda" and ":" in name and int(name.partition(":")[2]) >= torch.cuda.device_count():
        raise ConfigError(
            f"train.device is {name!r} but this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    if kind == "mps" and not _mps_available():
        raise ConfigError(
            "train.device is 'mps' but Apple's MPS backend is not available here; "
            "use --device cpu or --device auto"
        )
    return torch.device(name)


#: The smallest batch at which "auto" trains a memory model on the GPU: with its Triton kernels,
#: and without them (the step-by-step tensor path). Below, the CPU kernels are faster (the
#: measurements behind both numbers: benchmarks/README.md, bench_gpu.py).
GPU_MIN_BATCH_TRITON = 32
GPU_MIN_BATCH_TENSOR = 256


def auto_device(model: Model, batch_size: Optional[int] = None) -> tuple[torch.device, str]:
    """The device "auto" trains ``model`` on at ``batch_size`` (None: a large batch), and
    why. A memory model takes the GPU only from the batch where it beats the CPU kernels
    there: the GPU runs one time step after another, so at small batches it is bound by
    latency, the CPU kernels are not; the plain RNNs always take the GPU (cuDNN)."""
    name = type(model).__name__
    if not torch.cuda.is_available():
        if _mps_available():
            return torch.device("mps"), "Apple's MPS backend, no CUDA GPU here"
        return torch.device("cpu"), "no GPU here"
    backends = model.kernel_backends()
    if not backends:
        return torch.device("cuda"), f"{name} has no memory kernels: its recurrent layers run on cuDNN"
    triton = "triton" in backends
    smallest = GPU_MIN_BATCH_TRITON if triton else GPU_MIN_BATCH_TENSOR
    kernels = "its Triton GPU kernels" if triton else "its GPU tensor path (no Triton kernels here)"
    if batch_size is None or batch_size >= smallest:
        return torch.device("cuda"), f"{name} at batch {batch_size or 'any'}: {kernels}"
    return torch.device("cpu"), (
        f"{name} at batch {batch_size}: its CPU kernels beat {kernels} below batch {smallest}; "
        "--device cuda forces the GPU"
    )


_said: set[str] = set()


def say_auto_choice(model: Model, batch_size: Optional[int] = None) -> None:
    """One line on stderr, once per process and choice: what "auto" chose and why."""
    device, why = auto_device(model, batch_size)
    line = f"mannlab: --device auto chose {device.type} ({why})"
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr)


def check_precision(precision: str, device: torch.device) -> None:
    if precision not in PRECISIONS:
        raise ConfigError(f"train.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "16-mixed" and device.type != "cuda":
        raise ConfigError(
            f"train.precision '16-mixed' needs a CUDA device (float16 gradients "
            f"need loss scaling, a GradScaler, which this trainer runs on CUDA "
            f"only); on {device.type} use 'bf16-mixed'"
        )


def autocast(precision: str, device: torch.device) -> ContextManager:
    """The forward-and-loss context of ``precision`` (a no-op for "32")."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for float16 training on CUDA, else None."""
    if precision != "16-mixed" or device.type != "cuda":
        return None
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3; torch.cuda.amp's is deprecated there
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_to(v, device) for v in value)
    if isinstance(value, list):
        return [_to(v, device) for v in value]
    return value


class OnDevice:
    """A task whose batches (``sample``, ``streams``) are on ``device`` and whose losses are
    computed in float32 from any logits (under autocast they may be bfloat16 or float16).
    Every other attribute is the task's own."""

    def __init__(self, task: Any, device: torch.device):
        self.task, self.device = task, device

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        return _to(self.task.sample(*args, **kwargs), self.device)

    def streams(self, *args: Any, **kwargs: Any) -> Any:
        return _to(self.task.streams(*args, **kwargs), self.device)

    def loss(self, logits: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.task.loss(logits.float(), *args, **kwargs)

    def step_nll(self, logits: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.task.step_nll(logits.float(), *args, **kwargs)

    def metrics(self, logits: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return self.task.metrics(logits.float(), *args, **kwargs)


def on_device(task: Any, device: torch.device, precision: str) -> Any:
    """The task as the trainer uses it: itself on the CPU in float32 (so such runs are
    exactly what they were before devices existed), else wrapped in OnDevice."""
    if device.type == "cpu" and precision == "32":
        return task
    return OnDevice(task, device)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())
