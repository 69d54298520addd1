"""The device a loaded model goes to (``mannlab.load(..., device=)``), checked before any
file is read: a name torch does not know, or a device this machine lacks, is a ConfigError
saying which devices there are, not torch's error from deep inside ``Module.to``."""

from __future__ import annotations

import torch

from mannlab.errors import ConfigError

Device = str | torch.device | None


def target_device(device: Device) -> torch.device:
    """``device`` (default the CPU) as a torch.device this machine has."""
    if device is None:
        return torch.device("cpu")
    try:
        target = device if isinstance(device, torch.device) else torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(
            f"device must be 'cpu', 'cuda', 'cuda:N', 'mps' or a torch.device, got {device!r}"
        ) from None
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r}: this machine has no CUDA device; load with device='cpu'")
        count = torch.cuda.device_count()
        if target.index is not None and target.index >= count:
            raise ConfigError(
                f"device {device!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    elif target.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {device!r}: MPS is not available here; load with device='cpu'")
    elif target.type not in ("cpu", "cuda", "mps", "meta"):
        raise ConfigError(f"device {device!r}: mannlab loads models onto 'cpu', 'cuda[:N]', 'mps' or 'meta'")
    return target
