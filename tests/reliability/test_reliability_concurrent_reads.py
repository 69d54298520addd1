"""A reader and a second writer beside a running training, as the concurrency fuzz cases
(reliability/fuzz_concurrency.py) found them: a checkpoint that a save replaces while `eval`
or `mannlab.load` reads it is read again (it failed with "No such file or directory", or could
mix the files of two checkpoints), and `train --resume` of a directory whose training has not
yet written its config.toml says the directory is in use (it said the config was missing)."""

import os
import shutil

import pytest
import torch

from conftest import tiny_lstm_run
from mannlab.cli import main
from mannlab.loading import load_run
from mannlab.rundir import run_files as load_module
from mannlab.rundir import save_checkpoint
from mannlab.rundir.checkpoint import load_checkpoint
from mannlab.training import train
from mannlab.training.run_dir import RunDirLock


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    train(tiny_lstm_run(run, 2, checkpoint_every=1))
    return run


def test_a_checkpoint_replaced_while_read_is_read_again(run, monkeypatch):
    best = run / "checkpoints" / "best"
    meta, state = load_checkpoint(best)
    _, _, newer, _ = load_run(run)
    with torch.no_grad():
        for p in newer.parameters():
            p.add_(1.0)
    real, calls = load_module.load_weights, []

    def swapped_after_read(path, model):
        real(path, model)  # the old weights read; then a training saves a new best
        calls.append(path)
        if len(calls) == 1:
            save_checkpoint(best, newer, {**meta, "step": 99}, state)

    monkeypatch.setattr(load_module, "load_weights", swapped_after_read)
    _, _, model, read_meta = load_run(run)
    assert len(calls) == 2 and read_meta["step"] == 99
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), newer.state_dict().values()))


def test_a_checkpoint_moved_aside_mid_read_is_read_from_its_copy(run, monkeypatch):
    best = run / "checkpoints" / "best"
    old = best.parent / ".best.old"
    real, calls = load_module.load_weights, []

    def moved(path, model):
        calls.append(path)
        if len(calls) == 1:  # a save's first rename: the checkpoint is now the complete old copy
            os.rename(best, old)
        real(path, model)

    monkeypatch.setattr(load_module, "load_weights", moved)
    _, _, _, meta = load_run(run)
    assert len(calls) == 2 and calls[1].parent == old and meta["step"] == 2
    shutil.rmtree(old)


def test_resume_of_a_directory_in_use_before_its_config_is_written(tmp_path, capsys):
    run = tmp_path / "run"
    with RunDirLock(run) as lock:
        lock.acquire()  # a training that has not written config.toml yet
        assert RunDirLock.held(run) == str(os.getpid())
        with pytest.raises(SystemExit) as exit_info:
            main(["train", "--run-dir", str(run), "--resume"])
    assert exit_info.value.code == 2
    assert f"is in use: another training (process {os.getpid()})" in capsys.readouterr().err
    assert RunDirLock.held(run) is None and RunDirLock.held(tmp_path / "nowhere") is None
    with pytest.raises(SystemExit):  # free again: the config's absence is the error
        main(["train", "--run-dir", str(run), "--resume"])
    assert "its config.toml is missing" in capsys.readouterr().err
