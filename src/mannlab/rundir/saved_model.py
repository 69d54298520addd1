"""The files of a model written by ``mannlab.save`` (mannlab/loading/saved.py), as Hugging
Face's ``save_pretrained`` writes them:

    config.json         how to build the model again (its format and version, the
                        registered model's name and arguments and/or a run config)
    model.safetensors   the weights (read through safetensors: no pickled code runs)
    sha256.json         the SHA-256 sums of both, checked before either is read

This module reads and writes them; building the model they describe is loading/'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as safetensors_bytes

from mannlab.errors import CheckpointError, DataError
from mannlab.file_kinds import file_problem
from mannlab.rundir.files import read_json, write_atomic
from mannlab.rundir.safetensors_file import read_safetensors
from mannlab.rundir.sums import MAX_FILE_BYTES, check_sums, write_sums
from mannlab.rundir.weights_check import check_finite, weight_problems

FORMAT = "mannlab-model"
VERSION = 1
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
FILES = (CONFIG, WEIGHTS)
REMEDY = "Save the model again, or restore the directory from a copy."


def check_target(directory: Path) -> None:
    """A save writes a directory: NotADirectoryError if ``directory`` is a file."""
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file; mannlab.save writes a directory")


def write_saved(directory: Path, config: dict[str, Any], model: torch.nn.Module) -> Path:
    """Write ``config`` (config.json's object, ``FORMAT`` and ``VERSION`` in it) and the
    weights of ``model`` into ``directory`` (made if missing; the three files are replaced,
    other files are left alone). The weights are written from the CPU, in the model's dtype."""
    # clones: safetensors refuses tensors that share storage (tied weights, views)
    weights = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / WEIGHTS, safetensors_bytes(weights, metadata={"format": "pt"}))
    write_atomic(directory / CONFIG, json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_sums(directory, FILES)
    return directory


def is_saved_model(directory: str | Path) -> bool:
    """Whether ``directory`` holds a model written by ``mannlab.save``: something named
    config.json (a FIFO or a loop of links too, which reading it then names) and no run's
    config.toml."""
    directory = Path(directory)
    return os.path.lexists(directory / CONFIG) and not os.path.lexists(directory / "config.toml")


def read_saved(directory: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config.json's object, the weights) of a saved model, each file checked against its
    sum; CheckpointError names what is missing, damaged or of another format version."""
    for name in FILES:
        if not os.path.lexists(directory / name):
            raise CheckpointError(f"{directory} is not a saved mannlab model: {name} is missing")
        if problem := file_problem(directory / name, MAX_FILE_BYTES):
            raise CheckpointError(f"{directory} is not a saved mannlab model: {problem}. {REMEDY}")
    check_sums(directory, FILES, REMEDY, required=True)
    try:
        config = read_json(directory / CONFIG)
    except DataError as exc:
        raise CheckpointError(f"{exc}. {REMEDY}") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(f"{directory / CONFIG} is not the config of a saved mannlab model")
    version = config.get("version")
    if isinstance(version, bool) or version != VERSION:  # True == 1 in Python
        raise CheckpointError(
            f"{directory} was saved in format version {version!r}; this mannlab reads version {VERSION}"
        )
    return config, read_safetensors(directory / WEIGHTS, REMEDY)


def load_saved_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], directory: Path) -> None:
    """Load the weights :func:`read_saved` gave into ``model`` (built from its config.json),
    in their dtype when they all share one (a float64 model comes back in float64);
    CheckpointError if they do not fit it (a name, shape or dtype that is not the model's)
    or are not finite."""
    dtypes = {v.dtype for v in weights.values() if v.is_floating_point()}
    if len(dtypes) == 1:
        model.to(dtypes.pop())
    path = directory / WEIGHTS
    problems = weight_problems(model.state_dict(), weights)
    if problems:
        raise CheckpointError(f"{path} does not fit the model its config builds: {'; '.join(problems)}")
    check_finite(weights, str(path))
    model.load_state_dict(weights)
