"""The "compiled" backend every op shares: the op's one-step function (``sequence_step`` of its
reference.py) under torch.compile, called once per time step by the op's own reference loop.

The step does not depend on the sequence length, so a configuration compiles once (per options,
dtype, device and batch size), never per length, whatever lengths a curriculum draws: unlike
``torch.compile(model)``, whose graph holds the whole time loop. On a GPU the step runs under
CUDA graphs (``mode="reduce-overhead"``), which removes the per-op launch cost that bounds the
tensor path there; on the CPU inductor fuses the step's elementwise work.

It runs where asked for: ``MANNLAB_KERNELS=compiled`` or ``use_kernels("compiled")``
(ops/dispatch.py). Its first call compiles (tens of seconds on a CPU core).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch


@functools.cache
def compiled_step(step: Callable, options: Any, device_type: str) -> Callable:
    """``step(*tensors, options)`` under torch.compile with these options fixed: one graph, no
    breaks (``fullgraph``), static shapes; CUDA graphs on a GPU. The result is called as the
    step is (the ``options`` it is given are these). Cached per (step, options, device type),
    so every call of one configuration shares one compiled function."""
    mode = "reduce-overhead" if device_type == "cuda" else None
    fast = torch.compile(functools.partial(step, options=options), fullgraph=True, dynamic=False, mode=mode)

    def call(*tensors: Any, options: Any) -> Any:
        return fast(*tensors)

    return call
