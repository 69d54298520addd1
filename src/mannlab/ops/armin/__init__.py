"""ARMIN's fast path, in the shape of a functional op (records in, records out):

op.py               ``armin_sequence(inputs, state, weights, options, backend)``, the public op
records.py          ARMINState, ARMINTrace (the model's own), ARMINInputs, ARMINWeights,
                    ARMINOptions, ARMINResult; ``covers`` and ``pays``: what each backend
                    implements and where numba pays (ops/dispatch.py)
reference.py        the plain tensor loop, the specification the kernels are tested against
numba_sequence.py   the whole-sequence autograd Function over kernels.py (numba, CPU)
triton_sequence.py  the whole-sequence autograd Function over triton_kernels.py (Triton, GPU),
                    and the kernels' launchers
gradients.py        either backward's per-step gradients turned into weight gradients
"""

from mannlab.ops.armin.op import BACKENDS, NAME, armin_sequence
from mannlab.ops.armin.records import (
    MODES,
    ARMINInputs,
    ARMINOptions,
    ARMINResult,
    ARMINState,
    ARMINTrace,
    ARMINWeights,
    covers,
    pays,
)

__all__ = [
    "BACKENDS",
    "MODES",
    "NAME",
    "ARMINInputs",
    "ARMINOptions",
    "ARMINResult",
    "ARMINState",
    "ARMINTrace",
    "ARMINWeights",
    "armin_sequence",
    "covers",
    "pays",
]
