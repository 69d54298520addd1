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
    assert not mannlab.load(run).training  # the last checkpoint, saying so
    (run / "checkpoints" / "last" / "weights.safetensors").unlink()
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


def test_a_moved_run_loads_with_its_new_directory_on_the_cpu(trained, tmp_path):
    run, model = trained
    moved = tmp_path / "elsewhere" / "run"
    moved.parent.mkdir()
    run.rename(moved)
    loaded = mannlab.load(moved)
    assert loaded.config.run_dir == str(moved)
    assert all(p.device.type == "cpu" for p in loaded.parameters())
    assert all(p.device.type == "meta" for p in mannlab.load(moved, device="meta").parameters())


def test_a_damaged_best_checkpoint_falls_back_to_last(trained, caplog):
    run, _ = trained
    weights = run / "checkpoints" / "best" / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="mannlab"):
        loaded = mannlab.load(run)
    last = mannlab.load(run, checkpoint="last")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), last.state_dict().values()))
    said = caplog.text
    assert "best" in said and "loading the last checkpoint instead" in said and "--resume" not in said
    last_weights = run / "checkpoints" / "last" / "weights.safetensors"
    last_weights.write_bytes(last_weights.read_bytes()[:-1] + b"x")
    with pytest.raises(CheckpointError, match="SHA-256") as error:
        mannlab.load(run)
    assert "--resume" not in str(error.value)


def test_a_run_model_saved_again_loads_without_its_run(trained, tmp_path):
    run, _ = trained
    model = mannlab.load(run)
    mannlab.save(model, tmp_path / "saved")
    again = mannlab.load(tmp_path / "saved")
    assert again.config.model == "ntm" and again.config.run_dir is None
    x = mannlab.tasks.make("copy", width=3, max_length=3).sample(2, 7)[0]
    with torch.no_grad():
        assert torch.equal(again(x)[0], model(x)[0])
    with pytest.raises(ValueError, match="mannlab.save"):
        mannlab.load(tmp_path / "saved", checkpoint="last")
