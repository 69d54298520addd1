"""mannlab: memory-augmented neural networks in PyTorch.

model = mannlab.NTM(input_size=9, output_size=8)
y, state = model(x)                       # x (B, T, 9) -> logits (B, T, 8)
y, state, trace = model(x, return_trace=True)
"""

import importlib

from mannlab import tasks
from mannlab.errors import CheckpointError, ConfigError, DataError
from mannlab.models import ARMIN, DNC, DNTM, GRU, LSTM, NTM, TARDIS, NTMCell, NTMState, NTMTrace, build_model
from mannlab.nn import addressing
from mannlab.state import detach_state, map_state

__version__ = "0.1.0"

__all__ = [
    "addressing",
    "tasks",
    "plot",
    "load",
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


def __getattr__(name):
    # matplotlib is slow to import: load mannlab.plot, the analyses and the trainer (which
    # draws figures) on first use only.
    if name == "load":  # mannlab.load("runs/x"), a trained run's model (rundir/load.py)
        return importlib.import_module("mannlab.rundir.load").load
    if name in ("plot", "analysis", "training"):
        return importlib.import_module({"plot": "mannlab.reporting.figures"}.get(name, f"mannlab.{name}"))
    raise AttributeError(f"module 'mannlab' has no attribute {name!r}")
