"""The NTM's fast path: the memory step as one autograd Function (function.py) with the
addressing chain fused (fused_addressing.py) and numba kernels (kernels.py)."""
