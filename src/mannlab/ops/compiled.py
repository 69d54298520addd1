"""The "compiled" backend every op shares: the op's one-step function (``sequence_step`` of its
reference.py) under torch.compile, called once per time step by the op's own reference loop.

The step does not depend on the sequence length, so a configuration compiles once (per options,
dtype, device, grad mode and batch size), never per length, whatever lengths a curriculum draws: unlike
``torch.compile(model)``, whose graph holds the whole time loop. On a GPU the step runs under
CUDA graphs (``mode="reduce-overhead"``), which removes the per-op launch cost that bounds the
tensor path there; on the CPU inductor fuses the step's elementwise work.

It runs where asked for: ``MANNLAB_KERNELS=compiled`` or ``use_kernels("compiled")``
(ops/dispatch.py). Its first call compiles (tens of seconds on a CPU core).
``MANNLAB_CUDA_GRAPHS=0`` (or :data:`CUDA_GRAPHS` = False) compiles without CUDA graphs, to
measure what they bring (benchmarks/bench_gpu.py).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

#: whether the compiled step runs under CUDA graphs on a GPU
CUDA_GRAPHS = os.environ.get("MANNLAB_CUDA_GRAPHS", "1") != "0"


def compiled_step(step: Callable, options: Any, device_type: str) -> Callable:
    """``step(*tensors, options)`` under torch.compile with these options fixed (see
    :func:`_compiled_step`), CUDA graphs on a GPU where :data:`CUDA_GRAPHS`."""
    return _compiled_step(step, options, device_type == "cuda" and CUDA_GRAPHS)


#: graphs one step function may hold: per grad mode, batch size and device (torch's default, 8,
#: is shared by every configuration of a model and ends a fullgraph compile in an error)
RECOMPILE_LIMIT = 64


@functools.cache
def _compiled_step(step: Callable, options: Any, cuda_graphs: bool) -> Callable:
    """One graph, no breaks (``fullgraph``); ``cuda_graphs``: under CUDA graphs
    (``mode="reduce-overhead"``). The result is called as the step is (the ``options`` it is
    given are these). Cached, so every call of one configuration shares one compiled function.
    Its tensors are made contiguous first: a step's slice of a (B, T, .) input has a stride that
    depends on T, and a state expanded from a learned initial value has stride 0, and either
    would be a new graph at every new sequence length."""
    mode = "reduce-overhead" if cuda_graphs else None
    fast = torch.compile(functools.partial(step, options=options), fullgraph=True, mode=mode)

    def call(*tensors: Any, options: Any) -> Any:
        dense = pytree.tree_map_only(torch.Tensor, torch.Tensor.contiguous, tensors)
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return fast(*dense)

    return call


def compiled_scheduled_step(
    step: Callable, options: Any, like: torch.Tensor
) -> tuple[Callable, torch.Tensor]:
    """For a model whose 1/τ a schedule sets: ``step`` compiled once with the options' 1/τ fixed
    at 1 (the step reads 1/τ as a 0-dim tensor, so a new 1/τ is a new value, not a new graph),
    and the options' 1/τ as that tensor, in ``like``'s dtype and device."""
    fast = compiled_step(step, options._replace(inverse_temperature=1.0), like.device.type)
    return fast, torch.tensor(options.inverse_temperature, dtype=like.dtype, device=like.device)
