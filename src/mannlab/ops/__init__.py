"""Every fast path of mannlab, each beside the reference it is tested against.

    dispatch.py     the switch (MANNLAB_KERNELS, ``use_kernels``) and which path runs
    numba_math.py   the numba helpers every kernel shares, written once
    numba_cache.py  numba's disk cache, stamped with numba_math.py too
    bridge.py       tensors to NumPy arrays, the kernels' BLAS threads
    <model>/        function.py (the autograd Function), kernels.py (numba)

Models import ops, never the reverse. numba is imported only when a kernel first runs.
"""

from mannlab.ops.dispatch import kernels_enabled, use_kernels

__all__ = ["kernels_enabled", "use_kernels"]
