"""ARMIN's fast path, in the shape of a functional op (records in, records out):

op.py               ``armin_sequence(inputs, state, weights, options)``, the public op
records.py          ARMINInputs, ARMINCarry, ARMINWeights, ARMINOptions
reference.py        the plain tensor loop, the specification the kernels are tested against
numba_sequence.py   the whole-sequence autograd Function over kernels.py (numba, CPU)
triton_sequence.py  the whole-sequence autograd Function over triton_kernels.py (Triton, GPU)
gradients.py        either backward's per-step gradients turned into weight gradients
"""

from mannlab.ops.armin.op import armin_sequence
from mannlab.ops.armin.records import ARMINCarry, ARMINInputs, ARMINOptions, ARMINWeights

__all__ = ["ARMINCarry", "ARMINInputs", "ARMINOptions", "ARMINWeights", "armin_sequence"]
