"""The `mannlab` command line through main([...]): help, train/resume/eval/plot/run, errors."""

import pytest
import torch

from conftest import tiny_ntm_args
from mannlab.cli import main
from mannlab.rundir import read_metrics
from mannlab.training import loop

TINY = tiny_ntm_args()

RECIPE = """
seeds = [0, 1]
run_dir = "{run_dir}"

[model]
name = "lstm"
hidden_size = 8

[task]
name = "copy"
width = 3
max_length = 3

[train]
steps = 3
batch_size = 4
val_every = 3
val_batch_size = 4
val_batches = 1
progress = false
"""


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fails(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "command, words",
    [
        ([], ["train", "run", "eval", "plot"]),
        (["train"], ["--model", "--resume", "--force", "--set", "run directory"]),
        (["run"], ["RECIPE", "--seeds", "summary.md"]),
        (["eval"], ["--lengths", "--batches", "best checkpoint"]),
        (["plot"], ["--length", "--out", "memory_access.png"]),
    ],
)
def test_help(command, words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(command + ["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for word in words:
        assert word in out


def test_train_resume_eval_plot(tmp_path, capsys):
    assert main(["train", *TINY, "--steps", "3"]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "ntm-copy-seed0"
    assert "3 (train)" in out and "bit errors/seq" in out and "12 " in out  # 1x, 2x and 4x rows
    assert f"memory access: {run.relative_to(tmp_path) / 'figures' / 'memory_access.png'}" in out
    assert (run / "figures" / "learning_curve.png").is_file()

    err = fails(["train", *TINY, "--steps", "3"], capsys)
    assert "already holds a run" in err and "--resume" in err

    assert main(["train", "--run-dir", str(run), "--resume", "--steps", "5", "--no-progress"]) == 0
    assert "5 steps" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if r["split"] == "train"] == [
        1,
        2,
        3,
        4,
        5,
    ]

    assert main(["eval", str(run), "--lengths", "3,6", "--batches", "1", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "best checkpoint" in out and "6 " in out and "bit error rate" in out

    assert main(["plot", str(run), "--length", "5", "--out", "figs"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "figs" / "memory_access_len5.png").is_file()
    assert (tmp_path / "figs" / "learning_curve.png").is_file() and "learning curve: figs" in out


def test_run_recipe_over_seeds(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE.format(run_dir="out"))
    assert main(["run", str(recipe)]) == 0
    out = capsys.readouterr().out
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| seed | solved |" in summary and "| 0 | no |" in summary and "| 1 | no |" in summary
    assert "Solved: 0/2 seeds" in out
    assert (tmp_path / "out" / "seed1" / "checkpoints" / "last").is_dir()
    # resume continues seeds with a checkpoint; --seeds picks and adds seeds
    assert main(["run", str(recipe), "--resume", "--seeds", "1,2", "--set", "train.steps=4"]) == 0
    assert "resuming into out/seed1" in capsys.readouterr().out
    assert read_metrics(tmp_path / "out" / "seed2" / "metrics.jsonl")[-1]["step"] == 4


def test_recipes_are_listed_and_run_by_name_from_anywhere(tmp_path, capsys, monkeypatch):
    from mannlab import recipes

    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0]: line for line in lines if line and not line[0].isdigit()}
    assert set(recipes.names()) <= set(listed) and len(recipes.names()) > 50
    assert "NTM with a 100-unit LSTM controller" in listed["ntm-copy-lstm"]  # cut to the terminal
    assert "table1/ntm-copy" in listed and "table2/dnc-copy-batched" in listed
    assert main(["recipes", "ntm-copy-lstm"]) == 0
    assert 'name = "ntm"' in capsys.readouterr().out
    # by name, and by the checkout's path, from a directory without recipes/ (tmp_path)
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    tiny = [
        "--seeds",
        "0",
        "--no-progress",
        "--set",
        "train.steps=1",
        "--set",
        "train.batch_size=2",
        "--set",
        "train.val_batch_size=2",
        "--set",
        "train.val_batches=1",
        "--set",
        "model.controller_size=8",
        "--set",
        "model.memory_slots=8",
        "--set",
        "task.max_length=3",
    ]
    assert main(["run", "ntm-copy-lstm", "--run-dir", "by-name", *tiny]) == 0
    assert main(["run", "recipes/ntm-copy-lstm.toml", "--run-dir", "by-path", *tiny]) == 0
    assert (tmp_path / "by-name" / "seed0" / "summary.json").is_file()
    assert (tmp_path / "by-path" / "seed0" / "summary.json").is_file()
    err = fails(["run", "ntm-cpy-lstm"], capsys)
    assert "no packaged recipe named 'ntm-cpy-lstm'" in err and "ntm-copy-lstm" in err


def test_eval_and_plot_override_the_runs_config(tmp_path, capsys):
    """--set changes the config before the weights load: a soft-trained D-NTM tested with
    argmax addressing (the D-NTM paper's Discrete† column) gives other numbers."""
    tiny_dntm = [
        "--model",
        "dntm",
        "--task",
        "copy",
        "--set",
        "model.controller_size=8",
        "--set",
        "model.memory_slots=6",
        "--set",
        "model.address_size=2",
        "--set",
        "model.content_size=3",
        "--set",
        "task.max_length=3",
        "--set",
        "task.width=3",
        "--batch-size",
        "4",
        "--set",
        "train.val_every=2",
        "--set",
        "train.val_batch_size=4",
        "--set",
        "train.val_batches=1",
        "--no-progress",
        "--steps",
        "2",
        "--run-dir",
        "soft",
    ]
    assert main(["train", *tiny_dntm]) == 0
    capsys.readouterr()
    tables = []
    for extra in ([], ["--set", "model.addressing=argmax"]):
        assert main(["eval", "soft", "--lengths", "3", "--batches", "1", "--batch-size", "4", *extra]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] != tables[1]
    assert main(["plot", "soft", "--out", "figs", "--set", "model.addressing=argmax"]) == 0
    assert (tmp_path / "figs" / "memory_access.png").is_file()
    err = fails(["eval", "soft", "--set", "model.adressing=argmax"], capsys)
    assert "valid options" in err and "addressing" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--model", "nmt", "--task", "copy"], "lstm, ntm"),
        (["train", "--model", "ntm", "--task", "cpy"], "copy, repeat_copy"),
        (["train", "--model", "ntm", "--task", "copy", "--set", "train.lrr=1"], "valid keys: optimizer, lr"),
        (
            ["train", "--model", "ntm", "--task", "copy", "--set", "model.controler=fnn"],
            "valid options: controller",
        ),
        (["train", "--task", "copy"], "give --model and --task"),
        (["train", "--config", "missing.toml"], "config file not found: missing.toml"),
        (
            ["train", "--run-dir", "nowhere", "--model", "lstm", "--task", "copy", "--resume"],
            "holds no run; start one without --resume",
        ),
        (["run", "missing.toml"], "config file not found"),
        (["eval", "no-such-run"], "run directory not found: no-such-run"),
        (["plot", "no-such-run"], "run directory not found"),
    ],
)
def test_user_errors_exit_2_without_traceback(argv, message, capsys):
    assert message in fails(argv, capsys)


def test_bad_list_argument_is_an_argparse_error(capsys):
    err = fails(["eval", "run", "--lengths", "a,b"], capsys)
    assert "comma-separated integers" in err


def test_python_dash_m_mannlab_is_the_command():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "mannlab", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("mannlab ")
