"""Checkpoint integrity at the run level: with sha256.json deleted a flipped bit in the weights
is refused by evaluation (load_run), mannlab.load and --resume alike."""

from pathlib import Path

import pytest

import mannlab
from conftest import tiny_lstm_run
from mannlab.config import RunConfig
from mannlab.errors import CheckpointError
from mannlab.loading import load_run
from mannlab.training import train


def tiny(run_dir: Path, steps: int = 2) -> RunConfig:
    return tiny_lstm_run(run_dir, steps, val_length_multiples=(1,), checkpoint_every=1)


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


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
