"""One writer per run directory: a second training of a directory that a running training
holds fails at once with a clear message (not two writers, one logging into a deleted file);
the lock is the OS's, so a killed training leaves nothing that blocks the resume."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_lstm_run
from mannlab.cli import main
from mannlab.config import RunConfig
from mannlab.errors import ConfigError
from mannlab.training import train
from mannlab.training.run_dir import LOCK, RunDirLock

HOLD = """
import sys, time
from pathlib import Path
from mannlab.training.run_dir import RunDirLock
RunDirLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def tiny(run_dir: Path, steps: int = 2) -> RunConfig:
    return tiny_lstm_run(run_dir, steps)


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/run, as a running training does."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run")], stdout=subprocess.PIPE)
    assert process.stdout.readline().strip() == b"locked"
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_second_writer_is_refused_and_a_kill_frees_the_directory(tmp_path, holder):
    run = tmp_path / "run"
    with pytest.raises(
        ConfigError, match=f"run directory .* is in use: another training \\(process {holder.pid}\\)"
    ):
        train(tiny(run))
    with pytest.raises(ConfigError, match="is in use"):
        train(tiny(run), resume=True)
    assert sorted(p.name for p in run.iterdir()) == [LOCK]  # nothing of a run was written
    os.kill(holder.pid, signal.SIGKILL)  # a crash: no clean-up ran
    holder.wait()
    summary = train(tiny(run))
    assert summary["steps"] == 2
    assert train(tiny(run, steps=3), resume=True)["steps"] == 3


def test_the_cli_says_so_in_one_line(tmp_path, holder, capsys):
    argv = ["train", "--model", "lstm", "--task", "copy", "--steps", "1", "--no-progress"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--run-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "is in use: another training" in errors[0]


def test_the_lock_is_released_after_a_run_and_after_an_error(tmp_path):
    run = tmp_path / "run"
    train(tiny(run))
    with pytest.raises(ConfigError, match="already holds a run"):
        train(tiny(run))  # refused for another reason; the lock is released all the same
    with RunDirLock(run) as lock:  # free again
        lock.acquire()
        with pytest.raises(ConfigError, match="is in use"):
            RunDirLock(run).acquire()  # two holders in one process exclude each other too
