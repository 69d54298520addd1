"""Data sets as torchvision does them: nothing is downloaded unless asked for (``download=True``,
``--download``), a missing data set is an error that says how to get it (online or not), and the
default data directory follows ``$XDG_CACHE_HOME``. Generated files, never the network."""

import dataclasses
import shutil
import tomllib
from pathlib import Path

import pytest

from data_files import write_archive
from mannlab import tasks
from mannlab.cli import main as cli_main
from mannlab.data import babi, download
from mannlab.errors import ConfigError


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A generated bAbI archive served in place of the network; the URLs asked for are kept."""
    archive = write_archive(tmp_path / "served.tar.gz")
    calls = []

    def serve(url, path):
        calls.append(url)
        shutil.copyfile(archive, path)

    monkeypatch.setattr(download, "urlretrieve", serve)
    monkeypatch.setattr(babi, "ARCHIVE", dataclasses.replace(babi.ARCHIVE, size=None))  # a small stand-in
    return calls


def test_a_task_downloads_only_when_asked(tmp_path, served):
    empty = tmp_path / "data"
    with pytest.raises(download.MissingData) as missing:
        tasks.make("babi", tasks=[1], data_dir=str(empty))
    message = str(missing.value)
    assert "--download" in message and "download=True" in message and babi.ARCHIVE.url in message
    assert str(empty / "babi") in message and served == [] and not empty.exists()
    task = tasks.make("babi", tasks=[1], data_dir=str(empty), download=True)
    assert served == [babi.ARCHIVE.url] and (empty / "babi" / babi.ARCHIVE.name).is_file()
    # how the files were got is not part of the experiment: not a parameter, not saved
    assert "download" not in task.params and task.download is True
    assert tasks.make("babi", tasks=[1], data_dir=str(empty)).split_size("test") > 0  # now local


@pytest.mark.parametrize("name", ["babi", "mnist", "ptb-char"])
def test_download_must_be_a_bool(name, tmp_path):
    with pytest.raises(ConfigError, match="task.download must be true or false, got 'yes'"):
        tasks.make(name, data_dir=str(tmp_path), download="yes")


def tiny_recipe(tmp_path: Path) -> Path:
    recipe = tmp_path / "babi-tiny.toml"
    recipe.write_text(
        """seeds = [0]
run_dir = "runs/babi-tiny"
[model]
name = "lstm"
hidden_size = 4
[task]
name = "babi"
tasks = [1]
[train]
batch_size = 2
steps = 2
val_every = 2
val_batch_size = 2
val_batches = 1
progress = false
"""
    )
    return recipe


def test_a_recipe_run_with_download_fetches_and_resumes_without(tmp_path, monkeypatch, served):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    recipe = tiny_recipe(tmp_path)
    assert cli_main(["run", str(recipe), "--data-dir", str(data), "--download"]) == 0
    assert served == [babi.ARCHIVE.url] and (data / "babi" / babi.ARCHIVE.name).is_file()
    run = tmp_path / "runs" / "babi-tiny" / "seed0"
    saved = tomllib.loads((run / "config.toml").read_text())
    assert "download" not in saved["task"] and saved["task"]["data_dir"] == str(data)
    resumed = ["train", "--run-dir", str(run), "--resume", "--steps", "4", "--no-progress"]
    assert cli_main(resumed) == 0 and served == [babi.ARCHIVE.url]  # the local copy, no download
    elsewhere = tmp_path / "elsewhere"  # evaluating on another machine: eval --download
    assert cli_main(["eval", str(run), "--data-dir", str(elsewhere), "--download", "--json"]) == 0
    assert served == [babi.ARCHIVE.url] * 2 and (elsewhere / "babi" / babi.ARCHIVE.name).is_file()


def test_a_missing_data_set_says_how_on_the_command_line(tmp_path, monkeypatch, capsys, served):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["run", str(tiny_recipe(tmp_path)), "--data-dir", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and served == [] and "Traceback" not in err
    assert "pass --download" in err and babi.ARCHIVE.url in err and str(tmp_path / "none" / "babi") in err


def test_offline_download_is_an_error_that_says_where_to_put_the_file(tmp_path, monkeypatch, capsys, offline):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["run", str(tiny_recipe(tmp_path)), "--data-dir", str(tmp_path / "d"), "--download"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert f"could not download {babi.ARCHIVE.url}" in err and "put it at" in err
    assert not list((tmp_path / "d" / "babi").iterdir())  # no partial file left


def test_the_default_data_directory_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("MANNLAB_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert download.data_root() == tmp_path / "home" / ".cache" / "mannlab"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert download.data_root() == tmp_path / "xdg" / "mannlab"
    with pytest.raises(download.MissingData, match=str(tmp_path / "xdg" / "mannlab" / "babi")):
        tasks.make("babi", tasks=[1])
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG rules: a relative path is ignored
    assert download.data_root() == tmp_path / "home" / ".cache" / "mannlab"
    monkeypatch.setenv("MANNLAB_DATA", str(tmp_path / "env"))  # $MANNLAB_DATA and data_dir come first
    assert download.data_root() == tmp_path / "env"
    assert download.data_root(tmp_path / "given") == tmp_path / "given"


def test_thumos_says_it_cannot_be_downloaded():
    from mannlab import tasks
    from mannlab.errors import DataError

    with pytest.raises(DataError, match="cannot be downloaded.*--data-dir"):
        tasks.make("thumos14-proposals", download=True)
