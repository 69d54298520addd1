"""The training loop: exact resume, NaN handling, run directories, early stop, evaluation."""

import importlib.util
import json

import pytest
import torch

from mannlab.building import build_run
from mannlab.config import RunConfig, TrainConfig
from mannlab.errors import CheckpointError, ConfigError, DataError
from mannlab.evaluation import evaluate_lengths, evaluate_run
from mannlab.loading import load_run
from mannlab.models.lstm import LSTM
from mannlab.reporting.text_tables import format_table
from mannlab.rundir import load_checkpoint, read_metrics, truncate_metrics
from mannlab.tasks.base import Task
from mannlab.training import NonFiniteLossError, loop, train
from mannlab.training.sampled import validation_sets

TINY_NTM = {"controller_size": 8, "memory_slots": 8, "memory_width": 4}
TINY_TASK = {"width": 3, "max_length": 3}


@pytest.fixture
def no_figures(monkeypatch):
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})


def tiny_config(tmp_path, name="run", model="lstm", **train_args):
    defaults = dict(
        steps=12,
        batch_size=4,
        val_every=4,
        val_batch_size=4,
        val_batches=1,
        val_length_multiples=(1, 2),
        checkpoint_every=4,
        progress=False,
    )
    model_args = TINY_NTM if model == "ntm" else {"hidden_size": 8}
    return RunConfig(
        model=model,
        task="copy",
        model_args=model_args,
        task_args=TINY_TASK,
        seed=1,
        train=TrainConfig(**{**defaults, **train_args}),
        run_dir=str(tmp_path / name),
    )


def with_train(config, **changes):
    return config.replace(train=TrainConfig(**{**config.train.to_dict(), **changes}))


def train_rows(run_dir):
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"]


def last_weights(run_dir, config):
    _, model = build_run(config)
    load_checkpoint(run_dir / "checkpoints" / "last", model)
    return model.state_dict()


def test_resume_is_exact(tmp_path, no_figures):
    # val_every=5 -> one train log line per step; stopping at 11 is off the 5 and 7 grids
    config = tiny_config(tmp_path, "whole", model="ntm", steps=20, val_every=5, checkpoint_every=7)
    whole = train(config)
    split = config.replace(run_dir=str(tmp_path / "split"))
    train(with_train(split, steps=11))
    resumed = train(split, resume=True)

    assert whole["steps"] == resumed["steps"] == 20
    assert len(train_rows(tmp_path / "split")) == 20  # the replayed tail was not logged twice
    assert train_rows(tmp_path / "whole") == train_rows(tmp_path / "split")
    a, b = last_weights(tmp_path / "whole", config), last_weights(tmp_path / "split", config)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert whole["final_val"] == resumed["final_val"]
    assert resumed["wall_seconds"] > 0
    assert resumed["cpu_seconds"] > 0


def test_run_directory_contents(tmp_path, no_figures):
    config = tiny_config(tmp_path)
    summary = train(config)
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} >= {"config.toml", "metrics.jsonl", "summary.json", "checkpoints"}
    assert json.loads((run / "summary.json").read_text()) == summary
    assert [r["multiple"] for r in summary["final_val"]] == [1, 2]
    assert [r["length"] for r in summary["final_val"]] == [3, 6]
    vals = [r for r in read_metrics(run / "metrics.jsonl") if r["split"] == "val"]
    assert [(r["step"], r["length"]) for r in vals] == [(s, n) for s in (4, 8, 12) for n in (3, 6)]
    meta, state = load_checkpoint(run / "checkpoints" / "best")
    assert meta["step"] == summary["best_val"]["step"] and state["best_bce"] == summary["best_val"]["bce"]
    assert load_checkpoint(run / "checkpoints" / "last")[0]["step"] == 12
    loaded, _, _, _ = load_run(run)
    assert loaded.task_args == {"width": 3, "min_length": 1, "max_length": 3, "end_marker": False}


def test_refuses_to_overwrite_without_force(tmp_path, no_figures):
    config = tiny_config(tmp_path, steps=2)
    train(config)
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already holds a run.*--resume.*--force"):
        train(config)
    train(with_train(config, steps=1), force=True)
    assert [r[0] for r in train_rows(tmp_path / "run")] == [1]
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"  # not ours: left alone


def test_resume_needs_a_checkpoint_and_the_same_model(tmp_path, no_figures):
    config = tiny_config(tmp_path, steps=2)
    with pytest.raises(CheckpointError, match="holds no run"):
        train(config, resume=True)
    train(config)
    changed = config.replace(model_args={"hidden_size": 16})
    with pytest.raises(ConfigError, match="cannot resume.*model_args"):
        train(changed, resume=True)


def test_nan_loss_stops_with_a_clear_error(tmp_path, monkeypatch, no_figures):
    calls = []
    real_loss = Task.loss

    def loss_going_nan(self, logits, targets, mask):
        calls.append(1)
        value = real_loss(self, logits, targets, mask)
        return value * float("nan") if len(calls) == 5 else value

    monkeypatch.setattr(Task, "loss", loss_going_nan)
    config = tiny_config(tmp_path, steps=10, checkpoint_every=2, val_every=100)
    with pytest.raises(
        NonFiniteLossError, match=r"step 5 .*loss is nan.*not updated.*checkpoints/last \(step 4\)"
    ):
        train(config)
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last")[0]["step"] == 4


def test_stop_after_solve_and_solve_record(tmp_path, no_figures):
    config = tiny_config(tmp_path, steps=50, val_every=2, solve_bce=100.0, stop_after_solve=3)
    summary = train(config)
    assert summary["solved"] and summary["solved_at_step"] == 2
    assert summary["steps"] == 5 and summary["solved_at_seconds"] >= 0
    assert summary["stopped_by"] == "solved"


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_time_budget_stops_training_and_a_resume_with_more_time_continues(tmp_path, no_figures, clock):
    """A budget of 6 microseconds stops a generated-task run at once; the stop is a normal end
    (validation, checkpoint, summary), and a resume with a larger budget runs on to train.steps."""
    config = tiny_config(tmp_path, steps=12, max_minutes=1e-7, budget_clock=clock)
    cut = train(config)
    assert cut["stopped_by"] == "time" and cut["steps"] < 12 and cut["budget_clock"] == clock
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last")[0]["step"] == cut["steps"]
    resumed = train(with_train(config, max_minutes=60.0), resume=True)
    assert resumed["stopped_by"] == "steps" and resumed["steps"] == 12


def test_lr_drops_after_solve_and_after_solve_record(tmp_path, no_figures):
    config = tiny_config(
        tmp_path, steps=50, val_every=2, solve_bce=100.0, stop_after_solve=4, lr=1e-3, lr_after_solve=1e-5
    )
    summary = train(config)
    _, state = load_checkpoint(tmp_path / "run" / "checkpoints" / "last")
    assert [g["lr"] for g in state["optimizer"]["param_groups"]] == [1e-5]
    assert summary["after_solve"] == {
        "validations": 2,
        "solved": 2,
        "max_bce": summary["after_solve"]["max_bce"],
    }
    assert summary["best_val"]["rows"][0]["multiple"] == 1


@pytest.mark.parametrize("old_checkpoint", [False, True])
def test_after_solve_record_over_a_resume(tmp_path, monkeypatch, no_figures, old_checkpoint):
    """The validations after the solve are kept in the progress (checkpointed), so a resumed
    run counts those of every session; a checkpoint without them has them from the log."""
    config = tiny_config(tmp_path, steps=6, val_every=2, checkpoint_every=2, solve_bce=100.0)
    if old_checkpoint:
        saved = loop.Progress.to_state
        monkeypatch.setattr(
            loop.Progress,
            "to_state",
            lambda self, best: {k: v for k, v in saved(self, best).items() if k != "after_solve"},
        )
    train(config)
    monkeypatch.undo()
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    summary = train(with_train(config, steps=10), resume=True)
    logged = [
        r["bce"]
        for r in read_metrics(tmp_path / "run" / "metrics.jsonl")
        if r["split"] == "val" and r["multiple"] == 1 and r["step"] > summary["solved_at_step"]
    ]
    assert summary["solved_at_step"] == 2 and len(logged) == 4
    assert summary["after_solve"] == {"validations": 4, "solved": 4, "max_bce": max(logged)}


def test_aux_loss_gets_detached_step_nll(tmp_path, monkeypatch, no_figures):
    seen = []

    def aux_loss(self, trace, step_nll, outputs_per_step=None, reducer=None):
        seen.append((tuple(step_nll.shape), step_nll.requires_grad, type(trace).__name__, reducer))
        return step_nll.new_zeros(())

    monkeypatch.setattr(LSTM, "uses_aux_loss", True)
    monkeypatch.setattr(LSTM, "aux_loss", aux_loss)
    train(tiny_config(tmp_path, steps=2, val_every=10))
    assert len(seen) == 2 and seen[0][0][0] == 4 and seen[0][1] is False and seen[0][2] == "LSTMTrace"
    assert seen[0][3] is None  # one process: the batch's own statistics


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is not None, reason="tensorboard installed")
def test_tensorboard_missing_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="pip install 'mannlab\\[tensorboard\\]'"):
        train(tiny_config(tmp_path, tensorboard=True))
    assert not (tmp_path / "run").exists()  # failed before writing anything


def test_evaluate_and_table(tmp_path, no_figures):
    config = tiny_config(tmp_path, steps=2)
    train(config)
    rows = evaluate_run(tmp_path / "run", lengths=[3, 6], batches=2, batch_size=4)["rows"]
    assert [r["length"] for r in rows] == [3, 6]
    assert set(rows[0]) == {"length", "bce", "bit_error_rate", "seq_bit_errors"}
    again = evaluate_run(tmp_path / "run", lengths=[3, 6], batches=2, batch_size=4)["rows"]
    assert again == rows  # fixed data
    _, task, model, _ = load_run(tmp_path / "run")
    assert evaluate_lengths(model, task, [3], batches=2, batch_size=4, seed=1) == rows[:1]
    table = format_table(rows, train_length=3)
    assert "bit error rate" in table and "3 (train)" in table and len(table.splitlines()) == 4


def test_evaluation_uses_the_runs_thread_count(tmp_path, monkeypatch):
    """Evaluations run on train.threads, as training did (0: leave torch's setting alone)."""
    from mannlab.loading import use_run_threads

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    use_run_threads(tiny_config(tmp_path, threads=1))
    use_run_threads(tiny_config(tmp_path, threads=0))
    assert calls == [1]


def test_metrics_reader_tolerates_a_cut_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "split": "train", "loss": 0.5}\n{"step": 2, "split": "train", "loss": 0.4}\n'
        '{"step": 3, "spl'
    )
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    truncate_metrics(path, 1)
    assert [r["step"] for r in read_metrics(path)] == [1]
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(DataError, match="line 2"):
        read_metrics(path)


def test_val_lengths_max_length_validates_on_the_longest_training_sequences(tmp_path):
    config = tiny_config(tmp_path)  # copy, lengths 1-3
    task, _ = build_run(config)
    mixed = validation_sets(task, config)
    at_max = validation_sets(task, with_train(config, val_lengths="max_length"))
    assert [(m, n) for m, n, _ in mixed] == [(m, n) for m, n, _ in at_max] == [(1, 3), (2, 6)]
    assert at_max[1][2][0][0].equal(mixed[1][2][0][0])  # longer multiples are unchanged
    assert {x.shape[1] for x, _, _ in at_max[0][2]} == {task.sample(1, 0, length=3)[0].shape[1]}
    assert all(mask.sum(1).eq(mask.sum(1)[0]).all() for _, _, mask in at_max[0][2])
    assert any(mask.sum(1).unique().numel() > 1 for _, _, mask in mixed[0][2])


def test_val_lengths_is_checked():
    with pytest.raises(ConfigError, match="val_lengths"):
        TrainConfig.from_dict({"val_lengths": "longest"})
    for task in ("babi", "ptb-char"):
        config = RunConfig(model="lstm", task=task, train=TrainConfig(val_lengths="max_length"))
        with pytest.raises(ConfigError, match="held-out split"):
            build_run(config)


def test_a_reported_loss_given_later_is_checked_after_the_backward_before_the_step():
    # the data-parallel trainer passes the global loss as a function (its all-reduce runs
    # during the backward); a non-finite value still stops before the weights change
    from mannlab.training.update import apply_update

    layer = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    before = [p.detach().clone() for p in layer.parameters()]
    calls = []

    def reported():
        calls.append(layer.weight.grad is not None)  # the backward has run
        return torch.tensor(float("nan"))

    with pytest.raises(NonFiniteLossError, match="loss is nan"):
        apply_update(layer, optimizer, layer(torch.ones(1, 2)).sum(), clip=1.0, reported=reported)
    assert calls == [True]
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
    apply_update(
        layer, optimizer, layer(torch.ones(1, 2)).sum(), clip=1.0, reported=lambda: torch.tensor(1.0)
    )
    assert not all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
