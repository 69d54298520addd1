"""A symbolic link planted where mannlab writes never redirects the write: at every name a run
(or mannlab.save, or the compile cache) writes, a link to a file outside is refused in one
line naming the link, and the file outside is left as it was."""

import os
from pathlib import Path

import pytest
import torch

import mannlab
from conftest import tiny_lstm_run
from mannlab.cli import main
from mannlab.errors import CheckpointError, ConfigError
from mannlab.ops import numba_cache
from mannlab.rundir import write_atomic
from mannlab.rundir.checkpoint import save_checkpoint
from mannlab.rundir.loggers import CsvLogger, _wandb_id
from mannlab.rundir.metrics_log import MetricsLog
from mannlab.safe_writes import make_directory, open_for_writing
from mannlab.training import train
from mannlab.training.run_dir import LOCK, RunDirLock

PRECIOUS = b"a file of the user's, outside the run directory\n"
LINK = "refusing to write through .*: it is a symbolic link to .*precious"


@pytest.fixture
def precious(tmp_path) -> Path:
    path = tmp_path / "precious"
    path.write_bytes(PRECIOUS)
    return path


@pytest.fixture
def precious_dir(tmp_path) -> Path:
    path = tmp_path / "precious-dir"
    path.mkdir()
    (path / "keep").write_bytes(PRECIOUS)
    return path


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def untouched(precious: Path) -> bool:
    if precious.is_dir():
        return sorted(p.name for p in precious.iterdir()) == ["keep"] and untouched(precious / "keep")
    return precious.read_bytes() == PRECIOUS


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


def test_the_run_directory_lock(tmp_path, precious, capsys):
    run = tmp_path / "run"
    plant(run / LOCK, precious)
    with pytest.raises(ConfigError, match=LINK):
        RunDirLock(run).acquire()
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "train",
                "--model",
                "lstm",
                "--task",
                "copy",
                "--steps",
                "1",
                "--no-progress",
                "--run-dir",
                str(run),
            ]
        )
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "symbolic link" in errors[0] and ".lock" in errors[0]
    assert untouched(precious)


def test_the_lock_probe_takes_no_lock_through_a_link(tmp_path, precious):
    plant(tmp_path / "run" / LOCK, precious)
    assert RunDirLock.held(tmp_path / "run") is None


@pytest.mark.parametrize("name", ["config.toml", ".config.toml.tmp"])
def test_atomic_writes_at_the_file_and_at_its_temporary_name(tmp_path, precious, name):
    """config.toml, summary.json, summary.md, sha256.json, eval files, figures: write_atomic."""
    plant(tmp_path / "run" / name, precious)
    with pytest.raises(ConfigError, match=LINK):
        write_atomic(tmp_path / "run" / "config.toml", "x = 1\n")
    assert untouched(precious) and os.path.islink(tmp_path / "run" / name)


@pytest.mark.parametrize("where", ["checkpoints", "checkpoints/.last.tmp"])
def test_checkpoints(tmp_path, precious_dir, where):
    run = tmp_path / "run"
    plant(run / where, precious_dir)
    with pytest.raises(CheckpointError, match="refusing to write through .*: it is a symbolic link"):
        save_checkpoint(run / "checkpoints" / "last", torch.nn.Linear(2, 2), {"step": 1}, {"step": 1})
    assert untouched(precious_dir)


def test_a_link_at_the_checkpoint_itself_is_replaced_not_written_through(tmp_path, precious_dir):
    last = plant(tmp_path / "checkpoints" / "last", precious_dir)
    save_checkpoint(last, torch.nn.Linear(2, 2), {"step": 1}, {"step": 1})
    assert not last.is_symlink() and (last / "weights.safetensors").is_file()
    assert untouched(precious_dir)


def test_a_checkpoint_is_written_whole_as_before(tmp_path):
    from mannlab.rundir import load_checkpoint

    model = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path / "last", model, {"step": 1}, {"step": 1})
    save_checkpoint(tmp_path / "last", model, {"step": 2}, {"step": 2})
    assert load_checkpoint(tmp_path / "last", torch.nn.Linear(2, 2)) == ({"step": 2}, {"step": 2})
    mode = (tmp_path / "last" / "weights.safetensors").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_the_metrics_log(tmp_path, precious):
    plant(tmp_path / "metrics.jsonl", precious)
    with pytest.raises(ConfigError, match=LINK):
        MetricsLog(tmp_path / "metrics.jsonl")
    assert untouched(precious)


def test_the_metrics_log_refuses_a_link_to_nowhere_as_a_link(tmp_path):
    plant(tmp_path / "metrics.jsonl", tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="symbolic link to .*nowhere \\(which does not exist\\)"):
        MetricsLog(tmp_path / "metrics.jsonl")
    assert not (tmp_path / "nowhere").exists()


def test_the_csv_logger(tmp_path, precious):
    plant(tmp_path / "metrics.csv", precious)
    with pytest.raises(ConfigError, match=LINK):
        CsvLogger(tmp_path / "metrics.csv")
    assert untouched(precious)


def test_the_wandb_run_id(tmp_path, precious, precious_dir):
    plant(tmp_path / "a" / "wandb", precious_dir)
    with pytest.raises(ConfigError, match="refusing to write through .*wandb: it is a symbolic link"):
        _wandb_id(tmp_path / "a")
    plant(tmp_path / "b" / "wandb" / "run_id", precious)
    with pytest.raises(ConfigError, match=LINK):  # not read either: its start would go to wandb
        _wandb_id(tmp_path / "b")
    assert untouched(precious) and untouched(precious_dir)


def test_directories_mannlab_names(tmp_path, precious_dir):
    """tensorboard/, wandb/, figures/, checkpoints/ inside a run directory."""
    plant(tmp_path / "run" / "tensorboard", precious_dir)
    with pytest.raises(ConfigError, match="symbolic link to .*precious-dir \\(a directory\\)"):
        make_directory(tmp_path / "run" / "tensorboard")
    assert make_directory(tmp_path / "run" / "figures").is_dir()


def test_a_fifo_and_a_device_are_named(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ConfigError, match="fifo is a FIFO, not a regular file"):
        open_for_writing(tmp_path / "fifo", "a")  # no reader: never waits for one


def test_plot_into_a_planted_figures_directory(tmp_path, precious_dir, capsys):
    run = tmp_path / "run"
    train(tiny_lstm_run(run))
    plant(run / "figures", precious_dir)
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(run), "--length", "2"])
    assert exit_info.value.code == 2
    assert "figures: it is a symbolic link" in capsys.readouterr().err
    assert untouched(precious_dir)


def test_a_resume_through_a_planted_config(tmp_path, precious):
    run = tmp_path / "run"
    train(tiny_lstm_run(run))
    (run / "config.toml").unlink()
    plant(run / "config.toml", precious)
    with pytest.raises(ConfigError, match=LINK):
        train(tiny_lstm_run(run, steps=3), resume=True)
    assert untouched(precious)


def test_mannlab_save(tmp_path, precious):
    plant(tmp_path / "saved" / "model.safetensors", precious)
    model = mannlab.LSTM(input_size=2, output_size=2, hidden_size=4)
    with pytest.raises(ConfigError, match=LINK):
        mannlab.save(model, tmp_path / "saved")
    assert untouched(precious)


def test_the_compile_cache_lock(tmp_path, precious, monkeypatch):
    from mannlab.ops import dispatch

    kernels = dispatch.load("armin")
    monkeypatch.setattr(numba_cache, "cache_directory", lambda module: str(tmp_path))
    plant(tmp_path / f"{kernels.__name__}.lock", precious)
    with pytest.raises(ConfigError, match=LINK):
        with numba_cache.compile_lock(kernels):
            pass
    assert untouched(precious)


def test_the_compile_cache_lock_in_a_read_only_cache(tmp_path, monkeypatch):
    """Nowhere to put the lock file: the compile goes on unshared."""
    from mannlab.ops import dispatch

    monkeypatch.setattr(numba_cache, "cache_directory", lambda module: str(tmp_path / "missing"))
    with numba_cache.compile_lock(dispatch.load("armin"), blocking=False) as held:
        assert held
