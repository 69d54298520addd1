"""The run built once: `prepare_run` builds the task and the model from the seed, `train` and
`train_seeds` train what they are given and build nothing again, and the weights are what a
run of the same seed on its own starts from."""

import pytest
import torch

from mannlab import building
from mannlab.building import build_run
from mannlab.cli import main
from mannlab.config import RunConfig, TrainConfig
from mannlab.training import loop, prepare_run, train
from mannlab.training.seeds import train_seeds


def tiny(tmp_path, seed=0, steps=2):
    return RunConfig(
        model="lstm",
        task="copy",
        model_args={"hidden_size": 8},
        task_args={"width": 3, "max_length": 3},
        seed=seed,
        run_dir=str(tmp_path / f"run{seed}"),
        train=TrainConfig(
            steps=steps, batch_size=2, val_every=2, val_batches=1, val_batch_size=2, progress=False
        ),
    )


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.fixture
def builds(monkeypatch):
    """How often a task was built."""
    count = {"task": 0}
    real = building.build_task

    def counting(config):
        count["task"] += 1
        return real(config)

    monkeypatch.setattr(building, "build_task", counting)
    monkeypatch.setattr("mannlab.training.prepared.build_task", counting)
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    return count


def test_prepared_model_is_the_seeded_build(tmp_path):
    config = tiny(tmp_path, seed=3)
    torch.manual_seed(3)
    _, model = build_run(config)
    prepared = prepare_run(config)
    assert all(torch.equal(a, b) for a, b in zip(weights(model), weights(prepared.model)))
    assert prepared.device == torch.device("cpu")
    # a task built before, with other random draws in between, leaves the weights as they are
    torch.rand(5)
    shared = prepare_run(config, task=prepared.task)
    assert all(torch.equal(a, b) for a, b in zip(weights(model), weights(shared.model)))


def test_train_builds_nothing_given_a_prepared_run(tmp_path, builds):
    config = tiny(tmp_path)
    prepared = prepare_run(config)
    assert builds["task"] == 1
    train(config, prepared=prepared)
    assert builds["task"] == 1
    train(tiny(tmp_path / "alone"))  # and builds its own without one
    assert builds["task"] == 2


def test_train_refuses_a_run_prepared_for_another_config(tmp_path):
    prepared = prepare_run(tiny(tmp_path, seed=1))
    with pytest.raises(ValueError, match="seed 1.*seed 0"):
        train(tiny(tmp_path, seed=0), prepared=prepared)


def test_cli_train_builds_the_task_once(tmp_path, builds, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--model", "lstm", "--task", "copy", "--steps", "2", "--no-progress"]
    sizes = ["--set", "model.hidden_size=8", "--set", "task.max_length=3", "--batch-size", "2"]
    assert main([*argv, *sizes, "--set", "train.val_batches=1", "--run-dir", "r"]) == 0
    assert builds["task"] == 1


def test_train_seeds_shares_the_task_and_matches_single_runs(tmp_path, builds):
    config = tiny(tmp_path).replace(run_dir=None)
    heard = []
    summaries = train_seeds(
        config, [0, 1, 0], tmp_path / "seeds", force=True, report=lambda *a: heard.append(a[:2])
    )
    assert builds["task"] == 1  # one task for all seeds
    assert [s["seed"] for s in summaries] == [0, 1, 0]
    assert heard == [(0, "training"), (1, "training"), (0, "training")]
    single = train(tiny(tmp_path / "single", seed=1))
    assert summaries[1]["final_val"] == single["final_val"]
    # finished seeds are reported and not trained again
    heard.clear()
    again = train_seeds(
        config, [0, 1], tmp_path / "seeds", resume=True, report=lambda *a: heard.append(a[:2])
    )
    assert heard == [(0, "finished"), (1, "finished")] and again[1]["steps"] == 2
