"""ARMIN's whole-sequence op: ``armin_sequence(inputs, state, weights, options)`` over the typed
records ARMINInputs, ARMINCarry, ARMINWeights and ARMINOptions (records.py; sequence.py).
Behind it: reference.py (the plain tensor loop, the specification the kernels are tested
against), function.py over kernels.py (numba, CPU), triton_function.py over triton_kernels.py
(Triton, GPU); gradients.py turns either backward's per-step gradients into weight gradients.
"""

from mannlab.ops.armin.records import ARMINCarry, ARMINInputs, ARMINOptions, ARMINWeights
from mannlab.ops.armin.sequence import armin_sequence

__all__ = ["ARMINCarry", "ARMINInputs", "ARMINOptions", "ARMINWeights", "armin_sequence"]
