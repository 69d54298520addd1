"""mannlab: memory-augmented neural networks in PyTorch.

Every model is called like ``torch.nn.LSTM``; a trained one saves to a directory and loads back:

    model = mannlab.NTM(input_size=9, output_size=8)
    y, state = model(x)                       # x (B, T, 9) -> logits (B, T, 8)
    y, state, trace = model(x, return_trace=True)
    mannlab.save(model, "my-ntm")             # config, safetensors weights, SHA-256 sums
    model = mannlab.load("my-ntm")            # or a run: mannlab.load("runs/ntm-copy-seed0")
"""

import importlib
from typing import TYPE_CHECKING, Any

from mannlab import tasks
from mannlab.errors import CheckpointError, ConfigError, DataError
from mannlab.models import ARMIN, DNC, DNTM, GRU, LSTM, NTM, TARDIS, NTMCell, NTMState, NTMTrace, build_model
from mannlab.nn import addressing
from mannlab.state import detach_state, map_state

if TYPE_CHECKING:  # the names loaded on first use (below), as type checkers and editors see them
    from mannlab import analysis, training
    from mannlab.loading import load, save
    from mannlab.reporting import figures as plot

__version__ = "0.1.0"  # the one version source: pyproject.toml reads it from here

__all__ = [
    "addressing",
    "tasks",
    "plot",
    "load",
    "save",
    "analysis",
    "training",
    "build_model",
    "detach_state",
    "map_state",
    "LSTM",
    "GRU",
    "NTM",
    "NTMCell",
    "NTMState",
    "NTMTrace",
    "DNC",
    "DNTM",
    "TARDIS",
    "ARMIN",
    "ConfigError",
    "CheckpointError",
    "DataError",
]


# matplotlib is slow to import: mannlab.plot, the analyses and the trainer (which draws
# figures) load on first use only, and so do load and save (mannlab/loading/)
_LAZY = {
    "load": ("mannlab.loading.runs", "load"),
    "save": ("mannlab.loading.saved", "save"),
    "plot": ("mannlab.reporting.figures", None),
    "analysis": ("mannlab.analysis", None),
    "training": ("mannlab.training", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'mannlab' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
