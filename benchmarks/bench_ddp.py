"""Data-parallel training throughput: 2 DDP processes (gloo) against 1 process, measured in
the same run, as sequences per second of whole training steps.

For each model the trainer's own step (training/sampled.py's batch, training/distributed.py's
DDP runner, training/update.py's guarded update, and the loop's per-step all-reduce of the
losses) runs at one global batch (default 32) on the copy task
with the model's default configuration: in one process (the whole batch), then in two
processes started here (half the batch each, gloo on 127.0.0.1), each with
``torch.set_num_threads(1)``, alternating for ``--rounds`` rounds (the medians are reported,
and the range of the per-round ratios: one round is noisy on a small machine). Warm-up
steps come first (a first kernel compile, the allocator); the timed steps are between two
barriers. The ratio "2 processes / 1 process" is the speed-up of data parallelism on this
machine; its load average is printed beside it (on a machine shared with other jobs the
second process competes for a core). The "cpu ratio" divides the CPU seconds of a step in
one process by those of rank 0 in two: the speed-up to expect when each process has a core
of its own, whatever else the machine runs.

    python benchmarks/bench_ddp.py                          # NTM and ARMIN copy, batch 32
    python benchmarks/bench_ddp.py --models ntm --steps 40 --json ddp.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import time

import torch
import torch.multiprocessing as mp

import mannlab
from mannlab.building import build_run
from mannlab.config import RunConfig, default_config_dict
from mannlab.training import distributed
from mannlab.training.optimizer import make_optimizer
from mannlab.training.sampled import SampledBatches
from mannlab.training.update import apply_update


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="ntm,armin", help="comma-separated model names (copy task)")
    parser.add_argument("--batch-size", type=int, default=32, help="the global batch")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=3, help="alternating 1- and 2-process runs")
    parser.add_argument("--json", metavar="OUT", help="also write the records as JSON")
    return parser.parse_args(argv)


def _config(model: str, batch_size: int) -> RunConfig:
    config = RunConfig.from_dict(default_config_dict(model, "copy"))
    train = type(config.train).from_dict(
        {**config.train.to_dict(), "batch_size": batch_size, "val_batches": 1, "val_batch_size": 2}
    )
    return config.replace(train=train, seed=0)


def _measure(rank: int, world: int, port: int, model: str, args: argparse.Namespace, out) -> None:
    """Warm-up and timed steps of the trainer's step in this process (one rank of ``world``)."""
    if world > 1:
        os.environ.update(
            WORLD_SIZE=str(world),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
    torch.set_num_threads(1)
    config = _config(model, args.batch_size)
    device = distributed.start("cpu")
    torch.manual_seed(config.seed)
    task, net = build_run(config)
    optimizer = make_optimizer(net, config.train)
    source = SampledBatches(config, task, net)
    runner = distributed.Runner(net, device)

    def step(i: int) -> None:
        loss, task_loss = source.losses(net, i, runner)
        reported = distributed.mean_over_ranks_later(torch.stack([loss.detach(), task_loss.detach()]))
        apply_update(net, optimizer, loss, config.train.clip_grad_norm, reported=lambda: reported()[0])

    for i in range(args.warmup):
        step(i)
    distributed.barrier()
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(args.warmup, args.warmup + args.steps):
        step(i)
    distributed.barrier()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if rank == 0:
        out.put({"wall": wall, "cpu": cpu, "sequences_per_second": args.steps * args.batch_size / wall})
    distributed.teardown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(model: str, world: int, args: argparse.Namespace) -> dict:
    """Throughput of ``world`` fresh processes (spawned, so 1 and 2 start alike)."""
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(_measure, (world, _free_port(), model, args, out), nprocs=world, start_method="spawn")
    return out.get()


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    records = []
    print(f"global batch {args.batch_size}, {args.steps} timed steps, 1 thread per process")
    print(f"{args.rounds} rounds, medians; ratio range over the rounds in brackets")
    print(f"{'model':8} {'1 proc seq/s':>13} {'2 procs seq/s':>14} {'ratio':>18} {'cpu ratio':>9}")
    for model in args.models.split(","):
        rounds = [(run(model, 1, args), run(model, 2, args)) for _ in range(args.rounds)]
        ratios = [two["sequences_per_second"] / one["sequences_per_second"] for one, two in rounds]
        record = {
            "model": model,
            "rounds": [{"one": one, "two": two} for one, two in rounds],
            "one": statistics.median(one["sequences_per_second"] for one, _ in rounds),
            "two": statistics.median(two["sequences_per_second"] for _, two in rounds),
            "ratio": statistics.median(ratios),
            "cpu_ratio": statistics.median(one["cpu"] / two["cpu"] for one, two in rounds),
        }
        records.append(record)
        spread = f"[{min(ratios):.2f}-{max(ratios):.2f}]"
        print(
            f"{model:8} {record['one']:13.1f} {record['two']:14.1f} {record['ratio']:6.2f} {spread:>11} "
            f"{record['cpu_ratio']:9.2f}"
        )
    load_after = os.getloadavg()
    print(
        f"load average before {', '.join(f'{x:.2f}' for x in load_before)}; after "
        f"{', '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} CPUs)"
    )
    if args.json:
        settings = {
            "mannlab": mannlab.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
            **vars(args),
        }
        with open(args.json, "w") as f:
            json.dump({"settings": settings, "records": records}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
