"""The DNC's fast path: the memory step as one autograd Function over numba kernels
(function.py, kernels.py), beside its reference, the composition of nn.addressing."""
