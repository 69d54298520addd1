"""A run directory read back: its config and the weights of a checkpoint, loaded into a model
its caller built from that config (loading/runs.py builds it: ``mannlab.load``)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from mannlab.config import RunConfig, config_toml, load_config
from mannlab.errors import CheckpointError, ConfigError, DataError
from mannlab.file_kinds import directory_problem, kind_of
from mannlab.rundir.checkpoint import META, WEIGHTS, _existing, _read_meta, check_files, load_weights
from mannlab.rundir.files import read_json, write_atomic
from mannlab.rundir.sums import check_sums

log = logging.getLogger("mannlab")


def save_config(config: RunConfig, path: str | Path) -> None:
    """Write the config as TOML, atomically (a resume starts from this file)."""
    write_atomic(path, config_toml(config))


def read_run_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    """The config of the run in ``run_dir`` with ``overrides`` ("model.addressing=argmax",
    ...) applied, its ``run_dir`` where the run is now (a run moved or copied elsewhere keeps
    its old path in config.toml)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        if os.path.lexists(run_dir):
            raise ConfigError(f"{run_dir} is {kind_of(run_dir)}; expected a run directory")
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    checkpoints = run_dir / "checkpoints"
    if os.path.lexists(checkpoints) and (problem := directory_problem(checkpoints)):
        raise CheckpointError(f"{problem}; expected the run's checkpoints (best/, last/)")
    config = load_config(run_dir / "config.toml", list(overrides))
    return config.replace(run_dir=str(run_dir))


def load_run_weights(run_dir: str | Path, model: torch.nn.Module, checkpoint: str = "best") -> dict[str, Any]:
    """Load the weights of the run's ``checkpoint`` ("best" or "last"; "best" falls back to
    "last" if the run has none, or if its best is damaged, saying so) into ``model``, built
    from the run's config; returns the checkpoint's meta. CheckpointError when no checkpoint
    loads or its weights are not finite; a warning when the run diverged."""
    run_dir = Path(run_dir)
    names = [checkpoint] + (["last"] if checkpoint == "best" else [])
    found = [name for name in names if _checkpoint_exists(run_dir / "checkpoints" / name)]
    for name in found:
        try:
            meta = load_weights_and_meta(run_dir / "checkpoints" / name, model)
        except CheckpointError as exc:
            if name == found[-1]:
                raise
            log.warning("mannlab: %s; loading the %s checkpoint instead", exc, found[-1])
            continue
        bad = [
            key
            for key, value in model.state_dict().items()
            if value.is_floating_point() and not torch.isfinite(value).all()
        ]
        if bad:
            raise CheckpointError(
                f"{run_dir / 'checkpoints' / name} holds non-finite weights ({', '.join(bad[:3])}"
                f"{' ...' if len(bad) > 3 else ''}): the run diverged; nothing to evaluate"
            )
        say_if_diverged(run_dir, name, meta)
        return meta
    raise CheckpointError(
        f"no {' or '.join(names)} checkpoint in {run_dir / 'checkpoints'}; has this run saved one yet?"
    )


def say_if_diverged(run_dir: Path, name: str, meta: dict[str, Any]) -> None:
    """Warn when the run's summary.json says it diverged: its checkpoints are what it kept
    before (or while) it went wrong, not a trained model."""
    try:
        summary = read_json(run_dir / "summary.json")
    except (OSError, DataError):
        return
    if isinstance(summary, dict) and summary.get("stopped_by") == "diverged":
        log.warning(
            "mannlab: the run in %s diverged (%s); this is its %s checkpoint, from step %s",
            run_dir,
            str(summary.get("diverged", "see its summary.json"))[:300],
            name,
            meta.get("step", "?"),
        )


def _checkpoint_exists(directory: Path) -> bool:
    """Whether something is there (a checkpoint, or what load_weights_and_meta says is not
    one) or the complete copy a crashed save left beside it."""
    if os.path.lexists(directory):
        return True
    try:
        _existing(directory)
    except CheckpointError:
        return False
    return True


def load_weights_and_meta(directory: Path, model: torch.nn.Module) -> dict[str, Any]:
    """Load a checkpoint's weights into ``model`` and return its meta; unlike
    load_checkpoint this needs neither the training state nor the optimizer's.

    A training may replace the checkpoint while it is read (eval during training): a read
    that a save overlapped (the directory is another one after it, or a file vanished while
    a save's temporary or old copy stands beside it) is done again, so the weights and meta
    always come from one checkpoint."""
    for attempt in range(READ_TRIES):
        before = _identity(directory)
        try:
            meta = _load_weights_and_meta(directory, model)
        except (CheckpointError, FileNotFoundError):
            if attempt == READ_TRIES - 1 or not _being_saved(directory, before):
                raise
        else:
            if attempt == READ_TRIES - 1 or _identity(directory) == before:
                return meta
        time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


# reads of a checkpoint that saves keep replacing: past this many, the error stands
READ_TRIES = 5


def _identity(directory: Path) -> tuple[int, int] | None:
    """The device and inode of the checkpoint directory a read would use (None: none)."""
    try:
        info = os.stat(_existing(directory))
    except (CheckpointError, OSError):
        return None
    return info.st_dev, info.st_ino


def _being_saved(directory: Path, before: tuple[int, int] | None) -> bool:
    """Whether a save replaced (or is replacing) the checkpoint since ``before``."""
    siblings = (directory.parent / f".{directory.name}.{kind}" for kind in ("tmp", "old"))
    return _identity(directory) != before or any(os.path.lexists(s) for s in siblings)


def _load_weights_and_meta(directory: Path, model: torch.nn.Module) -> dict[str, Any]:
    directory = _existing(directory)
    check_files(directory, (WEIGHTS, META))
    remedy = "Restore it from a copy, or load the other checkpoint."
    check_sums(directory, (WEIGHTS, META), remedy, required=True)
    load_weights(directory / WEIGHTS, model)
    return _read_meta(directory / META)
