"""Speed of the compiled whole-sequence kernels on two threads against one, in the same run.

Measures training sequences per second (forward + loss + backward over a whole sequence, no
optimizer update) of each model with torch.set_num_threads(1) and with
torch.set_num_threads(2), which is what ``train.threads`` sets for a run: the kernels then
cut the batch into one block of rows per thread (mannlab/ops/threads.py), and torch's own
operators around them (input projection, output layer, weight gradients) use the same
threads. Both settings take turns within every round (in a rotating order), and the ratio
is the median over rounds of (one-thread time / two-thread time) measured in the same round,
so a change of machine load slows both alike. Times are wall-clock seconds (CPU time would
add up both threads and hide the gain).

Models, on random binary inputs and targets (input 9, output 8: the copy task's sizes),
each at the size of its own benchmark:

  ARMIN         bench_armin.py's: hidden 100, memory 50 x 32, gumbel straight-through reads
  TARDIS        bench_tardis.py's: hidden 120, 16 cells of 4 + 32, gumbel reads
  D-NTM soft    bench_dntm.py's: 100-unit GRU, 128 cells of 8 + 8, soft addressing, J = 1
  D-NTM reinforce  the same with sampled one-hot weightings and aux_loss (REINFORCE)

    python benchmarks/bench_threads.py                         # batch 8 and 32, T = 41
    python benchmarks/bench_threads.py --batch-sizes 32 --repeats 21 --json threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mannlab  # noqa: E402
from bench_armin import armin  # noqa: E402
from bench_dntm import dntm  # noqa: E402
from bench_dntm import train_step as dntm_train_step  # noqa: E402
from bench_ntm import INPUT, OUTPUT, time_round_robin  # noqa: E402
from bench_tardis import TARDISLogits  # noqa: E402
from bench_tardis import train_step as tardis_train_step  # noqa: E402

THREADS = (1, 2)


def models() -> dict[str, tuple[nn.Module, Callable]]:
    """name: (model, its training step (model, x, target))."""
    torch.manual_seed(0)
    return {
        "ARMIN": (armin("gumbel"), tardis_train_step),
        "TARDIS": (TARDISLogits("gumbel", True), tardis_train_step),
        "D-NTM soft": (dntm("soft", 1), dntm_train_step),
        "D-NTM reinforce": (dntm("reinforce", 1), dntm_train_step),
    }


def on_threads(count: int, step: Callable, model: nn.Module, x: torch.Tensor, target: torch.Tensor):
    def call() -> None:
        torch.set_num_threads(count)
        step(model, x, target)

    return call


def measure(args: argparse.Namespace, batch_sizes: list[int]) -> list[dict]:
    records = []
    for name, (model, step) in models().items():
        model.train()
        for batch in batch_sizes:
            gen = torch.Generator().manual_seed(batch)
            x = (torch.rand(batch, args.steps, INPUT, generator=gen) > 0.5).float()
            target = (torch.rand(batch, args.steps, OUTPUT, generator=gen) > 0.5).float()
            calls = {count: on_threads(count, step, model, x, target) for count in THREADS}
            times = time_round_robin(calls, args.warmup, args.repeats)
            one, two = times[1], times[2]
            records.append(
                {
                    "model": name,
                    "batch": batch,
                    "seq_per_s_1": batch / statistics.median(one),
                    "seq_per_s_2": batch / statistics.median(two),
                    "speedup": statistics.median(a / b for a, b in zip(one, two)),
                }
            )
            print(
                f"| {name} | {batch} | {records[-1]['seq_per_s_1']:.1f} | {records[-1]['seq_per_s_2']:.1f} "
                f"| {records[-1]['speedup']:.2f} |",
                flush=True,
            )
    return records


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="8,32", help="comma-separated (default: 8,32)")
    parser.add_argument("--steps", type=int, default=41, help="sequence length T (default 41)")
    parser.add_argument("--repeats", type=int, default=11, help="timed rounds (default 11)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--json", metavar="OUT", help="also write the records and settings as JSON")
    args = parser.parse_args(argv)
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batch-sizes must be comma-separated integers, got {args.batch_sizes!r}")
    if not batch_sizes or min(batch_sizes) < 1 or args.steps < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("batch sizes, --steps and --repeats must be >= 1, --warmup >= 0")
    return args, batch_sizes


def main(argv: list[str] | None = None) -> None:
    args, batch_sizes = parse_args(argv)
    threads_before = torch.get_num_threads()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(
        f"torch {torch.__version__}, mannlab {mannlab.__version__}, {os.cpu_count()} CPUs, T = {args.steps}, "
        f"{args.repeats} rounds, load average at start {load}"
    )
    print("| model | batch | seq/s, 1 thread | seq/s, 2 threads | 2 threads / 1 thread |")
    print("|---|---|---|---|---|")
    start = time.perf_counter()
    try:
        records = measure(args, batch_sizes)
    finally:
        torch.set_num_threads(threads_before)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"load average at end {load_end}, {time.perf_counter() - start:.0f} s")
    if args.json:
        settings = {
            "torch": torch.__version__,
            "mannlab": mannlab.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "steps": args.steps,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "load_average_1min": [load, load_end],
        }
        Path(args.json).write_text(json.dumps({"settings": settings, "records": records}, indent=2))


if __name__ == "__main__":
    main()
