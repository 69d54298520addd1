"""Plumbing shared by the fused steps that run compiled CPU kernels (numba):
which tensors they take, loading the kernel modules, and tensor <-> array views.

The kernels themselves live in mannlab.ntm_kernels and mannlab.dnc_kernels; each
fused step (mannlab.fused_ntm_step, mannlab.fused_dnc_step) has its own
``USE_KERNELS`` flag, which starts from ``ENABLED``.
"""
from __future__ import annotations

import importlib
import os
from functools import lru_cache
from types import ModuleType
from typing import Optional

import numpy as np
import torch

#: MANNLAB_KERNELS=0 turns the compiled kernels off everywhere (the tensor paths run).
ENABLED = os.environ.get("MANNLAB_KERNELS", "1") != "0"


@lru_cache(maxsize=None)
def load(name: str) -> Optional[ModuleType]:
    """mannlab.<name>, imported on first use (numba compiles it once, then caches on
    disk); None if numba is missing or broken, so the tensor paths still work."""
    try:
        return importlib.import_module(f"mannlab.{name}")
    except ImportError:
        return None


def usable(tensor: torch.Tensor, name: str) -> bool:
    """The kernels of mannlab.<name> take CPU float32/float64 tensors, if they load."""
    return (tensor.device.type == "cpu" and tensor.dtype in (torch.float32, torch.float64)
            and load(name) is not None)


def as_array(tensor: torch.Tensor) -> np.ndarray:
    """A C-contiguous NumPy view of the tensor's data (a copy only if it is strided,
    e.g. a state expanded over the batch), so each kernel compiles for one layout."""
    return np.ascontiguousarray(tensor.detach().numpy())
