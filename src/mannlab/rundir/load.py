"""Open a run directory: its config, task and model with the weights of a checkpoint.

model = mannlab.load("runs/ntm-copy-seed0")      # the best checkpoint, in eval mode, on the CPU
model.config                                     # the run's RunConfig
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from mannlab.building import build_run
from mannlab.config import RunConfig, config_toml, load_config, run_threads
from mannlab.errors import CheckpointError, ConfigError, DataError
from mannlab.file_kinds import directory_problem, kind_of
from mannlab.rundir.checkpoint import META, WEIGHTS, _existing, _read_meta, check_files, load_weights
from mannlab.rundir.files import read_json, write_atomic
from mannlab.rundir.pretrained import Device, is_saved_model, load_saved
from mannlab.rundir.sums import check_sums

log = logging.getLogger("mannlab")


def save_config(config: RunConfig, path: str | Path) -> None:
    """Write the config as TOML, atomically (a resume starts from this file)."""
    write_atomic(path, config_toml(config))


def use_run_threads(config: RunConfig) -> None:
    """Use the run's torch thread count (train.threads) for its evaluation, as training did:
    these small models run fastest on one thread, and several threads fighting over a busy
    CPU (the compiled kernels' BLAS calls included) are many times slower."""
    if config.train.threads:
        torch.set_num_threads(run_threads(config.train.threads))


def load_run(
    run_dir: str | Path, checkpoint: str = "best", overrides: Sequence[str] = ()
) -> tuple[RunConfig, Any, torch.nn.Module, dict]:
    """(config, task, model with weights, checkpoint meta) of a run directory.

    ``checkpoint`` is "best" or "last"; "best" falls back to "last" if the run has none.
    ``overrides`` ("model.addressing=argmax", ...) change the run's config before the
    weights load into the model it builds.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        if os.path.lexists(run_dir):
            raise ConfigError(f"{run_dir} is {kind_of(run_dir)}; expected a run directory")
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    checkpoints = run_dir / "checkpoints"
    if os.path.lexists(checkpoints) and (problem := directory_problem(checkpoints)):
        raise CheckpointError(f"{problem}; expected the run's checkpoints (best/, last/)")
    config = load_config(run_dir / "config.toml", list(overrides))
    # where the run is now: a run moved or copied elsewhere keeps its old path in config.toml
    config = config.replace(run_dir=str(run_dir))
    task, model = build_run(config)
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
        return config, task, model, meta
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


def load(
    path: str | Path, checkpoint: str = "best", overrides: Sequence[str] = (), device: Device = None
) -> torch.nn.Module:
    """The trained model of a run directory, ready for inference: weights of the
    ``checkpoint`` ("best", the default and the papers' protocol, or "last") read through
    safetensors (no pickled code runs), in eval mode, its run config as ``model.config``.
    A damaged best checkpoint falls back to the last one, saying so.

    ``overrides`` change the config first, as ``mannlab eval --set`` does. The optimizer
    state file is not needed. ``device`` is where the model goes: the CPU unless it names
    another ("cuda", "cuda:1", a ``torch.device``), whatever device the run trained on, as
    ``torch.load``'s ``map_location`` does. A directory written by ``mannlab.save`` loads
    too (then ``checkpoint`` and ``overrides`` do not apply)."""
    if is_saved_model(path):
        if checkpoint != "best" or overrides:
            raise ValueError(f"{path} holds a model written by mannlab.save: no checkpoints, no overrides")
        return load_saved(path, device)
    if checkpoint not in ("best", "last"):
        raise ValueError(f"checkpoint must be 'best' or 'last', got {checkpoint!r}")
    config, _, model, _ = load_run(path, checkpoint, overrides)
    model.config = config
    return model.to(torch.device(device if device is not None else "cpu")).eval()


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
