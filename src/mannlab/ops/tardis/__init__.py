"""TARDIS's fast path, in the shape of a functional op (records in, records out):

op.py               ``tardis_sequence(inputs, state, weights, options, backend)``, the public op;
                    NAME and BACKENDS for ops/dispatch.py
records.py          TARDISState, TARDISStepTrace, TARDISTrace (the model's own), TARDISInputs,
                    TARDISWeights, TARDISOptions, TARDISResult; ``covers`` and ``pays``: what
                    each backend implements (ops/dispatch.py)
reference.py        the plain tensor loop, the specification the kernels are tested against
numba_sequence.py   the whole-sequence autograd Function over kernels.py (numba, CPU)
triton_kernels.py   the same kernels in Triton (GPU; tested in Triton's interpreter)
triton_sequence.py  the whole-sequence autograd Function over triton_kernels.py
"""

from mannlab.ops.tardis.op import BACKENDS, NAME, tardis_sequence
from mannlab.ops.tardis.records import (
    MODES,
    TARDISInputs,
    TARDISOptions,
    TARDISResult,
    TARDISState,
    TARDISStepTrace,
    TARDISTrace,
    TARDISWeights,
    covers,
    pays,
)

__all__ = [
    "BACKENDS",
    "MODES",
    "NAME",
    "TARDISInputs",
    "TARDISOptions",
    "TARDISResult",
    "TARDISState",
    "TARDISStepTrace",
    "TARDISTrace",
    "TARDISWeights",
    "covers",
    "pays",
    "tardis_sequence",
]
