"""``warm_up``: compile the memory models' CPU kernels now (or load them from numba's disk
cache), instead of at their first use: before timing a model, or before several processes
start using them at once (the test suite's workers).

numba compiles a kernel once per argument type, so one tiny forward and backward per model
and dtype reaches every kernel: the whole-sequence kernels, and for the NTM and the DNC the
memory step of the step loop as well (a GRU controller, and the DNC's trace, take that loop).
Their sizes and options change no argument type (flags are plain integers and booleans, and
unused inputs are placeholder arrays of the same rank), so one configuration per path is
enough; tests/ops/test_warm_up.py checks that every kernel gets compiled for each dtype.

Each family compiles under ``ops.numba_cache.compile_lock``: processes warming up at once share
the work. Each first takes the families no other process holds, then waits for the others' and
loads those from the disk cache.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from mannlab.models.armin import ARMIN
from mannlab.models.base import SequenceModel
from mannlab.models.dnc import DNC
from mannlab.models.dntm import DNTM
from mannlab.models.ntm import NTM
from mannlab.models.tardis import TARDIS
from mannlab.ops import dispatch, use_kernels
from mannlab.ops.numba_cache import compile_lock

#: the ops packages whose numba kernels the models call
FAMILIES = ("ntm", "dnc", "dntm", "tardis", "armin")

# Per family: (model class, tiny options, return_trace), one per path to its kernels.
_PASSES: dict[str, list[tuple[type[SequenceModel], dict[str, Any], bool]]] = {
    "ntm": [
        (NTM, dict(controller="lstm", controller_size=4, memory_slots=5, memory_width=3), False),
        (NTM, dict(controller="gru", controller_size=4, memory_slots=5, memory_width=3), False),
    ],
    "dnc": [
        (DNC, dict(controller_size=4, memory_slots=5, memory_width=3), False),
        (DNC, dict(controller_size=4, memory_slots=5, memory_width=3), True),
    ],
    "dntm": [(DNTM, dict(controller_size=4, memory_slots=5, address_size=2, content_size=3), False)],
    "tardis": [
        (TARDIS, dict(hidden_size=4, memory_slots=4, address_size=3, content_size=3, read_mlp_size=4), False)
    ],
    "armin": [(ARMIN, dict(hidden_size=4, memory_slots=4), False)],
}


def warm_up(
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.float64), families: Iterable[str] = FAMILIES
) -> dict[str, float]:
    """Compile every numba kernel of ``families`` (ops package names) for each of ``dtypes``,
    or load them from numba's disk cache. Returns the seconds each family took in this
    process; empty where the kernels are unavailable (numba missing). The global random
    state is left as it was."""
    families = list(families)
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown kernel families {unknown}; valid: {', '.join(FAMILIES)}")
    pending, seconds = families, dict[str, float]()
    for blocking in (False, True):  # first what no other process is compiling, then wait
        for name in list(pending):
            kernels = dispatch.load(name)
            if kernels is None:
                return seconds
            with compile_lock(kernels, blocking) as held:
                if not held:
                    continue
                start = time.perf_counter()
                for dtype in dtypes:
                    for model_class, options, trace in _PASSES[name]:
                        _forward_backward(model_class, options, trace, dtype)
                seconds[name] = time.perf_counter() - start
            pending.remove(name)
    return seconds


def _forward_backward(
    model_class: type[SequenceModel], options: dict[str, Any], trace: bool, dtype: torch.dtype
) -> None:
    with torch.random.fork_rng(devices=[]), torch.enable_grad(), use_kernels(True):
        torch.manual_seed(0)
        model = model_class(2, 2, **options).to(dtype)
        x = torch.rand(1, 3, 2, dtype=dtype)
        model(x, return_trace=trace)[0].sum().backward()
