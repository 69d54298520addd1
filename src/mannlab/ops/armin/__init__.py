"""ARMIN's fast path: a whole sequence as one autograd Function (function.py) over
numba kernels (kernels.py); the reference is the cell's step loop in mannlab.models.armin."""
