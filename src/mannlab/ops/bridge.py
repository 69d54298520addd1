"""What the autograd Functions share about calling numba kernels: NumPy views of tensors
and the thread count of the kernels' matrix products."""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any, Callable, Optional

import numpy as np
import torch


def as_array(tensor: torch.Tensor) -> np.ndarray:
    """A C-contiguous NumPy view of the tensor's data (a copy only if it is strided,
    e.g. a state expanded over the batch), so each kernel compiles for one layout."""
    return np.ascontiguousarray(tensor.detach().numpy())


_blas_setter: Optional[Callable[[ctypes.c_int], Any]] = None  # OpenBLAS's, once found
_blas_searched = False
_blas_count: Optional[int] = None  # the count last set


def limit_blas_threads(count: int) -> None:
    """Run the kernels' matrix products (numba calls SciPy's OpenBLAS) on ``count`` threads,
    as torch runs on torch.get_num_threads(): by default OpenBLAS starts one thread per core,
    which on a busy CPU slows a step several times (benchmarks/README.md, bench_armin.py).
    No-op when that library or its setter is not found."""
    global _blas_setter, _blas_searched, _blas_count
    if _blas_count == count:
        return
    if not _blas_searched:
        _blas_setter, _blas_searched = _find_blas_setter(), True
    if _blas_setter is not None:
        _blas_setter(ctypes.c_int(count))
    _blas_count = count


def _find_blas_setter() -> Optional[Callable[[ctypes.c_int], Any]]:
    """scipy_openblas_set_num_threads of the OpenBLAS SciPy ships, or None."""
    try:
        import scipy

        libs = os.path.join(os.path.dirname(scipy.__file__), os.pardir, "scipy.libs")
        for path in glob.glob(os.path.join(libs, "libscipy_openblas*.so*")):
            setter = getattr(ctypes.CDLL(path), "scipy_openblas_set_num_threads", None)
            if setter is not None:
                return setter
    except (ImportError, OSError):
        pass
    return None
