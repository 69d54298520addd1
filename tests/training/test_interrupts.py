"""Ctrl-C is an interruption wherever it lands: between steps, or inside a compiled numba kernel
(where Python reports it as "SystemError: CPUDispatcher(...) returned a result with an
exception set"). Either way the training stops with "interrupted; continue a run with
--resume", exit status 130, its lock released and its last checkpoint resumable."""

import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from conftest import tiny_lstm_run
from mannlab.cli import main
from mannlab.rundir import load_checkpoint
from mannlab.training import loop, train
from mannlab.training.interrupts import caused_by_interrupt
from mannlab.training.run_dir import RunDirLock


def kernel_interrupt() -> SystemError:
    """What Python raises when SIGINT arrives while a numba kernel runs."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise SystemError(
                "CPUDispatcher(<function sequence_forward>) returned a result with an exception set"
            ) from interrupt
    except SystemError as error:
        return error


def test_which_errors_are_interrupts():
    assert caused_by_interrupt(kernel_interrupt())
    assert caused_by_interrupt(KeyboardInterrupt())
    assert not caused_by_interrupt(SystemError("a real internal error"))
    assert not caused_by_interrupt(RuntimeError("x"))


@pytest.fixture
def interrupted_at_step_3(monkeypatch, no_figures):
    step = loop._Trainer._train_step

    def interrupted(self, number):
        if number == 3:
            raise kernel_interrupt()
        return step(self, number)

    monkeypatch.setattr(loop._Trainer, "_train_step", interrupted)


def test_train_raises_keyboard_interrupt_and_the_run_resumes(tmp_path, interrupted_at_step_3, monkeypatch):
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(tiny_lstm_run(run, steps=5, checkpoint_every=2))
    assert RunDirLock.held(run) is None
    assert load_checkpoint(run / "checkpoints" / "last")[1]["step"] == 2
    monkeypatch.undo()
    assert train(tiny_lstm_run(run, steps=5, checkpoint_every=2, progress=False), resume=True)["steps"] == 5


def test_the_cli_says_interrupted_with_status_130(tmp_path, interrupted_at_step_3, capsys):
    argv = ["train", "--model", "lstm", "--task", "copy", "--steps", "5", "--no-progress"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--set", "task.max_length=2", "--run-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 130
    err = capsys.readouterr().err
    assert "interrupted; continue a run with --resume" in err and "SystemError" not in err


def test_sigint_while_a_kernel_runs(tmp_path):
    """A real SIGINT to a training of the NTM (its numba kernels are most of each step's time)
    once its first checkpoint is written: about one time in three it lands inside a kernel and
    Python raises the SystemError, else a KeyboardInterrupt between calls. A few seconds on an
    idle machine, most of them the subprocess importing torch."""
    pytest.importorskip("numba")
    from mannlab.models.warm_up import warm_up

    warm_up(dtypes=(torch.float32,), families=["ntm"])  # the subprocess loads them from disk
    run = tmp_path / "run"
    sizes = ["task.min_length=40", "task.max_length=40", "train.batch_size=4", "train.checkpoint_every=1"]
    quiet = ["train.val_every=100000", "train.diverge_patience=0"]  # no validation: steps only
    process = subprocess.Popen(
        [sys.executable, "-m", "mannlab", "train", "--model", "ntm", "--task", "copy", "--steps", "100000"]
        + [arg for value in sizes + quiet for arg in ("--set", value)]
        + ["--no-progress", "--run-dir", str(run)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run / "checkpoints" / "last").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # into the next step's kernels
        process.send_signal(signal.SIGINT)
        err = process.communicate(timeout=60)[1]
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted; continue a run with --resume" in err and "SystemError" not in err
    assert RunDirLock.held(run) is None
    assert load_checkpoint(run / "checkpoints" / "last")[1]["step"] >= 1


def test_an_interruption_before_the_first_checkpoint_says_how_to_start_again(monkeypatch, capsys):
    # nothing may be on disk to resume from yet: the message also gives the command that starts it again
    from mannlab import cli

    argv = ["train", "--model", "lstm", "--task", "copy", "--run-dir", "my run"]
    args = cli.build_parser().parse_args(argv)

    def interrupted(_args):
        raise KeyboardInterrupt

    args.func = interrupted
    monkeypatch.setattr(cli, "build_parser", lambda: SimpleNamespace(parse_args=lambda argv: args))
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 130
    err = capsys.readouterr().err
    assert "continue a run with --resume" in err
    assert "start it again: mannlab train --model lstm --task copy --run-dir 'my run'" in err
