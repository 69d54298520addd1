"""The D-NTM's fast path, in the shape of a functional op (records in, records out):

op.py               ``dntm_sequence(inputs, state, weights, options, backend)``, the public op
records.py          DNTMInputs, DNTMCarry, DNTMWeights, DNTMOptions, DNTMResult, head_sizes
reference.py        the plain tensor loop, the specification the kernels are tested against,
                    and the per-step equations DNTMCell.step shares with it
numba_sequence.py   the whole-sequence autograd Function over kernels.py (numba, CPU)
triton_sequence.py  the same over triton_kernels.py (Triton, GPU), every mode with J = 1 and
                    learned writes (records.triton_covers)
"""

from mannlab.ops.dntm.op import dntm_sequence
from mannlab.ops.dntm.records import (
    BACKENDS,
    MODES,
    NOISY_MODES,
    DNTMCarry,
    DNTMInputs,
    DNTMOptions,
    DNTMResult,
    DNTMSteps,
    DNTMWeights,
    head_sizes,
)

__all__ = [
    "BACKENDS",
    "MODES",
    "NOISY_MODES",
    "DNTMCarry",
    "DNTMInputs",
    "DNTMOptions",
    "DNTMResult",
    "DNTMSteps",
    "DNTMWeights",
    "dntm_sequence",
    "head_sizes",
]
