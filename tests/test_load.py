"""mannlab.load: a trained run's model (weights only, eval mode, its config), `mannlab eval`
without the optimizer state, and run files readable like any other file."""

import os
import stat
import subprocess
import sys

import pytest
import torch

import mannlab
from conftest import tiny_ntm_args
from mannlab.cli import main
from mannlab.config import RunConfig
from mannlab.errors import CheckpointError
from mannlab.training import loop

TINY = ["train", *tiny_ntm_args(val_every=2), "--steps", "4", "--run-dir", "run"]


@pytest.fixture
def trained(tmp_path, monkeypatch):
    """A tiny trained run in tmp_path/run and the trainer's model at the end (best weights)."""
    monkeypatch.chdir(tmp_path)
    kept = {}

    def keep_model(self):  # called by finish() once the best checkpoint is loaded
        kept["model"] = self.model
        return {}

    monkeypatch.setattr(loop._Trainer, "_figures", keep_model)
    assert main(TINY) == 0
    return tmp_path / "run", kept["model"]


def test_load_round_trip_equals_the_trained_model(trained):
    run, model = trained
    loaded = mannlab.load(run)
    assert not loaded.training and isinstance(loaded.config, RunConfig)
    assert loaded.config.model == "ntm" and loaded.config.model_args["memory_slots"] == 8
    x = mannlab.tasks.make("copy", width=3, max_length=3).sample(2, 7)[0]
    model.eval()
    with torch.no_grad():
        assert torch.equal(loaded(x)[0], model(x)[0])
    assert not mannlab.load(run, checkpoint="last").training
    with pytest.raises(ValueError, match="'best' or 'last'"):
        mannlab.load(run, checkpoint="final")


def test_eval_and_load_need_no_optimizer_state(trained, capsys):
    run, _ = trained
    for kind in ("best", "last"):
        (run / "checkpoints" / kind / "train_state.pt").unlink()
    capsys.readouterr()
    assert main(["eval", str(run), "--lengths", "3", "--batches", "1"]) == 0
    assert "3" in capsys.readouterr().out
    assert not mannlab.load(run).training
    (run / "checkpoints" / "best" / "weights.safetensors").unlink()
    with pytest.raises(CheckpointError, match="weights.safetensors is missing"):
        mannlab.load(run)


def test_run_files_are_readable_like_other_files(trained):
    run, _ = trained
    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask
    for path in (run / "checkpoints").rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == expected, path


def test_training_and_load_are_reachable_from_import_mannlab():
    code = (
        "import sys, mannlab; assert 'mannlab.training' not in sys.modules; "
        "print(callable(mannlab.load), callable(mannlab.training.train))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
