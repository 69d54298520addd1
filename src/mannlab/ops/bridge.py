"""What the autograd Functions share about calling numba kernels: NumPy views of tensors
and the thread count of the kernels' matrix products."""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import torch


def as_array(tensor: torch.Tensor) -> np.ndarray:
    """A C-contiguous NumPy view of the tensor's data (a copy only if it is strided,
    e.g. a state expanded over the batch), so each kernel compiles for one layout."""
    return np.ascontiguousarray(tensor.detach().numpy())


_blas_threads = [None, None]  # [setter, the count last set]


def limit_blas_threads(count: int) -> None:
    """Run the kernels' matrix products (numba calls SciPy's OpenBLAS) on ``count`` threads,
    as torch runs on torch.get_num_threads(): by default OpenBLAS starts one thread per core,
    which on a busy CPU slows a step several times (benchmarks/README.md, bench_armin.py).
    No-op when that library or its setter is not found."""
    setter, current = _blas_threads
    if current == count:
        return
    if setter is None:
        try:
            import scipy

            libs = os.path.join(os.path.dirname(scipy.__file__), os.pardir, "scipy.libs")
            setter = False
            for path in glob.glob(os.path.join(libs, "libscipy_openblas*.so*")):
                setter = getattr(ctypes.CDLL(path), "scipy_openblas_set_num_threads", False)
                if setter:
                    break
        except (ImportError, OSError):
            setter = False
        _blas_threads[0] = setter
    if setter:
        setter(ctypes.c_int(count))
    _blas_threads[1] = count
