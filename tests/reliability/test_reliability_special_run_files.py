"""Special files in a run directory and among data files, as the special-file fuzz cases
(reliability/fuzz_files.py) found them: each is refused at once, saying what it is, where it
used to hang (a FIFO or a device read as summary.json or metrics.jsonl), fail with a bare
OSError (a lock file that is a FIFO or a directory, a metrics.jsonl that is a directory),
run out of memory (a huge sparse summary.json or checkpoint file read whole), call a FIFO
"missing", or take a damaged run for one never started and train it again from scratch."""

import os
import shutil
from pathlib import Path

import pytest

from conftest import tiny_lstm_run
from fuzzing import no_hang
from mannlab.cli import main
from mannlab.data import babi, download
from mannlab.errors import CheckpointError, ConfigError, DataError
from mannlab.file_kinds import file_problem, kind_of
from mannlab.loading import load_run
from mannlab.rundir import checkpoint, load_checkpoint, read_metrics, sums
from mannlab.rundir.files import read_json
from mannlab.training import train


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-step run (checkpoints best and last), copied by each test."""
    from mannlab.training import loop

    saved, loop._Trainer._figures = loop._Trainer._figures, lambda self: {}
    try:
        run = tmp_path_factory.mktemp("finished") / "run"
        train(tiny_lstm_run(run, 2, checkpoint_every=1))
    finally:
        loop._Trainer._figures = saved
    return run


@pytest.fixture
def run(finished, tmp_path):
    return Path(shutil.copytree(finished, tmp_path / "run", symlinks=True))


def fifo_at(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def test_kinds_are_named(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "dangling").symlink_to("nowhere")
    assert kind_of(tmp_path / "fifo") == "a FIFO"
    assert kind_of(tmp_path / "loop") == "a symbolic link loop"
    assert kind_of(tmp_path / "dangling") == "a symbolic link to nowhere, which does not exist"
    assert kind_of(tmp_path) == "a directory"
    assert kind_of(tmp_path / "missing") == "missing"
    if Path("/dev/null").exists():
        assert kind_of("/dev/null") == "a device"
    assert file_problem(tmp_path / "fifo") == f"{tmp_path / 'fifo'} is a FIFO, not a regular file"


def test_json_and_metrics_that_are_fifos_are_refused_without_waiting(tmp_path):
    with no_hang(20):
        with pytest.raises(DataError, match="summary.json is a FIFO, not a regular file"):
            read_json(fifo_at(tmp_path / "summary.json"))
        with pytest.raises(DataError, match="metrics.jsonl is a FIFO, not a regular file"):
            read_metrics(fifo_at(tmp_path / "metrics.jsonl"))
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(DataError, match="dir.jsonl is a directory, not a regular file"):
        read_metrics(tmp_path / "dir.jsonl")
    with pytest.raises(FileNotFoundError):  # nothing there: as before
        read_json(tmp_path / "missing.json")


def test_eval_and_resume_do_not_wait_on_a_fifo_summary(run):
    fifo_at(run / "summary.json")
    with no_hang(60):
        load_run(run)  # the summary is read only for a warning
        summary = train(tiny_lstm_run(run, 3, checkpoint_every=1), resume=True)
    assert summary["steps"] == 3 and (run / "summary.json").is_file()  # replaced by the run's


def test_a_huge_sparse_summary_is_refused_unread(run):
    with (run / "summary.json").open("wb") as fh:
        fh.truncate(1 << 40)  # a terabyte of holes: reading it whole would never fit
    with pytest.raises(DataError, match=r"summary.json is larger than 67,108,864 bytes"):
        read_json(run / "summary.json")


def test_checkpoint_files_that_are_not_files_are_named(run):
    last = run / "checkpoints" / "last"
    fifo_at(last / "weights.safetensors")
    with (
        no_hang(20),
        pytest.raises(CheckpointError, match="weights.safetensors is a FIFO, not a regular file"),
    ):
        load_checkpoint(last)
    fifo_at(last / "sha256.json")
    (last / "weights.safetensors").unlink()
    shutil.copy(run / "checkpoints" / "best" / "weights.safetensors", last / "weights.safetensors")
    with no_hang(20), pytest.raises(CheckpointError, match="sha256.json is a FIFO, not a regular file"):
        load_checkpoint(last)


def test_checkpoint_files_past_the_limit_are_refused_unread(run, monkeypatch):
    monkeypatch.setattr(checkpoint, "MAX_FILE_BYTES", 16)
    with pytest.raises(CheckpointError, match=r"weights.safetensors is larger than 16 bytes"):
        load_checkpoint(run / "checkpoints" / "last")
    monkeypatch.setattr(sums, "MAX_FILE_BYTES", 16)
    with pytest.raises(CheckpointError, match=r"is larger than 16 bytes"):
        sums.sha256(run / "checkpoints" / "last" / "weights.safetensors")


def test_a_dangling_last_checkpoint_is_not_a_run_to_start_again(run):
    last = run / "checkpoints" / "last"
    shutil.rmtree(last)
    last.symlink_to("/nonexistent/last")
    rows = read_metrics(run / "metrics.jsonl")
    with pytest.raises(
        CheckpointError, match="last is a symbolic link to /nonexistent/last, which does not exist"
    ):
        train(tiny_lstm_run(run, 3), resume=True)
    assert read_metrics(run / "metrics.jsonl") == rows  # nothing was deleted or trained again
    assert (run / "checkpoints" / "best").is_dir()


def test_checkpoints_that_are_not_a_directory_are_not_a_run_to_start_again(run):
    shutil.rmtree(run / "checkpoints")
    fifo_at(run / "checkpoints")
    with no_hang(60), pytest.raises(CheckpointError, match="checkpoints is a FIFO, not a directory"):
        train(tiny_lstm_run(run, 3), resume=True)
    assert (run / "summary.json").is_file()
    with pytest.raises(CheckpointError, match="checkpoints is a FIFO, not a directory"):
        load_run(run)


def test_a_summary_directory_is_refused_before_training(run):
    (run / "summary.json").unlink()
    (run / "summary.json").mkdir()
    rows = read_metrics(run / "metrics.jsonl")
    with pytest.raises(ConfigError, match="summary.json is a directory.*the run replaces this file"):
        train(tiny_lstm_run(run, 3), resume=True)
    assert read_metrics(run / "metrics.jsonl") == rows


@pytest.mark.parametrize("make", ["fifo", "directory"])
def test_a_lock_file_that_is_not_a_file(run, make):
    lock = run / ".lock"
    lock.unlink()
    fifo_at(lock) if make == "fifo" else lock.mkdir()
    kind = "a FIFO" if make == "fifo" else "a directory"
    with (
        no_hang(60),
        pytest.raises(ConfigError, match=f"the lock file of run directory .*: .*.lock is {kind}"),
    ):
        train(tiny_lstm_run(run, 3), resume=True)


def test_the_cli_names_special_run_files(run, finished, capsys):
    fifo_at(run / "config.toml")
    with no_hang(60), pytest.raises(SystemExit):
        main(["train", "--run-dir", str(run), "--resume"])
    assert "config.toml is a FIFO, not a regular file" in capsys.readouterr().err  # not "missing"
    (run / "config.toml").unlink()
    shutil.copy(finished / "config.toml", run / "config.toml")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()
    with pytest.raises(SystemExit):
        main(["plot", str(run)])
    assert "metrics.jsonl is a directory, not a regular file" in capsys.readouterr().err


def test_a_recipe_path_that_is_a_fifo(tmp_path, capsys):
    recipe = fifo_at(tmp_path / "recipe.toml")
    with no_hang(30), pytest.raises(SystemExit):
        main(["run", str(recipe)])
    assert "recipe.toml is a FIFO, not a regular file" in capsys.readouterr().err


def test_data_files_in_a_directory_that_are_not_files(tmp_path, offline):
    folder = tmp_path / "tasks_1-20_v1-2" / "en"
    folder.mkdir(parents=True)
    (folder / "qa1_single-supporting-fact_test.txt").write_text("1 A b.\n2 Where is A? \tb\t1\n")
    fifo_at(folder / "qa1_single-supporting-fact_train.txt")
    with no_hang(30), pytest.raises(DataError, match="qa1_single-supporting-fact_train.txt is a FIFO"):
        babi.load_babi([1], "en", str(tmp_path))  # was: "has no en file for bAbI task 1"
    (folder / "qa1_single-supporting-fact_train.txt").unlink()
    (folder / "qa1_single-supporting-fact_train.txt").symlink_to("gone.txt")
    with pytest.raises(DataError, match="is a symbolic link to gone.txt, which does not exist"):
        babi.load_babi([1], "en", str(tmp_path))


def test_a_data_file_that_is_a_broken_link_is_not_missing(tmp_path, offline):
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").symlink_to("train-images-idx3-ubyte.gz")
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz is a symbolic link loop") as info:
        download.locate("mnist", download.RemoteFile("https://x/train-images-idx3-ubyte.gz"), tmp_path)
    assert not isinstance(info.value, download.MissingData)


def test_a_file_without_read_permission_is_named(tmp_path, monkeypatch):
    """As root every file is readable, so the refusal is simulated where the file is opened."""
    path = tmp_path / "summary.json"
    path.write_text("{}")
    real_open = os.open

    def refuse(name, *args, **kwargs):
        if Path(name) == path:
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(DataError, match="summary.json cannot be read \\(permission denied\\)"):
        read_json(path)
