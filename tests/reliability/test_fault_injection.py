"""Fault injection: a run killed at any write of its run directory (checkpoint renames,
metrics lines, config.toml, summary.json, figures) and then resumed ends bit-identical to
an uninterrupted run: the same weights, optimizer state and metrics.jsonl (wall and CPU
seconds aside).

Each kill is a forked child that trains with one write patched to die (``os._exit``, no
cleanup, like a SIGKILL) at its k-th call; the parent then resumes the run, as
`mannlab train --resume` would, or starts it anew if no checkpoint was saved yet.
"""

import os

import pytest
import torch

from mannlab.config import RunConfig, TrainConfig
from mannlab.errors import CheckpointError
from mannlab.rundir import MetricsLog, load_checkpoint, read_metrics, write_atomic
from mannlab.training import loop, train

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

KILLED = 77
CONFIG = RunConfig(
    model="lstm",
    task="copy",
    model_args={"hidden_size": 4},
    task_args={"width": 2, "max_length": 2},
    seed=3,
    train=TrainConfig(
        steps=6,
        batch_size=2,
        val_every=2,
        val_batch_size=2,
        val_batches=1,
        val_length_multiples=(1,),
        checkpoint_every=3,
        progress=False,
    ),
)


def half_line(log, *args, **kwargs):
    """What a kill in the middle of a metrics line leaves: part of a line, no newline."""
    log._file.write('{"step": ')
    log._file.flush()


# stage -> (object, attribute, what the write has done when the kill comes, or None)
STAGES = {
    "checkpoint": (os, "rename", None),  # before either rename of a checkpoint swap
    "metrics": (MetricsLog, "log", half_line),
    "config/summary/figures": (os, "replace", None),  # temporary file written, not renamed
}


def quick_figures(run_dir, *args):
    """A stand-in for drawing (matplotlib takes most of a tiny run's time) that writes its
    file the same way, so the figures stage is still killed and resumed."""
    path = run_dir / "figures" / "learning_curve.png"
    write_atomic(path, b"\x89PNG stand-in")
    return {"learning_curve": str(path)}


def counting(monkeypatch, target, name):
    calls = []
    real = getattr(target, name)

    def wrapper(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)
    return calls


def killed_at(run_dir, target, name, partial, k):
    """Train into ``run_dir`` in a child process that dies at the k-th call of target.name."""
    pid = os.fork()
    if pid == 0:
        try:
            real, calls = getattr(target, name), []

            def dying(*args, **kwargs):
                calls.append(1)
                if len(calls) == k:
                    if partial is not None:
                        partial(*args, **kwargs)
                    os._exit(KILLED)
                return real(*args, **kwargs)

            setattr(target, name, dying)
            train(CONFIG.replace(run_dir=str(run_dir)))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def state_of(run_dir):
    rows = [
        {k: v for k, v in row.items() if k not in ("wall", "cpu")}
        for row in read_metrics(run_dir / "metrics.jsonl")
    ]
    out = {"metrics": rows}
    for kind in ("last", "best"):
        _, state = load_checkpoint(run_dir / "checkpoints" / kind)
        out[kind] = {
            "weights": (run_dir / "checkpoints" / kind / "weights.safetensors").read_bytes(),
            "optimizer": state["optimizer"],
            "step": state["step"],
        }
    return out


def equal(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return a == b


def test_a_kill_at_any_write_then_resume_is_bit_identical(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "draw_run_figures", quick_figures)
    calls = {}
    with monkeypatch.context() as patch:
        for stage, (target, name, _) in STAGES.items():
            calls[stage] = counting(patch, target, name)
        train(CONFIG.replace(run_dir=str(tmp_path / "whole")))
    reference = state_of(tmp_path / "whole")
    assert all(calls.values()), {stage: len(c) for stage, c in calls.items()}

    results = []
    for stage, (target, name, partial) in STAGES.items():
        for k in range(1, len(calls[stage]) + 1):
            run_dir = tmp_path / f"{stage.replace('/', '-')}-{k}"
            assert killed_at(run_dir, target, name, partial, k) == KILLED, (stage, k)
            config = CONFIG.replace(run_dir=str(run_dir))
            try:
                train(config, resume=True)
            except CheckpointError:  # killed before the first checkpoint: start again
                train(config, force=True)
            results.append((stage, k, equal(state_of(run_dir), reference)))
    identical = sum(ok for *_, ok in results)
    per_stage = ", ".join(f"{stage} {len(c)}" for stage, c in calls.items())
    print(f"fault injection: {identical} of {len(results)} resumed runs bit-identical ({per_stage})")
    assert identical == len(results), [r for r in results if not r[2]]
