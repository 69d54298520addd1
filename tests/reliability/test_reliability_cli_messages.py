"""CLI messages that say what was wrong: a run directory without its config.toml under
--resume, and an absurdly long value (a pasted file as a model name) cut, not echoed whole."""

import pytest

from mannlab.cli import main, shortened


def test_resume_without_config_toml_says_the_file_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit):
        main(["train", "--run-dir", "run", "--resume"])
    err = capsys.readouterr().err
    assert "config.toml is missing" in err and "--model and --task" in err


def test_a_huge_model_name_is_cut_in_the_message(capsys):
    name = "x" * 5_000_000
    with pytest.raises(SystemExit):
        main(["train", "--model", name, "--task", "copy", "--no-progress"])
    err = capsys.readouterr().err
    assert "unknown model" in err and "characters cut" in err and len(err) < 3000


def test_shortened_keeps_short_messages_whole():
    assert shortened("fine") == "fine"
    cut = shortened("a" * 100 + "b" * 100, limit=40)
    assert cut.startswith("a" * 30) and cut.endswith("b" * 10) and "characters cut" in cut
