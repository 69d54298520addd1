"""The D-NTM's fast path, in the shape of a functional op (records in, records out):

op.py               ``dntm_sequence(inputs, state, weights, options, backend)``, the public op;
                    NAME and BACKENDS for ops/dispatch.py
records.py          DNTMState, DNTMStepTrace, DNTMTrace (the model's own), DNTMInputs,
                    DNTMWeights, DNTMOptions, DNTMResult, head_sizes; ``covers`` and ``pays``:
                    what each backend implements (ops/dispatch.py)
reference.py        the plain tensor loop, the specification the kernels are tested against,
                    and the per-step equations DNTMCell.step shares with it
numba_sequence.py   the whole-sequence autograd Function over kernels.py (numba, CPU)
triton_sequence.py  the same over triton_kernels.py (Triton, GPU), every mode with J = 1 and
                    learned writes (records.covers)
"""

from mannlab.ops.dntm.op import BACKENDS, NAME, dntm_sequence
from mannlab.ops.dntm.records import (
    MODES,
    NOISY_MODES,
    DNTMInputs,
    DNTMLocation,
    DNTMOptions,
    DNTMResult,
    DNTMState,
    DNTMStepTrace,
    DNTMTrace,
    DNTMWeights,
    DNTMWriteCounts,
    covers,
    head_sizes,
    pays,
)

__all__ = [
    "BACKENDS",
    "MODES",
    "NAME",
    "NOISY_MODES",
    "DNTMInputs",
    "DNTMLocation",
    "DNTMOptions",
    "DNTMResult",
    "DNTMState",
    "DNTMStepTrace",
    "DNTMTrace",
    "DNTMWeights",
    "DNTMWriteCounts",
    "covers",
    "dntm_sequence",
    "head_sizes",
    "pays",
]
