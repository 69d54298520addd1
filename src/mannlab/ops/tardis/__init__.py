"""TARDIS's fast path, in the shape of a functional op (records in, records out):

op.py               ``tardis_sequence(inputs, state, weights, options, backend)``, the public op
records.py          TARDISInputs, TARDISCarry, TARDISWeights, TARDISOptions, TARDISResult
reference.py        the plain tensor loop, the specification the kernels are tested against
numba_sequence.py   the whole-sequence autograd Function over kernels.py (numba, CPU)
triton_kernels.py   the same kernels in Triton (GPU; tested in Triton's interpreter)
triton_sequence.py  the whole-sequence autograd Function over triton_kernels.py
"""

from mannlab.ops.tardis.op import tardis_sequence
from mannlab.ops.tardis.records import (
    BACKENDS,
    MODES,
    TARDISCarry,
    TARDISInputs,
    TARDISOptions,
    TARDISResult,
    TARDISSteps,
    TARDISWeights,
)

__all__ = [
    "BACKENDS",
    "MODES",
    "TARDISCarry",
    "TARDISInputs",
    "TARDISOptions",
    "TARDISResult",
    "TARDISSteps",
    "TARDISWeights",
    "tardis_sequence",
]
