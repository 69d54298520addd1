"""What `mannlab eval`, mannlab.load and `mannlab train --resume` say about a run directory
whose files were changed, or that is not what the command needs: a meta.json field of the
wrong kind, weights of another dtype, a config.toml edited after training (refused naming the
keys, or warned where only the evaluation changes), a run directory that does not exist or
cannot be written."""

import errno
import json
import logging
import os
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

import mannlab
from conftest import tiny_lstm_run
from mannlab.cli import main
from mannlab.errors import CheckpointError, ConfigError
from mannlab.rundir import checkpoint
from mannlab.rundir.sums import SUMS
from mannlab.training import train
from mannlab.training.run_dir import RunDirLock


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    train(tiny_lstm_run(run, 2, val_length_multiples=(1,), checkpoint_every=1))
    return run


def reseal(directory: Path) -> None:
    (directory / SUMS).unlink()
    checkpoint.seal_checkpoint(directory)


def change_meta(run: Path, change) -> None:
    for kind in ("best", "last"):
        path = run / "checkpoints" / kind / "meta.json"
        meta = json.loads(path.read_text())
        change(meta)
        path.write_text(json.dumps(meta))
        reseal(path.parent)


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda m: m.update(step="abc"), "its step must be a count of steps"),
        (lambda m: m.update(kind=5), "its kind must be 'best' or 'last'"),
        (lambda m: m.update(model=["lstm"]), "its model must be a string"),
        (lambda m: m.update(config=5), "its config must be a run config"),
        (lambda m: m["config"].update(model=5), "recorded run config is not valid"),
        (lambda m: m.update(model="ntm"), "its model is 'ntm' but its recorded config's is 'lstm'"),
    ],
)
def test_a_meta_field_of_the_wrong_kind_is_refused(run, change, expected):
    change_meta(run, change)
    with pytest.raises(CheckpointError, match=expected):
        mannlab.load(run)


def test_run_weights_of_another_dtype_are_refused(run):
    for kind in ("best", "last"):
        path = run / "checkpoints" / kind / "weights.safetensors"
        save_file({k: v.double() for k, v in load_file(str(path)).items()}, str(path))
        reseal(path.parent)
    with pytest.raises(CheckpointError, match="dtype mismatch .*float64 vs model float32"):
        mannlab.load(run)


def fails(args: list[str]) -> None:
    """The command ends with a user error (exit status 2)."""
    with pytest.raises(SystemExit) as caught:
        main(args)
    assert caught.value.code == 2


def edit_config(run: Path, old: str, new: str) -> None:
    path = run / "config.toml"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))


def test_a_run_is_evaluated_as_it_was_trained(run, capsys):
    edit_config(run, 'name = "copy"', 'name = "reverse"')
    with pytest.raises(ConfigError, match=r"task: 'reverse' in config.toml, 'copy' recorded"):
        mannlab.load(run)
    fails(["eval", str(run), "--batches", "1"])
    assert "differs from the config recorded with its best checkpoint in task" in capsys.readouterr().err
    # a deliberate change, as an override, is the user's
    edit_config(run, 'name = "reverse"', 'name = "copy"')
    assert mannlab.load(run, overrides=["task.name=reverse"]).config.task == "reverse"
    edit_config(run, "hidden_size = 4", "hidden_size = 5")
    with pytest.raises(ConfigError, match=r"model.hidden_size: 5 in config.toml, 4 recorded"):
        mannlab.load(run)


def test_a_change_of_the_evaluation_lengths_only_warns(run, caplog):
    edit_config(run, "max_length = 2", "max_length = 3")
    edit_config(run, "val_length_multiples = [\n    1,\n]", "val_length_multiples = [1, 2]")
    with caplog.at_level(logging.WARNING, logger="mannlab"):
        assert not mannlab.load(run).training
    assert "task.max_length: 3 in config.toml, 2 recorded" in caplog.text
    assert "train.val_length_multiples: [1, 2] in config.toml, [1] recorded" in caplog.text


def test_resume_of_a_missing_run_directory_says_it_does_not_exist(tmp_path, capsys):
    fails(["train", "--run-dir", str(tmp_path / "missing"), "--resume"])
    err = capsys.readouterr().err
    assert "the directory does not exist" in err and "without --resume" in err
    assert "--run-dir DIR --resume" not in err


def test_a_read_only_run_directory_is_called_read_only(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    real_open = os.open

    def read_only_open(path, flags, *args):
        if str(path).endswith(".lock") and flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only_open)
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != run)
    with pytest.raises(ConfigError, match="is read-only .* Copy the run to a writable directory") as caught:
        RunDirLock(run).acquire()
    assert "remove it" not in str(caught.value)


def test_a_long_evaluation_shows_its_progress(run, capsys, monkeypatch):
    from mannlab.evaluation import lengths

    monkeypatch.setattr(lengths, "PROGRESS_STEPS", 10)
    assert main(["eval", str(run), "--lengths", "2,40", "--batches", "2"]) == 0
    assert "evaluating at lengths up to 40" in capsys.readouterr().err


def test_a_tampered_run_is_one_line_in_eval(run, capsys):
    change_meta(run, lambda m: m.update(step="abc"))
    fails(["eval", str(run)])
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "meta.json: its step must be" in err
