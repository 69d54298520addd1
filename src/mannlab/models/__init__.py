"""Model registry: every model of the library by its command-line name."""

from __future__ import annotations

import inspect

from mannlab.errors import ConfigError
from mannlab.models.armin import ARMIN, ARMINCell, ARMINState, ARMINTrace
from mannlab.models.base import SequenceModel
from mannlab.models.dnc import DNC, DNCCell, DNCState, DNCTrace
from mannlab.models.dntm import DNTM, DNTMCell, DNTMState, DNTMTrace
from mannlab.models.gru import GRU, GRUState, GRUTrace
from mannlab.models.lstm import LSTM, LSTMState
from mannlab.models.ntm import NTM, NTMCell, NTMState, NTMTrace
from mannlab.models.tardis import TARDIS, TARDISCell, TARDISState, TARDISTrace

MODELS: dict[str, type[SequenceModel]] = {
    "ntm": NTM,
    "dnc": DNC,
    "dntm": DNTM,
    "lstm": LSTM,
    "gru": GRU,
    "tardis": TARDIS,
    "armin": ARMIN,
}


def model_kwargs(name: str) -> list[str]:
    """The keyword arguments a model accepts besides input_size and output_size."""
    params = inspect.signature(MODELS[name]).parameters
    return [p for p in params if p not in ("self", "input_size", "output_size")]


def build_model(name: str, input_size: int, output_size: int | None, **kwargs) -> SequenceModel:
    """Build a registered model; unknown names or keywords fail naming the valid ones."""
    key = name.lower().replace("-", "_")
    if key not in MODELS:
        raise ConfigError(f"unknown model {name!r}; valid models: {', '.join(sorted(MODELS))}")
    valid = model_kwargs(key)
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for model {key!r}; valid options: {', '.join(valid)}")
    return MODELS[key](input_size, output_size, **kwargs)


__all__ = [
    "MODELS",
    "build_model",
    "model_kwargs",
    "SequenceModel",
    "LSTM",
    "LSTMState",
    "GRU",
    "GRUState",
    "GRUTrace",
    "NTM",
    "NTMCell",
    "NTMState",
    "NTMTrace",
    "DNC",
    "DNCCell",
    "DNCState",
    "DNCTrace",
    "DNTM",
    "DNTMCell",
    "DNTMState",
    "DNTMTrace",
    "TARDIS",
    "TARDISCell",
    "TARDISState",
    "TARDISTrace",
    "ARMIN",
    "ARMINCell",
    "ARMINState",
    "ARMINTrace",
]
