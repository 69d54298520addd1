"""train.threads is bounded: a count beyond any machine fails as a config error, a count beyond
this machine's cores fails before a run directory is touched, and evaluating a run trained on
a larger machine uses at most the cores there are (torch crashes creating 100,000 threads)."""

from pathlib import Path

import pytest
import torch

import mannlab.config
from mannlab.config import MAX_THREADS, RunConfig, TrainConfig, check_threads, usable_cores
from mannlab.errors import ConfigError
from mannlab.loading import use_run_threads
from mannlab.training import train


def tiny(run_dir: Path, threads: int) -> RunConfig:
    return RunConfig(
        model="lstm",
        task="copy",
        model_args={"hidden_size": 4},
        task_args={"width": 2, "max_length": 2},
        train=TrainConfig(steps=1, batch_size=2, threads=threads, progress=False),
        run_dir=str(run_dir),
    )


@pytest.mark.parametrize("count", [MAX_THREADS + 1, 100_000, 10**12])
def test_absurd_thread_counts_are_config_errors(count):
    with pytest.raises(ConfigError, match=r"train.threads must be in \[0, 4096\]"):
        TrainConfig(threads=count)
    with pytest.raises(ConfigError, match="train.threads"):
        RunConfig.from_dict({"model": {"name": "lstm"}, "task": {"name": "copy"}}).with_overrides(
            [f"train.threads={count}"]
        )


def test_more_threads_than_cores_fail_before_the_run_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(mannlab.config, "usable_cores", lambda: 2)
    with pytest.raises(ConfigError, match=r"train.threads = 3 but this process may use 2 CPU core\(s\)"):
        train(tiny(tmp_path / "run", threads=3))
    assert not (tmp_path / "run").exists()
    check_threads(2)  # as many as the cores: fine


def test_usable_cores_is_positive():
    assert 1 <= usable_cores() <= MAX_THREADS


def test_evaluation_caps_the_threads_at_the_cores(monkeypatch):
    monkeypatch.setattr(mannlab.config, "usable_cores", lambda: 1)
    before = torch.get_num_threads()
    try:
        use_run_threads(tiny(Path("run"), threads=64))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_run_of_zero_steps_is_refused():
    """--steps 0 used to write checkpoints and figures of an untrained model and exit 0."""
    with pytest.raises(ConfigError, match="train.steps must be >= 1"):
        TrainConfig(steps=0)
