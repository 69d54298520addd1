"""Checkpoints carry the CUDA RNG states where CUDA is available, a resume restores them, and
a checkpoint written with CUDA states loads where there is no CUDA (states faked here; the
GPU check of a bit-exact resume is test_cuda_resume_is_bit_exact, run where there is one)."""

import json
from pathlib import Path

import pytest
import torch

from conftest import requires_cuda
from mannlab.config import RunConfig, TrainConfig
from mannlab.rundir import load_checkpoint, read_metrics
from mannlab.training import loop, run_dir, train


def tiny(path: Path, steps: int, device: str = "cpu", model: str = "lstm", **model_args) -> RunConfig:
    return RunConfig(
        model=model,
        task="copy",
        model_args={"hidden_size": 4, **model_args} if model == "lstm" else model_args,
        task_args={"width": 2, "max_length": 3},
        train=TrainConfig(
            steps=steps,
            batch_size=2,
            val_every=2,
            val_batch_size=2,
            val_batches=1,
            checkpoint_every=2,
            progress=False,
            device=device,
        ),
        run_dir=str(path),
    )


@pytest.fixture(autouse=True)
def no_figures(monkeypatch):
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})


def test_cuda_states_are_saved_and_restored(tmp_path, monkeypatch):
    saved = [torch.ByteTensor([1, 2, 3]), torch.ByteTensor([4, 5, 6])]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: saved)
    assert run_dir.cuda_rng_states() == {"cuda_rng_states": saved}
    restored = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda value, index: restored.append((index, value)))
    run_dir.restore_cuda_rng(saved)
    assert restored == [(0, saved[0])]  # one device here: the first state


def test_a_checkpoint_with_cuda_states_resumes_without_cuda(tmp_path, monkeypatch):
    run = tmp_path / "run"
    with monkeypatch.context() as m:  # written "with CUDA": states beside the CPU's
        m.setattr(loop, "cuda_rng_states", lambda: {"cuda_rng_states": [torch.ByteTensor([7] * 16)]})
        train(tiny(run, steps=2))
    assert "cuda_rng_states" in load_checkpoint(run / "checkpoints" / "last")[1]
    assert not torch.cuda.is_available() or pytest.skip("this check needs a machine without CUDA")
    assert train(tiny(run, steps=4), resume=True)["steps"] == 4


def val_rows(path: Path) -> list:
    return [json.dumps({k: v for k, v in r.items() if k not in ("wall", "cpu")}) for r in read_metrics(path)]


@requires_cuda
@pytest.mark.parametrize(
    "model,args", [("lstm", {}), ("dntm", {"addressing": "reinforce", "controller_size": 8})]
)
def test_cuda_resume_is_bit_exact(tmp_path, model, args):
    """A run on CUDA cut at step 2 and resumed to 6 logs exactly what the whole run logs (a
    REINFORCE D-NTM draws its addresses from the CUDA generator)."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    train(tiny(whole, steps=6, device="cuda", model=model, **args))
    train(tiny(cut, steps=2, device="cuda", model=model, **args))
    torch.cuda.manual_seed_all(12345)  # what the resume must undo
    train(tiny(cut, steps=6, device="cuda", model=model, **args), resume=True)
    assert val_rows(whole / "metrics.jsonl") == val_rows(cut / "metrics.jsonl")
