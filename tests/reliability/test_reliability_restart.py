"""A run killed before its first checkpoint: --resume starts it again (there is nothing to
continue) and a new run without --force says to pass --resume or --force, instead of each
sending the user to the other."""

from pathlib import Path

import pytest

from conftest import tiny_lstm_run
from mannlab.config import RunConfig
from mannlab.errors import CheckpointError, ConfigError
from mannlab.rundir import read_metrics
from mannlab.training import train


def tiny(run_dir: Path, steps: int = 2) -> RunConfig:
    return tiny_lstm_run(run_dir, steps)


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


def killed_before_checkpoint(run: Path) -> None:
    """What a run killed during its first steps leaves: config.toml and some metric rows."""
    train(tiny(run))
    for path in sorted((run / "checkpoints").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (run / "checkpoints").rmdir()
    (run / "summary.json").unlink()


def test_resume_starts_a_run_without_checkpoint_again(tmp_path, capsys):
    run = tmp_path / "run"
    killed_before_checkpoint(run)
    summary = train(tiny(run), resume=True)
    assert summary["steps"] == 2 and summary["stopped_by"] == "steps"
    assert "stopped before its first checkpoint" in capsys.readouterr().err
    rows = [(r["step"], r["multiple"]) for r in read_metrics(run / "metrics.jsonl") if r["split"] == "val"]
    assert len(rows) == len(set(rows)) == 6  # two validations at three lengths: the old rows are gone


def test_a_new_run_names_both_ways_out(tmp_path):
    run = tmp_path / "run"
    killed_before_checkpoint(run)
    with pytest.raises(ConfigError, match="stopped before its first checkpoint .* pass --resume or --force"):
        train(tiny(run))
    assert train(tiny(run), force=True)["steps"] == 2


def test_resume_of_an_empty_directory_says_there_is_no_run(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(CheckpointError, match="holds no run; start one without --resume"):
        train(tiny(tmp_path / "run"), resume=True)
