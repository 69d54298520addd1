"""TARDIS's whole-sequence op: ``tardis_sequence(inputs, state, weights, options, backend)``
over the typed records TARDISInputs, TARDISCarry, TARDISWeights, TARDISOptions and its
result TARDISResult (records.py; sequence.py). Behind it: reference.py (the plain tensor
loop, the specification the kernels are tested against) and function.py over kernels.py
(numba, CPU).
"""

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
from mannlab.ops.tardis.sequence import tardis_sequence

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
