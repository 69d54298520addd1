"""Data-parallel training (training/distributed.py) with gloo, 2 processes on this machine:
the same run on 1 and 2 processes, exact resume, a resume on another number of processes,
TBPTT streams, and a model with estimator parameters unused on some steps."""

import os
import pickle
import socket

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from data_files import write_ptb_words
from mannlab.config import RunConfig, TrainConfig
from mannlab.errors import ConfigError
from mannlab.nn import sampling
from mannlab.rundir import load_checkpoint, read_metrics
from mannlab.training import distributed, loop, train

# float32 sums in another order (each rank's half of the batch, then the average over ranks):
# the losses agree to 1e-7, and Adam, which divides each gradient by its own running scale,
# turns the last-bit differences of near-zero gradients into parameter differences of up to
# about 1e-5 after 6 steps at lr 3e-3 (5e-5 at lr 1e-2)
TOLERANCE = 1e-4

DNTM = dict(
    controller_size=6,
    memory_slots=5,
    address_size=2,
    content_size=3,
    addressing="reinforce",
    curriculum_p0=0.5,  # some minibatches soft (the input baseline unused), some sampled
    input_baseline=True,
)


def config(run_dir, model="lstm", model_args=None, task="copy", task_args=None, **train_args):
    defaults = dict(
        steps=6,
        batch_size=8,
        lr=3e-3,
        val_every=3,
        val_batch_size=4,
        val_batches=1,
        val_length_multiples=(1,),
        checkpoint_every=3,
        progress=False,
    )
    return RunConfig(
        model=model,
        task=task,
        model_args=model_args or {"hidden_size": 8},
        task_args={"width": 3, "min_length": 1, "max_length": 4} if task_args is None else task_args,
        seed=2,
        train=TrainConfig(**{**defaults, **train_args}),
        run_dir=str(run_dir),
    )


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, jobs, results):
    os.environ.update(
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    loop._Trainer._figures = lambda self: {}  # figures are not what these tests check
    out = []
    for job in jobs:
        if callable(job):
            out.append(job(rank, world))
            continue
        try:
            summary = train(job[0], resume=job[1])
            out.append(summary["steps"] if summary["stopped_by"] == "steps" else summary["stopped_by"])
        except ConfigError as exc:
            out.append(f"ConfigError: {exc}")
    # plain pickle: torch's queue would share tensors through this process, which exits
    results.put((rank, pickle.dumps(out)))


def _statistics(values, mask, inputs, reducer=None):
    """The batch statistics of nn/sampling.py on a batch, or with the ranks' ``reducer`` on a
    slice of it."""
    moments = sampling.RunningMoments(momentum=0.5)
    every = torch.ones(len(values), dtype=torch.bool)
    first = moments.advantage(values[:, 0], every, update=True, reducer=reducer)
    second = moments.advantage(values[:, 1], every, update=True, reducer=reducer)
    return {
        "first": first,
        "second": second,
        "mean": moments.mean.clone(),
        "var": moments.var.clone(),
        "loo": sampling.leave_one_out_mean(values, mask, reducer),
        "same_input": sampling.same_input_leave_one_out_mean(values[:, 0], inputs, reducer),
        "batch_mean": sampling.batch_mean(mask.sum(1), reducer),
    }


def _statistics_batch():
    gen = torch.Generator().manual_seed(3)
    values = torch.randn(8, 5, generator=gen)
    mask = (torch.rand(8, 5, generator=gen) > 0.3).float()
    # two samples of each input, the pairs split across the ranks' slices (rows 3 and 4)
    inputs = torch.tensor([0, 1, 1, 2, 2, 3, 3, 0]).view(8, 1, 1).float()
    return values, mask, inputs


def _statistics_on_slice(rank, world):
    rows = slice(rank * 4, rank * 4 + 4)
    return _statistics(*(t[rows] for t in _statistics_batch()), reducer=distributed.batch_reducer())


def run_ranks(jobs, world=2):
    """Run train(config, resume) for each job, in order, on ``world`` gloo processes;
    every rank's list of outcomes (steps trained, or the ConfigError)."""
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(_worker, (world, _free_port(), jobs, results), nprocs=world, start_method="spawn")
    return {rank: pickle.loads(out) for rank, out in (results.get() for _ in range(world))}


def weights(run_dir):
    return load_file(str(run_dir / "checkpoints" / "last" / "weights.safetensors"))


def close(a, b, tol=TOLERANCE):
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=tol, rtol=tol) for k in a)


def train_losses(run_dir, key="loss"):
    return [r[key] for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"]


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    monkeypatch.setenv("MANNLAB_KERNELS", "0")  # the spawned ranks: tensor paths, no compile


def test_two_processes_train_like_one_and_resume_exactly(tmp_path, quiet, capsys):
    ptb = write_ptb_words(tmp_path / "ptb")
    lm = dict(
        model_args={"hidden_size": 6, "embedding_size": 4},
        task="ptb-char",
        task_args={"data_dir": str(ptb), "bptt": 5, "valid_batch_size": 2},
        batch_size=2,
        steps=4,
        val_every=2,
        checkpoint_every=2,
    )
    one = config(tmp_path / "one")
    dntm = dict(model="dntm", model_args=DNTM)
    jobs = [
        (config(tmp_path / "two"), False),
        (config(tmp_path / "split", steps=4), False),
        (config(tmp_path / "split"), True),
        (config(tmp_path / "dntm-whole", **dntm), False),
        (config(tmp_path / "dntm-split", **dntm, steps=4), False),
        (config(tmp_path / "dntm-split", **dntm), True),
        (config(tmp_path / "lm-two", **lm), False),
        (config(tmp_path / "moved", steps=3), False),  # resumed below on one process
        # every rank stops at rank 0's decision (else one would wait for the other forever)
        (config(tmp_path / "timed", steps=1000, max_minutes=1e-6), False),
        (config(tmp_path / "solved", steps=1000, solve_bce=10.0, stop_after_solve=2), False),
        (config(tmp_path / "odd", batch_size=7), False),
        _statistics_on_slice,
    ]
    outcomes = run_ranks(jobs)
    assert outcomes[0][:-2] == outcomes[1][:-2] == [6, 4, 6, 6, 4, 6, 4, 3, "time", "solved"]
    assert all("must divide evenly among the 2 processes" in outcomes[r][-2] for r in (0, 1))

    # baselines and normalisers of a slice are those of the global batch
    whole = _statistics(*_statistics_batch())
    for key, value in whole.items():
        if key in ("mean", "var", "batch_mean"):  # the same on every rank
            parts = [outcomes[0][-1][key], outcomes[1][-1][key]]
            assert all(torch.allclose(p, value, atol=1e-6) for p in parts), key
        else:
            assert torch.allclose(
                torch.cat([outcomes[0][-1][key], outcomes[1][-1][key]]), value, atol=1e-6
            ), key

    # one process at batch 8 == two at 4 each: same examples, same updates
    train(one)
    assert close(weights(tmp_path / "one"), weights(tmp_path / "two"))
    assert train_losses(tmp_path / "one") == pytest.approx(train_losses(tmp_path / "two"), abs=1e-5)
    val = [r for r in read_metrics(tmp_path / "two" / "metrics.jsonl") if r["split"] == "val"]
    assert [r["step"] for r in val] == [3, 6]  # rank 0 alone wrote the log, once

    # resume at the same world size is exact, also for a model that samples (per-rank RNG
    # streams, the curriculum coin and the running reward moments restored)
    assert all(
        torch.equal(a, b)
        for a, b in zip(weights(tmp_path / "two").values(), weights(tmp_path / "split").values())
    )
    assert train_losses(tmp_path / "two") == train_losses(tmp_path / "split")
    whole, split = weights(tmp_path / "dntm-whole"), weights(tmp_path / "dntm-split")
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    assert "reward_stats.count" in whole and whole["reward_stats.count"].item() > 0
    state = load_checkpoint(tmp_path / "dntm-split" / "checkpoints" / "last")[1]
    assert state["world_size"] == 2 and len(state["torch_rng_states"]) == 2

    # TBPTT: one process with 2 streams == two processes with one stream each
    train(config(tmp_path / "lm-one", **lm))
    assert close(weights(tmp_path / "lm-one"), weights(tmp_path / "lm-two"))
    carried = load_checkpoint(tmp_path / "lm-two" / "checkpoints" / "last")[1]["carried"]
    assert carried is not None and carried[0].shape[1] == 2  # LSTM state (layers, B, H): both streams

    # a run saved by 2 processes resumed on 1: says what changes, trains on like one process
    capsys.readouterr()
    train(config(tmp_path / "moved"), resume=True)
    assert "saved by 2 process(es) on 1" in capsys.readouterr().err
    assert close(weights(tmp_path / "one"), weights(tmp_path / "moved"))
