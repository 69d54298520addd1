"""The DNC's fast path, in the shape of a functional op (records in, records out):

dnc_sequence       the whole sequence, steps (i)-(iv) (op.py): numba kernels on the CPU
                   (sequence.py, kernels.py)
reference.py       the plain tensor code every kernel is tested against: the whole sequence
                   and the memory step, steps (ii)-(iii), as the composition of
                   mannlab.nn.addressing
records.py         DNCSequenceState, DNCWeights, DNCOptions, DNCResult
function.py        one memory step, (ii)-(iii), as an autograd Function for the step loop
"""

from mannlab.ops.dnc.op import BACKENDS, dnc_sequence
from mannlab.ops.dnc.records import (
    ELMAN,
    FNN,
    LSTM,
    RELU,
    SIGMOID,
    TANH,
    DNCOptions,
    DNCResult,
    DNCSequenceState,
    DNCWeights,
)

__all__ = [
    "BACKENDS",
    "ELMAN",
    "FNN",
    "LSTM",
    "RELU",
    "SIGMOID",
    "TANH",
    "DNCOptions",
    "DNCResult",
    "DNCSequenceState",
    "DNCWeights",
    "dnc_sequence",
]
