"""Every fast path of mannlab, each beside the reference it is tested against.

    dispatch.py     the switch (MANNLAB_KERNELS, ``use_kernels``) and which path runs
    numba_math.py   the numba helpers every kernel shares, written once
    numba_cache.py  numba's disk cache, stamped with numba_math.py too
    bridge.py       tensors to NumPy arrays, the kernels' BLAS threads
    threads.py      the whole-sequence kernels on torch.get_num_threads() threads (row blocks)
    fields.py       records split back by name at an autograd Function's boundary
    <model>/        op.py (the public op), records.py, reference.py (the plain tensor loop),
                    numba_sequence.py over kernels.py (numba), triton_sequence.py over
                    triton_kernels.py (Triton: armin, ntm, dntm), memory_step.py (the step loop's memory op);
                    <model> one of ntm, dnc, tardis, armin, dntm

Models import ops, never the reverse. numba is imported only when a kernel first runs.
The kernels use as many threads as torch does (``torch.set_num_threads(n)``; ``train.threads``
sets it for a run), or ``set_threads(n)`` of them whatever torch's count; see ops/threads.py.
"""

from mannlab.ops.dispatch import kernels_enabled, use_kernels
from mannlab.ops.threads import get_threads, set_threads

__all__ = ["get_threads", "kernels_enabled", "set_threads", "use_kernels"]
