"""Memory a model or a run needs, estimated before anything is allocated, and a clear error
for what cannot fit.

Absurd sizes (a million layers, 10^10 memory slots, a batch of 10^12) would otherwise hang in
the constructor or grow the process until the OS kills it. The estimates are lower bounds in
float32 elements: the dominant terms of the parameters and of one sequence's recurrent state
(a model's constructor, :func:`check_model_size`), and a run's batch data, state and outputs
(:func:`check_batch_memory`). What they refuse can never fit; what they let through may still
be tight. They are compared with the memory available now (``MemAvailable`` of
/proc/meminfo, else the free pages sysconf reports; no check where neither is known).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

import torch

from mannlab.errors import ConfigError

BYTES_PER_ELEMENT = 4  # float32
# torch builds a stack of recurrent layers in time growing with the square of their number
MAX_LAYERS = 1024


def available_memory() -> Optional[int]:
    """Bytes of memory this process could still allocate, or None where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(count: float) -> str:
    """1.5 GiB, 3.2 TiB, ...: a size for a message."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024:
            return f"{count:.3g} {unit}"
        count /= 1024
    return f"{count:.3g} PiB"


def refuse_if_too_big(what: str, elements: int, detail: str) -> None:
    """ConfigError when ``elements`` float32 values (``detail`` says which) cannot fit in the
    memory available."""
    need = elements * BYTES_PER_ELEMENT
    have = available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"{what} needs at least {format_bytes(need)} of memory ({detail}), more than the "
            f"{format_bytes(have)} available on this machine; choose smaller sizes"
        )


# model -> (parameters, one sequence's state) in elements, lower bounds over its main sizes;
# "recurrent" is 1 for a controller with whole C x C recurrent weights (LSTM, GRU, Elman), else 0
_ESTIMATES: dict[str, Callable[[dict[str, int]], tuple[int, int]]] = {
    "LSTM": lambda s: (
        4 * s["hidden_size"] * (s["input_size"] + s["hidden_size"])
        + 8 * s["hidden_size"] ** 2 * (s["num_layers"] - 1),
        2 * s["num_layers"] * s["hidden_size"],
    ),
    "GRU": lambda s: (
        3 * s["hidden_size"] * (s["input_size"] + s["hidden_size"])
        + 6 * s["hidden_size"] ** 2 * (s["num_layers"] - 1),
        s["num_layers"] * s["hidden_size"],
    ),
    "NTM": lambda s: (
        s["controller_size"]
        * (
            s["input_size"]
            + s["recurrent"] * s["controller_size"]
            + (2 * s["read_heads"] + s["write_heads"]) * s["memory_width"]
        ),
        s["memory_slots"] * (s["memory_width"] + s["read_heads"] + s["write_heads"]),
    ),
    "DNC": lambda s: (
        s["controller_size"]
        * (s["input_size"] + s["recurrent"] * s["controller_size"] + 2 * s["read_heads"] * s["memory_width"]),
        s["memory_slots"] * (s["memory_slots"] + s["memory_width"] + s["read_heads"]),
    ),
    "DNTM": lambda s: (
        s["memory_slots"] * s["address_size"]
        + s["controller_size"]
        * (
            s["input_size"]
            + s["recurrent"] * s["controller_size"]
            + s["read_heads"] * (s["address_size"] + s["content_size"])
        ),
        s["memory_slots"] * (s["content_size"] + s["read_heads"] + s["write_heads"]),
    ),
    "ARMIN": lambda s: (
        (s["hidden_size"] + s["memory_width"]) * (s["input_size"] + s["hidden_size"] + s["memory_width"])
        + s["hidden_size"] * s["read_mlp_size"]
        + s["memory_slots"] * s["address_size"],
        s["memory_slots"] * s["memory_width"],
    ),
    "TARDIS": lambda s: (
        s["memory_slots"] * (s["address_size"] + s["content_size"])
        + s["hidden_size"] * (s["input_size"] + s["hidden_size"])
        + s["read_mlp_size"] * (s["hidden_size"] + s["memory_slots"] + s["content_size"])
        + s["fusion_size"] * (s["hidden_size"] + s["content_size"]),
        s["memory_slots"] * (s["content_size"] + 1),
    ),
}

# the constructor arguments each estimate reads
_SIZES = {
    "LSTM": ("input_size", "hidden_size", "num_layers"),
    "GRU": ("input_size", "hidden_size", "num_layers"),
    "NTM": ("input_size", "controller_size", "memory_slots", "memory_width", "read_heads", "write_heads"),
    "DNC": ("input_size", "controller_size", "memory_slots", "memory_width", "read_heads"),
    "DNTM": (
        "input_size",
        "controller_size",
        "memory_slots",
        "address_size",
        "content_size",
        "read_heads",
        "write_heads",
    ),
    "ARMIN": ("input_size", "hidden_size", "memory_slots", "memory_width", "address_size", "read_mlp_size"),
    "TARDIS": (
        "input_size",
        "hidden_size",
        "memory_slots",
        "address_size",
        "content_size",
        "read_mlp_size",
        "fusion_size",
    ),
}


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_model_size(model: str, arguments: dict[str, Any]) -> None:
    """Constructor guard: ConfigError when the parameters and one sequence's state of ``model``
    built with ``arguments`` (its constructor's arguments by name, ``locals()`` on entry; None
    counts as 1) cannot fit in memory, or when a layer count is past MAX_LAYERS. Sizes that are
    not positive integers are left to the constructor's own checks."""
    sizes = {name: 1 if arguments.get(name) is None else arguments[name] for name in _SIZES[model]}
    if not all(_is_size(v) for v in sizes.values()):
        return
    layers = sizes.get("num_layers", 1)
    if layers > MAX_LAYERS:
        raise ConfigError(f"num_layers must be at most {MAX_LAYERS}, got {layers}")
    recurrent = int(arguments.get("controller") in ("lstm", "gru", "elman"))
    parameters, state = _ESTIMATES[model]({**sizes, "recurrent": recurrent})
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items() if k != "input_size")
    refuse_if_too_big(
        f"{model}({shown})",
        parameters + state,
        f"{parameters:.3g} parameters and {state:.3g} state values per sequence",
    )


def state_elements(model: torch.nn.Module) -> int:
    """Values in one sequence's recurrent state of a built model (0 where it keeps none), counted
    on the meta device so nothing is allocated."""
    initial_state = getattr(model, "initial_state", None)
    if initial_state is None:
        return 0
    try:
        state = initial_state(1, device=torch.device("meta"), dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError, NotImplementedError):
        return 0  # a wrapper with another signature: no state counted (a lower bound still)
    leaves = torch.utils._pytree.tree_leaves(state)
    return sum(leaf.numel() for leaf in leaves if isinstance(leaf, torch.Tensor))


def check_batch_memory(
    what: str,
    model: torch.nn.Module,
    batch_size: int,
    steps: int,
    widths: int,
    extra: int = 0,
    extra_detail: str = "",
) -> None:
    """ConfigError when a pass of ``batch_size`` sequences of ``steps`` steps cannot fit: the
    model's parameters and their gradients, the batch's state, and ``widths`` values per step
    and sequence (its inputs, targets and outputs), plus ``extra`` elements (``extra_detail``)."""
    parameters = sum(p.numel() for p in model.parameters())
    state = batch_size * state_elements(model)
    per_step = batch_size * steps * widths
    detail = (
        f"{batch_size} sequences x {steps} steps x {widths} values per step, "
        f"{state:.3g} state values, {2 * parameters:.3g} parameters and gradients"
    )
    if extra:
        detail += f", {extra_detail}"
    refuse_if_too_big(what, 2 * parameters + state + per_step + extra, detail)
