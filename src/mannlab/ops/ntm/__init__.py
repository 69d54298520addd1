"""The NTM's fast path, in the shape of a functional op (records in, records out):

op.py               ``ntm_sequence``, the whole sequence, steps (i)-(iv): numba kernels on
                    the CPU (numba_sequence.py over kernels.py), Triton kernels on the GPU
                    (triton_sequence.py over triton_kernels.py)
records.py          NTMState, NTMTrace (the model's own), NTMWeights, NTMOptions, NTMResult;
                    ``covers`` and ``pays``: what each backend implements (ops/dispatch.py)
reference.py        the plain tensor loop every kernel is tested against
memory_step.py      ``ntm_memory_step``, one memory step, (ii)-(iii), as an autograd Function
                    for the step loop, its addressing chain fused (fused_addressing.py)
"""

from mannlab.ops.ntm.op import BACKENDS, NAME, ntm_sequence
from mannlab.ops.ntm.records import (
    ELMAN,
    FNN,
    LSTM,
    NTMOptions,
    NTMResult,
    NTMState,
    NTMTrace,
    NTMWeights,
    covers,
    pays,
)

__all__ = [
    "BACKENDS",
    "ELMAN",
    "FNN",
    "LSTM",
    "NAME",
    "NTMOptions",
    "NTMResult",
    "NTMState",
    "NTMTrace",
    "NTMWeights",
    "covers",
    "ntm_sequence",
    "pays",
]
