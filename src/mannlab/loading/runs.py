"""Open a run directory: its config, task and model with the weights of a checkpoint.

model = mannlab.load("runs/ntm-copy-seed0")      # the best checkpoint, in eval mode, on the CPU
model.config                                     # the run's RunConfig
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from mannlab.building import build_run
from mannlab.config import RunConfig, run_threads
from mannlab.loading.devices import Device, target_device
from mannlab.loading.recorded import check_recorded_config
from mannlab.loading.saved import load_saved
from mannlab.rundir.run_files import load_run_weights, read_run_config
from mannlab.rundir.saved_model import is_saved_model


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
    weights load into the model it builds. config.toml itself must say what the checkpoint
    recorded (loading/recorded.py): an edit of the model or task is refused, naming the keys.
    """
    config = read_run_config(run_dir)
    check_recorded_config(Path(run_dir), config, checkpoint)  # overrides are deliberate: not compared
    if overrides:
        config = config.with_overrides(overrides)
    task, model = build_run(config)
    meta = load_run_weights(run_dir, model, checkpoint)
    return config, task, model, meta


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
    target = target_device(device)  # a device this machine lacks fails before any file is read
    if is_saved_model(path):
        if checkpoint != "best" or overrides:
            raise ValueError(f"{path} holds a model written by mannlab.save: no checkpoints, no overrides")
        return load_saved(path, device)
    if checkpoint not in ("best", "last"):
        raise ValueError(f"checkpoint must be 'best' or 'last', got {checkpoint!r}")
    config, _, model, _ = load_run(path, checkpoint, overrides)
    # torch's stub types Module.__setattr__ for tensors and modules only; any value is kept
    model.config = config  # type: ignore[assignment]
    return model.to(target).eval()
