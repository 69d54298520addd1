"""Speed of the compiled whole-sequence kernels on two threads against one, in the same run.

Measures training sequences per second (forward + loss + backward over a whole sequence, no
optimizer update) of each model in three settings:

  1 thread            torch.set_num_threads(1): the serial kernels, as before
  2 threads           torch.set_num_threads(2), what ``train.threads = 2`` sets for a run: the
                      kernels cut the batch into one block of rows per thread
                      (mannlab/ops/threads.py), and torch's own operators around them (input
                      projection, output layer, weight gradients) use two threads too
  kernels 2, torch 1  mannlab.ops.set_threads(2) with torch on one thread: only the kernels
                      run on two threads

The settings take turns within every round (in a rotating order); a ratio "x" is the median
over rounds of (one-thread time / that setting's time) measured in the same round, so a
change of machine load slows all alike. Times are wall-clock seconds (CPU time would add up
both threads and hide the gain).

Models, on random binary inputs and targets (input 9, output 8: the copy task's sizes),
each at the size of its own benchmark:

  ARMIN         bench_armin.py's: hidden 100, memory 50 x 32, gumbel straight-through reads
  TARDIS        bench_tardis.py's: hidden 120, 16 cells of 4 + 32, gumbel reads
  D-NTM soft    bench_dntm.py's: 100-unit GRU, 128 cells of 8 + 8, soft addressing, J = 1
  D-NTM reinforce  the same with sampled one-hot weightings and aux_loss (REINFORCE)
  NTM           bench_ntm.py's: 100-unit LSTM controller, 128 x 20 memory, one read and one
                write head
  DNC           bench_dnc.py's: 128-unit LSTM controller, 128 x 20 memory, one read head

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
from bench_dnc import dnc  # noqa: E402
from bench_dntm import dntm  # noqa: E402
from bench_dntm import train_step as dntm_train_step  # noqa: E402
from bench_ntm import INPUT, OUTPUT, ntm_copy, time_round_robin  # noqa: E402
from bench_ntm import train_step as ntm_train_step  # noqa: E402
from bench_tardis import TARDISLogits  # noqa: E402
from bench_tardis import train_step as tardis_train_step  # noqa: E402

#: name: (torch's threads, the kernels' threads; None: torch's)
SETTINGS = {"1 thread": (1, None), "2 threads": (2, None), "kernels 2, torch 1": (1, 2)}


def models() -> dict[str, tuple[nn.Module, Callable]]:
    """name: (model, its training step (model, x, target))."""
    torch.manual_seed(0)
    return {
        "ARMIN": (armin("gumbel"), tardis_train_step),
        "TARDIS": (TARDISLogits("gumbel", True), tardis_train_step),
        "D-NTM soft": (dntm("soft", 1), dntm_train_step),
        "D-NTM reinforce": (dntm("reinforce", 1), dntm_train_step),
        "NTM": (ntm_copy(), ntm_train_step),
        "DNC": (dnc(), ntm_train_step),
    }


def on_threads(setting: tuple[int, int | None], step: Callable, model: nn.Module, x, target):
    def call() -> None:
        torch.set_num_threads(setting[0])
        mannlab.ops.set_threads(setting[1])
        step(model, x, target)

    return call


def measure(args: argparse.Namespace, batch_sizes: list[int]) -> list[dict]:
    records = []
    chosen = models()
    if args.models:
        wanted = [name.strip() for name in args.models.split(",")]
        unknown = [name for name in wanted if name not in chosen]
        if unknown:
            raise SystemExit(f"--models: unknown {unknown}; the models are {list(chosen)}")
        chosen = {name: chosen[name] for name in wanted}
    for name, (model, step) in chosen.items():
        model.train()
        for batch in batch_sizes:
            gen = torch.Generator().manual_seed(batch)
            x = (torch.rand(batch, args.steps, INPUT, generator=gen) > 0.5).float()
            target = (torch.rand(batch, args.steps, OUTPUT, generator=gen) > 0.5).float()
            calls = {key: on_threads(setting, step, model, x, target) for key, setting in SETTINGS.items()}
            times = time_round_robin(calls, args.warmup, args.repeats)
            one = times["1 thread"]
            record = {"model": name, "batch": batch}
            for key, values in times.items():
                record[f"seq/s, {key}"] = batch / statistics.median(values)
                if key != "1 thread":
                    record[f"x, {key}"] = statistics.median(a / b for a, b in zip(one, values))
            records.append(record)
            print("| " + " | ".join(_cell(v) for v in record.values()) + " |", flush=True)
    return records


def _cell(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names of the table (default: all)")
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
        f"{args.repeats} rounds, load average at start {load:.2f}"
    )
    columns = ["model", "batch", "seq/s, 1 thread"]
    for key in list(SETTINGS)[1:]:  # as the records: seq/s, then the ratio to one thread
        columns += [f"seq/s, {key}", f"x, {key}"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    start = time.perf_counter()
    try:
        records = measure(args, batch_sizes)
    finally:
        torch.set_num_threads(threads_before)
        mannlab.ops.set_threads(None)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"load average at end {load_end:.2f}, {time.perf_counter() - start:.0f} s")
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
