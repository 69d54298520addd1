"""Loggers besides metrics.jsonl (rundir/loggers.py): --logger / train.logger, metrics.csv,
TensorBoard and wandb each write their files; wandb runs offline (or, without the package,
a stand-in module records the calls)."""

import csv
import importlib.util
import sys
import types

import pytest
import torch

from mannlab.cli import main
from mannlab.config import LOGGERS, TrainConfig
from mannlab.errors import ConfigError
from mannlab.rundir import loggers, read_metrics

TINY = [
    "--model",
    "lstm",
    "--task",
    "copy",
    "--set",
    "model.hidden_size=8",
    "--set",
    "task.max_length=3",
    "--set",
    "task.width=3",
    "--batch-size",
    "4",
    "--steps",
    "6",
    "--set",
    "train.val_every=3",
    "--set",
    "train.val_batch_size=4",
    "--set",
    "train.val_batches=1",
    "--no-progress",
]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train(tmp_path, *flags):
    run = tmp_path / "run"
    assert main(["train", *TINY, "--run-dir", str(run), *flags]) == 0
    return run, read_metrics(run / "metrics.jsonl")


def test_logger_names_come_from_config_and_flags(tmp_path):
    assert set(LOGGERS) == {"tensorboard", "csv", "wandb"}
    assert loggers.logger_names(TrainConfig(logger="csv, wandb", tensorboard=True)) == [
        "csv",
        "wandb",
        "tensorboard",
    ]
    with pytest.raises(ConfigError, match="unknown logger.*valid: tensorboard, csv, wandb"):
        TrainConfig(logger="csv,mlflow")
    from mannlab.cli import build_parser
    from mannlab.cli.training import train_config

    args = build_parser().parse_args(["train", *TINY, "--logger", "csv", "--logger", "Wandb,tensorboard"])
    assert train_config(args).train.logger == "csv,wandb,tensorboard"


def test_csv_holds_the_rows_of_metrics_jsonl_and_follows_a_resume(tmp_path):
    run, rows = train(tmp_path, "--logger", "csv")
    with open(run / "metrics.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(rows) and {"step", "split", "loss", "bce", "length", "wall"} <= set(
        table[0]
    ) | set(table[-1])
    for got, want in zip(table, rows):
        for key, value in want.items():
            assert (
                float(got[key]) == pytest.approx(value)
                if isinstance(value, float)
                else got[key] == str(value)
            )
    assert main(["train", "--run-dir", str(run), "--resume", "--steps", "9", "--no-progress"]) == 0
    with open(run / "metrics.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == len(read_metrics(run / "metrics.jsonl")) > len(rows)


def test_tensorboard_scalars_per_split_and_length(tmp_path, monkeypatch):
    written = []

    class Writer:
        def __init__(self, log_dir):
            written.append(("dir", log_dir))

        def add_scalar(self, tag, value, step):
            written.append((tag, step))

        def close(self):
            written.append(("closed",))

    monkeypatch.setattr(loggers, "_summary_writer_class", lambda: Writer)
    run, _ = train(tmp_path, "--logger", "tensorboard")
    assert written[0] == ("dir", str(run / "tensorboard")) and written[-1] == ("closed",)
    tags = {entry[0] for entry in written}
    assert {"train/loss", "val_len3/bce", "val_len6/bit_error_rate"} <= tags


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_writes_event_files(tmp_path):
    run, _ = train(tmp_path, "--logger", "tensorboard")
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))


def test_wandb_gets_the_config_and_the_metrics(tmp_path, monkeypatch):
    calls = []

    class Run:
        def log(self, values, step):
            calls.append(("log", step, values))

        def finish(self):
            calls.append(("finish",))

    fake = types.SimpleNamespace(init=lambda **kw: calls.append(("init", kw)) or Run())
    monkeypatch.setitem(sys.modules, "wandb", fake)
    run, rows = train(tmp_path, "--logger", "wandb")
    (_, init), *logged, finish = calls
    assert init["dir"] == str(run) and init["name"] == "run" and init["config"]["model"]["name"] == "lstm"
    assert finish == ("finish",) and len(logged) == len(rows)
    assert logged[0][1] == rows[0]["step"] and "train/loss" in logged[0][2]
    assert init["id"] == (run / "wandb" / "run_id").read_text()  # a resume continues the same wandb run


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
def test_wandb_offline_writes_its_run_files(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run, _ = train(tmp_path, "--logger", "wandb")
    assert list((run / "wandb").glob("offline-run-*/run-*.wandb"))


def test_missing_packages_fail_before_the_run_starts(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(ConfigError, match="pip install wandb"):
        loggers.check_loggers(TrainConfig(logger="wandb"))
