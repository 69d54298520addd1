"""The DNC's fast path, in the shape of a functional op (records in, records out):

op.py               ``dnc_sequence``, the whole sequence, steps (i)-(iv): numba kernels on
                    the CPU (numba_sequence.py over kernels.py), Triton kernels on the GPU
                    (triton_sequence.py over triton_kernels.py)
records.py          DNCState, DNCTrace (the model's own), DNCWeights, DNCOptions, DNCResult,
                    DNCStepResult; ``covers`` and ``pays``: what each backend implements
                    (ops/dispatch.py)
reference.py        the plain tensor code every kernel is tested against: the whole sequence
                    and the memory step, steps (ii)-(iii), as the composition of
                    mannlab.nn.addressing
memory_step.py      ``dnc_memory_step``, one memory step, (ii)-(iii), as an autograd Function
                    for the step loop
"""

from mannlab.ops.dnc.op import BACKENDS, NAME, dnc_sequence
from mannlab.ops.dnc.records import (
    ELMAN,
    FNN,
    LSTM,
    RELU,
    SIGMOID,
    TANH,
    DNCOptions,
    DNCResult,
    DNCState,
    DNCStepResult,
    DNCStepTrace,
    DNCTrace,
    DNCWeights,
    covers,
    pays,
)

__all__ = [
    "BACKENDS",
    "ELMAN",
    "FNN",
    "LSTM",
    "NAME",
    "RELU",
    "SIGMOID",
    "TANH",
    "DNCOptions",
    "DNCResult",
    "DNCState",
    "DNCStepResult",
    "DNCStepTrace",
    "DNCTrace",
    "DNCWeights",
    "covers",
    "dnc_sequence",
    "pays",
]
