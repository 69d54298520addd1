"""Checkpoint integrity at the run level: with sha256.json deleted a flipped bit in the weights
is refused by evaluation (load_run), mannlab.load and --resume alike."""

from pathlib import Path

import pytest

import mannlab
from mannlab.config import RunConfig, TrainConfig
from mannlab.errors import CheckpointError
from mannlab.rundir import load_run
from mannlab.training import loop, train


def tiny(run_dir: Path, steps: int = 2) -> RunConfig:
    return RunConfig(
        model="lstm",
        task="copy",
        model_args={"hidden_size": 4},
        task_args={"width": 2, "max_length": 2},
        train=TrainConfig(
            steps=steps,
            batch_size=2,
            val_every=1,
            val_batch_size=2,
            val_batches=1,
            val_length_multiples=(1,),
            checkpoint_every=1,
            progress=False,
        ),
        run_dir=str(run_dir),
    )


@pytest.fixture(autouse=True)
def no_figures(monkeypatch):
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})


def test_deleted_sums_do_not_turn_the_check_off(tmp_path):
    run = tmp_path / "run"
    train(tiny(run))
    for kind in ("best", "last"):
        (run / "checkpoints" / kind / "sha256.json").unlink()
        weights = run / "checkpoints" / kind / "weights.safetensors"
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0x10
        weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256.json is missing"):
        load_run(run)
    with pytest.raises(CheckpointError, match="sha256.json is missing"):
        mannlab.load(run)
    with pytest.raises(CheckpointError, match="sha256.json is missing"):
        train(tiny(run, steps=3), resume=True)
