"""The command line's shortcuts and listings: recipes wrapped to the terminal and told apart,
--threads, --max-minutes and --print-config, the models in --help, one spelling per task, no
announcement before an existing run is refused, no progress bar into a log file."""

import io
import tomllib

import pytest

from conftest import tiny_ntm_args
from mannlab.cli import main
from mannlab.cli.recipes import short
from mannlab.errors import DataError
from mannlab.reporting.figures import learning_curve
from mannlab.training.bar import WarmupBar


def test_recipes_fit_the_terminal_and_are_told_apart(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) < 90
    entries = {}
    for line in out.splitlines():
        if line and not line[0].isspace() and not line[0].isdigit():
            name = line.split()[0]
            entries[name] = line[len(name) :]
        elif line.startswith(" ") and entries:
            entries[name] += line
    texts = {name: " ".join(text.split()) for name, text in entries.items()}
    assert texts["table2/dnc-copy"] != texts["table2/dnc-copy-batched"]
    assert "DNC on copy" in texts["table2/dnc-copy"] and "batch_size = 16" in texts["table2/dnc-copy-batched"]
    for text in texts.values():
        assert text.count("(") == text.count(")"), text  # nothing cut inside parentheses


def test_a_long_description_is_cut_at_a_clause_outside_parentheses():
    sentence = "A model (with a long aside, and more) on copy: " + "words " * 40
    cut = short(sentence, limit=60)
    assert cut == "A model on copy ..."  # the aside goes first, then the clauses that do not fit
    assert short("short (eqs. 18-19).") == "short (eqs. 18-19)."


def test_shortcut_flags_and_print_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--model", "lstm", "--task", "repeat-copy", "--threads", "2", "--max-minutes", "1.5"]
    assert main([*argv, "--print-config"]) == 0
    config = tomllib.loads(capsys.readouterr().out)
    assert config["task"]["name"] == "repeat_copy" and config["run_dir"].endswith("lstm-repeat_copy-seed0")
    assert config["train"]["threads"] == 2 and config["train"]["max_minutes"] == 1.5
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written
    assert main(["run", "ntm-copy-lstm", "--max-minutes", "3", "--print-config"]) == 0
    config = tomllib.loads(capsys.readouterr().out)
    assert config["train"]["max_minutes"] == 3 and config["seeds"] == [0, 1, 2]


def test_help_lists_the_models(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "model name: armin, dnc, dntm, gru, lstm, ntm, tardis" in out
    assert "repeat-copy is repeat_copy" in out


def test_an_existing_run_is_refused_before_training_is_announced(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *tiny_ntm_args(val_every=2), "--steps", "2", "--run-dir", "run"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(["train", *tiny_ntm_args(val_every=2), "--steps", "2", "--run-dir", "run"])
    said = capsys.readouterr()
    assert stopped.value.code == 2 and "already holds a run" in said.err
    assert "training" not in said.out


def test_no_progress_bar_into_a_file():
    log = io.StringIO()  # not a terminal, as stderr redirected to a file
    bar = WarmupBar(total=10, file=log)
    for _ in range(10):
        bar.update()
    bar.close()
    assert log.getvalue() == ""


def test_a_run_stopped_before_its_first_validation_says_so(tmp_path):
    rows = [{"step": 1, "split": "train", "loss": 1.0}, {"step": 1, "split": "test", "bpc": 2.0}]
    with pytest.raises(
        DataError, match="no 'bpc' curve to draw: the run stopped before its first validation"
    ):
        learning_curve(rows, metric="bpc")
