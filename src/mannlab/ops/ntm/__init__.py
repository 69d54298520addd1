"""The NTM's fast path, in the shape of a functional op (records in, records out):

ntm_sequence       the whole sequence, steps (i)-(iv) (op.py): numba kernels on the CPU
                   (sequence.py, kernels.py), Triton kernels on the GPU
                   (triton_sequence.py, triton_kernels.py)
reference.py       the plain tensor loop every kernel is tested against
records.py         NTMSequenceState, NTMWeights, NTMOptions, NTMResult, NTMSequenceTrace
function.py        one memory step, (ii)-(iii), as an autograd Function for the step loop,
                   its addressing chain fused (fused_addressing.py)
"""

from mannlab.ops.ntm.op import BACKENDS, ntm_sequence
from mannlab.ops.ntm.records import (
    ELMAN,
    FNN,
    LSTM,
    NTMOptions,
    NTMResult,
    NTMSequenceState,
    NTMSequenceTrace,
    NTMWeights,
)

__all__ = [
    "BACKENDS",
    "ELMAN",
    "FNN",
    "LSTM",
    "NTMOptions",
    "NTMResult",
    "NTMSequenceState",
    "NTMSequenceTrace",
    "NTMWeights",
    "ntm_sequence",
]
