"""Messages that say what is wrong with a run's files: a train_state whose step is not one of
the run's, optimizer state of the wrong shape, a symbolic link as checkpoints/last, a disk that
fills up inside torch.save."""

import errno
import shutil
from pathlib import Path

import pytest
import torch

from conftest import tiny_lstm_run
from mannlab.config import RunConfig
from mannlab.errors import CheckpointError
from mannlab.rundir import checkpoint
from mannlab.training import train


def tiny(run_dir: Path, steps: int = 2) -> RunConfig:
    return tiny_lstm_run(run_dir, steps, val_length_multiples=(1,), checkpoint_every=1)


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


def rewrite_train_state(run: Path, change) -> None:
    last = run / "checkpoints" / "last"
    state = torch.load(last / "train_state.pt", weights_only=False)
    change(state)
    torch.save(state, last / "train_state.pt")
    (last / "sha256.json").unlink()
    checkpoint.seal_checkpoint(last)


@pytest.mark.parametrize("step", [-5, 10**12, "3", 2.0])
def test_a_saved_step_that_is_not_the_runs_is_named(tmp_path, step):
    run = tmp_path / "run"
    train(tiny(run))
    rewrite_train_state(run, lambda state: state.update(step=step))
    with pytest.raises(CheckpointError, match=r"its step .* is not a step of this run .*train.steps = 3"):
        train(tiny(run, steps=3), resume=True)


def test_optimizer_state_of_the_wrong_shape_fails_on_load(tmp_path):
    run = tmp_path / "run"
    train(tiny(run))

    def shrink(state):  # the first moment, buffer or average of the first parameter
        first = state["optimizer"]["state"][0]
        key = next(k for k, v in first.items() if isinstance(v, torch.Tensor) and v.dim() > 0)
        first[key] = first[key].flatten()[:3].clone()

    rewrite_train_state(run, shrink)
    with pytest.raises(CheckpointError, match=r"optimizer state '\w+' of parameter .* has shape \(3,\)"):
        train(tiny(run, steps=3), resume=True)


def test_a_symlink_as_checkpoints_last_is_replaced_not_followed(tmp_path):
    run = tmp_path / "run"
    train(tiny(run))
    elsewhere = tmp_path / "kept"
    shutil.move(run / "checkpoints" / "last", elsewhere)
    (run / "checkpoints" / "last").symlink_to(elsewhere, target_is_directory=True)
    train(tiny(run, steps=3), resume=True)
    assert not (run / "checkpoints" / "last").is_symlink()
    assert (elsewhere / "train_state.pt").is_file()  # the link's target is left alone
    train(tiny(run, steps=3), force=True)  # --force over a run whose checkpoints hold a link


def test_disk_full_inside_torch_save_says_so(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing")

    model = torch.nn.Linear(2, 2)
    monkeypatch.setattr(checkpoint.torch, "save", full)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: usage._replace(free=4096))
    with pytest.raises(CheckpointError, match=r"no space left on the device \(ENOSPC, 4096 bytes free\)"):
        checkpoint.save_checkpoint(tmp_path / "ck", model, {}, {})
    assert not (tmp_path / ".ck.tmp").exists()

    def enospc(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", enospc)
    with pytest.raises(CheckpointError, match="ENOSPC"):
        checkpoint.save_checkpoint(tmp_path / "ck", model, {}, {})
