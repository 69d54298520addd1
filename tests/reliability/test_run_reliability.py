"""Run directories that survive crashes and nonsense: atomic files, resume of a finished run,
divergence as an outcome, range-checked config values, one-line CLI errors."""

import json
import math

import pytest
import torch

from mannlab.building import build_run
from mannlab.cli import main
from mannlab.config import RunConfig, TrainConfig, load_config
from mannlab.errors import ConfigError
from mannlab.rundir import load_checkpoint, read_metrics, replacing, save_checkpoint
from mannlab.training import DivergedError, loop, train
from mannlab.training.sampled import SampledBatches
from mannlab.training.source import Validation

TINY = [
    "--model",
    "lstm",
    "--task",
    "copy",
    "--set",
    "model.hidden_size=4",
    "--set",
    "task.max_length=2",
    "--set",
    "task.width=2",
    "--batch-size",
    "2",
    "--set",
    "train.val_every=2",
    "--set",
    "train.val_batch_size=2",
    "--set",
    "train.val_batches=1",
    "--set",
    "train.checkpoint_every=2",
    "--set",
    "train.val_length_multiples=[1]",
    "--no-progress",
    "--steps",
    "4",
]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})


def config(run_dir="run", **train_args):
    args = dict(
        steps=4,
        batch_size=2,
        val_every=2,
        val_batch_size=2,
        val_batches=1,
        val_length_multiples=(1,),
        checkpoint_every=2,
        progress=False,
    )
    return RunConfig(
        model="lstm",
        task="copy",
        model_args={"hidden_size": 4},
        task_args={"width": 2, "max_length": 2},
        seed=0,
        train=TrainConfig(**{**args, **train_args}),
        run_dir=run_dir,
    )


def rows(run_dir="run"):
    return [
        {k: v for k, v in r.items() if k not in ("wall", "cpu")}
        for r in read_metrics(f"{run_dir}/metrics.jsonl")
    ]


# ------------------------------------------------------------- atomic files


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), replacing(path) as handle:
        handle.write("new, half")
        raise RuntimeError("killed")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


# ------------------------------------------------------------------ resume


def test_resuming_a_finished_run_does_nothing_until_the_budget_is_raised(capsys):
    first = train(config())
    before, summary = rows(), open("run/summary.json").read()
    assert train(config(), resume=True) == first
    assert rows() == before and open("run/summary.json").read() == summary
    assert main(["train", "--run-dir", "run", "--resume"]) == 0
    out = capsys.readouterr().out
    assert out.strip().count("\n") == 0 and "is finished (4 steps" in out
    longer = train(config(steps=6), resume=True)
    assert longer["steps"] == 6 and [r["step"] for r in rows()].count(4) == 2  # train + val


def test_a_resume_after_the_last_checkpoint_repeats_no_row_and_no_cpu_time(tmp_path):
    whole = train(config("whole"))
    train(config("cut"))
    (tmp_path / "cut" / "summary.json").unlink()  # killed after the last checkpoint
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 4, "split": "val", "bce": 1.0}\n')  # and after one more row
    cpu = load_checkpoint(tmp_path / "cut" / "checkpoints" / "last")[1]["cpu"]
    resumed = train(config("cut"), resume=True)
    assert rows("cut") == rows("whole")
    assert resumed["final_val"] == whole["final_val"]
    assert resumed["cpu_seconds"] - cpu < 0.5 * whole["cpu_seconds"]  # no second validation


def test_a_nan_best_in_the_training_state_does_not_freeze_the_best_checkpoint(tmp_path):
    train(config(steps=2))
    last = tmp_path / "run" / "checkpoints" / "last"
    meta, state = load_checkpoint(last)
    _, model = build_run(config())
    load_checkpoint(last, model)
    save_checkpoint(last, model, meta, {**state, "best_bce": math.nan})
    summary = train(config(steps=4), resume=True)
    assert summary["best_val"]["step"] == 4 and math.isfinite(summary["best_val"]["bce"])


# -------------------------------------------------------------- divergence


def exploding(values):
    """SampledBatches.validate giving ``values`` in turn (the first: the untrained model)."""
    it = iter(values)

    def validate(self, model):
        value = next(it)
        return Validation(
            [({"bce": value}, {"length": 2, "multiple": 1})],
            value,
            value,
            [{"bce": value, "length": 2, "multiple": 1}],
        )

    return validate


@pytest.mark.parametrize(
    "values, patience, match",
    [
        ([0.7, 0.5, math.nan], 3, "validation loss nan at step 4"),
        ([0.7, 8.0, 9.0, 10.0], 3, r"above 10 x the untrained model's \(0.7\) for 3 validations"),
        ([0.7, 8.0, 0.5, 8.0, 9.0], 2, "for 2 validations in a row"),
    ],
)
def test_divergence_stops_the_run_and_the_summary_says_so(monkeypatch, values, patience, match):
    monkeypatch.setattr(SampledBatches, "validate", exploding(values))
    with pytest.raises(DivergedError, match=match):
        train(config(steps=20, diverge_patience=patience))
    summary = json.load(open("run/summary.json"))
    assert summary["stopped_by"] == "diverged" and match.split(" ")[0] in summary["diverged"]


def test_no_divergence_check_with_patience_zero_but_nan_still_stops(monkeypatch):
    monkeypatch.setattr(SampledBatches, "validate", exploding([8.0, 9.0, 10.0, 0.1]))
    assert train(config(steps=6, diverge_patience=0))["stopped_by"] == "steps"
    monkeypatch.setattr(SampledBatches, "validate", exploding([math.inf]))
    with pytest.raises(DivergedError, match="validation loss inf"):
        train(config(steps=6, diverge_patience=0), force=True)


def test_a_diverged_run_exits_1_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *TINY, "--force", "--lr", "10", "--set", "train.clip_grad_norm=0", "--steps", "20"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1 and "diverge" in err


# ------------------------------------------------------------ config ranges

BAD_TRAIN = [
    "clip_grad_norm=-1",
    "clip_grad_norm=nan",
    "momentum=-0.1",
    "momentum=nan",
    "momentum=2",
    "momentum=1",
    "alpha=-1",
    "alpha=nan",
    "eps=0",
    "eps=-1e-8",
    "eps=nan",
    "weight_decay=-1",
    "weight_decay=nan",
    "lr=0",
    "lr=-1",
    "lr=nan",
    "lr=inf",
    "lr=10.5",
    "lr=1e3",
    "lr_after_solve=11",
    "lr_after_solve=nan",
    "lr_after_solve=-1",
    "solve_bce=nan",
    "solve_bce=-1",
    "max_minutes=nan",
    "max_minutes=-1",
    "max_minutes=inf",
    "diverge_patience=-1",
    "diverge_factor=1",
    "diverge_factor=nan",
    "steps=-1",
    "stop_after_solve=-1",
    "threads=-1",
    "batch_size=0",
    "val_every=0",
    "checkpoint_every=0",
    "val_batches=0",
    "val_batch_size=0",
]


@pytest.mark.parametrize("override", BAD_TRAIN)
def test_every_train_number_is_range_checked(tmp_path, override):
    path = tmp_path / "c.toml"
    path.write_text('[model]\nname = "lstm"\n[task]\nname = "copy"\n')
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"train\.{key} must be (>=?|in) .*, got"):
        load_config(path, [f"train.{override}"])


@pytest.mark.parametrize("seed", [-1, 2**63])
def test_seeds_are_range_checked(seed):
    with pytest.raises(ConfigError, match=r"seed must be in \[0, 9223372036854775807\]"):
        RunConfig(model="lstm", task="copy", seed=seed)


# ---------------------------------------------------------------- CLI lines


def one_line_failure(argv, capsys, status=2):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == status, err
    # one line, but for the usage argparse prints above its own errors
    assert "Traceback" not in err and (err.startswith("usage:") or err.strip().count("\n") == 0), err
    return err.strip().splitlines()[-1]


def finished_run(capsys):
    assert main(["train", *TINY, "--run-dir", "run"]) == 0
    capsys.readouterr()


def drop_entry(key):
    def damage():
        last = "run/checkpoints/last"
        meta, state = load_checkpoint(last)
        _, model = build_run(load_config("run/config.toml"))
        load_checkpoint(last, model)
        state.pop(key)
        save_checkpoint(last, model, meta, state)

    return damage


def nan_weights():
    best = "run/checkpoints/best"
    meta, state = load_checkpoint(best)
    _, model = build_run(load_config("run/config.toml"))
    with torch.no_grad():
        next(model.parameters()).fill_(math.nan)
    save_checkpoint(best, model, meta, state)


def write(path, content):
    return lambda: open(path, "wb").write(content)


DEEP = b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n"
CLI_CASES = {
    "non-UTF-8 config": (
        write("bad.toml", b"seed = 1 # \xff\xfe\n"),
        ["train", "--config", "bad.toml"],
        "not valid TOML in UTF-8",
    ),
    "deep TOML config": (write("deep.toml", DEEP), ["train", "--config", "deep.toml"], "too deeply nested"),
    "config is a directory": (
        lambda: __import__("os").mkdir("adir"),
        ["train", "--config", "adir"],
        "is a directory",
    ),
    "run dir is a file": (
        write("afile", b""),
        ["train", *TINY, "--run-dir", "afile"],
        "afile is a file, not a directory",
    ),
    "eval a file": (write("afile", b""), ["eval", "afile"], "is a file; expected a run directory"),
    "NUL in a path": (None, ["train", *TINY, "--run-dir", "a\x00b"], "a path cannot contain a NUL byte"),
    "deep --set": (None, ["train", *TINY, "--set", "train.lr=" + "[" * 100_000], "nested too deeply"),
    "huge --seed": (None, ["train", *TINY, "--seed", "99999999999999999999"], "expected an integer in [0,"),
    "eval --batches 0": (None, ["eval", "run", "--batches", "0"], "expected an integer >= 1"),
    "eval --lengths 0": (None, ["eval", "run", "--lengths", "0"], "expected integers >= 1"),
    "eval --seed -1": (None, ["eval", "run", "--seed", "-1"], "expected an integer in [0,"),
    "plot --length 0": (None, ["plot", "run", "--length", "0"], "expected an integer >= 1"),
    "clip -1": (
        None,
        ["train", *TINY, "--set", "train.clip_grad_norm=-1"],
        "train.clip_grad_norm must be >= 0",
    ),
    "lr nan": (None, ["train", *TINY, "--lr", "nan"], "train.lr must be in (0, 10.0], got nan"),
    "lr 1000": (
        None,
        ["train", *TINY, "--lr", "1000"],
        "train.lr must be in (0, 10.0], got 1000.0 (a learning rate is finite and at most 10",
    ),
}
RUN_CASES = {  # damage a finished run, then the command
    "non-UTF-8 run config": (
        write("run/config.toml", b"\xff\xfe"),
        ["eval", "run"],
        "not valid TOML in UTF-8",
    ),
    "non-UTF-8 metrics": (write("run/metrics.jsonl", b"\xff\xfe\n"), ["plot", "run"], "not UTF-8 text"),
    "empty metrics": (
        write("run/metrics.jsonl", b""),
        ["plot", "run"],
        "stopped before its first validation",
    ),
    "deep JSON metrics": (
        write("run/metrics.jsonl", b"[" * 100_000 + b"\n{}\n"),
        ["plot", "run"],
        "line 1: not a JSON object",
    ),
    "deep JSON summary": (
        write("run/summary.json", b"[" * 100_000),
        ["report", "."],
        "truncated or not JSON",
    ),
    "no optimizer entry": (
        drop_entry("optimizer"),
        ["train", "--run-dir", "run", "--resume", "--steps", "6"],
        "has no optimizer entry",
    ),
    "no RNG entry": (
        drop_entry("torch_rng_state"),
        ["train", "--run-dir", "run", "--resume", "--steps", "6"],
        "has no torch_rng_state entry",
    ),
    "NaN weights": (nan_weights, ["eval", "run"], "non-finite weights"),
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_failures_are_one_line(case, capsys):
    prepare, argv, message = CLI_CASES[case]
    if prepare:
        prepare()
    assert message in one_line_failure(argv, capsys)


@pytest.mark.parametrize("case", RUN_CASES)
def test_cli_failures_on_damaged_runs_are_one_line(case, capsys):
    finished_run(capsys)
    prepare, argv, message = RUN_CASES[case]
    prepare()
    assert message in one_line_failure(argv, capsys)


def test_unexpected_errors_are_one_line_and_debug_shows_the_traceback(capsys, monkeypatch):
    from mannlab.cli import results

    def broken(args):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(results, "cmd_report", broken)
    parser_argv = ["report", "."]
    assert "ZeroDivisionError: boom (rerun with --debug" in one_line_failure(parser_argv, capsys, 1)
    with pytest.raises(ZeroDivisionError):
        main(["report", ".", "--debug"])
