"""Save any mannlab model to a directory and load it back, as Hugging Face's
``save_pretrained`` / ``from_pretrained`` do:

    mannlab.save(model, "my-ntm")                 # config.json, model.safetensors, sha256.json
    model = mannlab.load("my-ntm")                # the same model, on the CPU, in eval mode
    model = mannlab.load("my-ntm", device="cuda")

``config.json`` says how to build the model again: the registered model's name and the
arguments it was built with (every registered model keeps them as ``constructor_args``), and,
for the model of a run (``mannlab.load(run_dir)``, Lightning's ``MannModule``), the run config
(model, task and their arguments), which is also how a model behind a task's adapter (the
char-LM embedding, SST, a bAbI fact encoder) is rebuilt: that builds the task, so a data-set
task needs its files. The files and their checks are rundir/saved_model.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mannlab.building import build_run
from mannlab.config import RunConfig
from mannlab.errors import CheckpointError, ConfigError
from mannlab.loading.devices import Device, target_device
from mannlab.models import MODELS, build_model
from mannlab.rundir.saved_model import (
    CONFIG,
    FORMAT,
    VERSION,
    check_target,
    load_saved_weights,
    read_saved,
    write_saved,
)


def save(model: torch.nn.Module, directory: str | Path) -> Path:
    """Write ``model`` into ``directory`` (made if missing; the three files are replaced, other
    files are left alone): its config, its weights as safetensors and their SHA-256 sums.
    Returns the directory. Any device and dtype: the weights are written from the CPU, in the
    model's dtype."""
    directory = Path(directory)
    check_target(directory)
    return write_saved(directory, describe(model), model)


def describe(model: torch.nn.Module) -> dict[str, Any]:
    """The JSON object of config.json: how to build ``model`` again (see the module)."""
    described: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    name = next((key for key, cls in MODELS.items() if type(model) is cls), None)
    args = model.__dict__.get("constructor_args")
    if name is not None and args is not None:
        described["model"] = {"name": name, "args": _json_values(args, f"the {name} model's arguments")}
    run = getattr(model, "config", None)
    if isinstance(run, RunConfig):
        # the directory it came from is no part of the model
        described["run"] = _json_values(run.replace(run_dir=None).to_dict(), "the run config")
    if len(described) == 2:
        raise TypeError(
            f"mannlab.save rebuilds a registered model ({', '.join(MODELS)}) from the arguments it "
            f"was built with, or a run's model from its config; {type(model).__name__} is neither. "
            "Save its state_dict with torch.save or safetensors instead"
        )
    return described


def load_saved(directory: str | Path, device: Device = None) -> torch.nn.Module:
    """The model :func:`save` wrote into ``directory``, in eval mode, on ``device`` (default
    the CPU, whatever device it was saved from); a run's model has its config as
    ``model.config``."""
    directory = Path(directory)
    target = target_device(device)  # a device this machine lacks fails before any file is read
    config, weights = read_saved(directory)
    model, run = build_described(config, str(directory / CONFIG))
    load_saved_weights(model, weights, directory)
    if run is not None:
        # torch's stub types Module.__setattr__ for tensors and modules only; any value is kept
        model.config = run  # type: ignore[assignment]
    return model.to(target).eval()


def build_described(
    config: dict[str, Any], source: str = "the config"
) -> tuple[torch.nn.Module, RunConfig | None]:
    """(a freshly initialised model, the run config or None) of a :func:`describe` object;
    ``source`` names where it was read, for the error. Every field is checked as a fresh
    config is: a run config that is not one, a model name that is not a string, or a model
    and a run config that describe two different models is a CheckpointError."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{source} should be a JSON object, got {type(config).__name__}")
    run = _described_run(config, source)
    described = config.get("model")
    if described is not None:
        _check_described_model(described, run, source)
    try:
        if isinstance(described, dict):
            return build_model(described["name"], **described["args"]), run
        if run is not None:
            return build_run(run)[1], run
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{source} does not build a model: {exc}") from None
    raise CheckpointError(f"{source} names neither a model nor a run config")


def _described_run(config: dict[str, Any], source: str) -> RunConfig | None:
    if config.get("run") is None:
        return None
    if not isinstance(config["run"], dict):
        raise CheckpointError(
            f"{source}: its run must be a run config (a JSON object), got {config['run']!r}"
        )
    try:
        return RunConfig.from_dict(config["run"])
    except ConfigError as exc:
        raise CheckpointError(f"{source}: its run config is not valid ({exc})") from None


def _check_described_model(described: Any, run: RunConfig | None, source: str) -> None:
    """CheckpointError unless ``described`` is {"name": a string, "args": an object}, of the
    same model as ``run`` (when there is one) with the same values of the arguments both give."""
    if not isinstance(described, dict) or set(described) != {"name", "args"}:
        raise CheckpointError(
            f'{source}: its model must be {{"name": ..., "args": {{...}}}}, got {described!r}'
        )
    name, args = described["name"], described["args"]
    if not isinstance(name, str):
        raise CheckpointError(f"{source}: its model.name must be a string, got {name!r}")
    if not isinstance(args, dict):
        raise CheckpointError(f"{source}: its model.args must be a JSON object, got {args!r}")
    if run is None:
        return
    key = name.lower().replace("-", "_")
    if key != run.model.lower().replace("-", "_") and key in MODELS:
        raise CheckpointError(
            f"{source}: its model is {name!r} but its run config's is {run.model!r}; the file "
            "was changed after mannlab wrote it"
        )
    differ = [k for k, v in run.model_args.items() if k in args and args[k] != v]
    if differ:
        raise CheckpointError(
            f"{source}: model.args and the run config's model differ in {', '.join(sorted(differ))}; "
            "the file was changed after mannlab wrote it"
        )


def _json_values(values: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(values))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"mannlab.save writes {what} as JSON, and one is not: {exc}") from None
