"""Speed of the DNC at the partially-non-recurrent paper's Toy-task size, as ratios to LSTMCell.

Measures, per time step, the median over several repeats of:
  train  forward + loss + backward over a whole sequence, divided by its length T
  infer  forward under torch.no_grad(), divided by T
for these models, measured in the same run on the same inputs (input 9, output 8):
  DNC          mannlab.DNC(9, 8), 128-unit LSTM controller, 128 x 20 memory, one read
               head (Taguchi & Tsuruoka's Toy-task configuration)
  NTM          mannlab.NTM(9, 8) with the same controller and memory, for information
  LSTMCell     torch.nn.LSTMCell(9, 128) stepped in a Python loop + Linear(128, 8):
               the reference, since the DNC also steps its controller in Python
  LSTM         torch.nn.LSTM(9, 128) (the fused sequence op) + Linear, for information
  dnc (PyPI)   the `dnc` package's DNC (R. Chatterjee, "ixaxaar") at the same size, when it
               is installed and runs; its output layer maps back to the input size,
               so a Linear(9, 8) is added

plus, once per training setting (untimed), the bytes autograd keeps for the
backward pass. The timing, memory and table helpers are bench_ntm.py's.

    python benchmarks/bench_dnc.py                       # batch 1 and 32, T=41, 1 thread
    python benchmarks/bench_dnc.py --batch-sizes 8 --json bench.json
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ntm import (INPUT, OUTPUT, FusedLSTM, Logits, LSTMCellLoop,  # noqa: E402
                       infer_step, markdown_table, parse_args, saved_for_backward_bytes, time_round_robin,
                       train_step)

import mannlab  # noqa: E402

HIDDEN, SLOTS, WIDTH, READS = 128, 128, 20, 1
REFERENCE = "LSTMCell"


class PyPIDNC(nn.Module):
    """The PyPI `dnc` package's DNC at the same size (+ Linear(9, 8): its output is input-sized)."""

    def __init__(self):
        super().__init__()
        from dnc import DNC  # optional dependency: pip install --no-deps dnc
        self.dnc = DNC(input_size=INPUT, hidden_size=HIDDEN, rnn_type="lstm", num_layers=1,
                       num_hidden_layers=1, nr_cells=SLOTS, cell_size=WIDTH, read_heads=READS,
                       batch_first=True, gpu_id=-1)
        self.head = nn.Linear(INPUT, OUTPUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.dnc(x, (None, None, None), reset_experience=True)
        return self.head(out)


def make_models() -> tuple[dict[str, nn.Module], str | None]:
    """The models of the run; the PyPI DNC only if it imports and runs (else the error)."""
    sizes = dict(controller="lstm", controller_size=HIDDEN, memory_slots=SLOTS,
                 memory_width=WIDTH, read_heads=READS)
    models: dict[str, nn.Module] = {
        "DNC": Logits(mannlab.DNC(INPUT, OUTPUT, **sizes)),
        "NTM": Logits(mannlab.NTM(INPUT, OUTPUT, **sizes)),
        "LSTMCell": LSTMCellLoop(HIDDEN),
        "LSTM": FusedLSTM(HIDDEN),
    }
    try:
        pypi = PyPIDNC()
        train_step(pypi, torch.zeros(2, 3, INPUT), torch.zeros(2, 3, OUTPUT))  # does it run?
    except Exception as exc:  # any failure of a third-party package is reported, not fatal
        return models, f"{type(exc).__name__}: {exc}"
    models["dnc (PyPI)"] = pypi
    return models, None


def run(models: dict[str, nn.Module], batch_sizes: list[int], steps: int, repeats: int,
        warmup: int) -> list[dict]:
    """Time every model, mode and batch size; one record per measurement (as bench_ntm.run)."""
    records = []
    for batch in batch_sizes:
        x = torch.randint(0, 2, (batch, steps, INPUT)).float()
        target = torch.randint(0, 2, (batch, steps, OUTPUT)).float()
        for mode, step_fn in (("train", train_step), ("infer", infer_step)):
            calls = {name: (lambda m=model: step_fn(m, x, target)) for name, model in models.items()}
            times = time_round_robin(calls, warmup, repeats)
            for name, seconds in times.items():
                ratios = [a / b for a, b in zip(seconds, times[REFERENCE])]
                record = {"mode": mode, "batch": batch, "model": name, "steps": steps,
                          "us_per_step": 1e6 * statistics.median(seconds) / steps,
                          "us_per_step_min": 1e6 * min(seconds) / steps,
                          "ratio_to_lstmcell": statistics.median(ratios)}
                if mode == "train":
                    record["saved_mb"] = saved_for_backward_bytes(models[name], x, target) / 2**20
                records.append(record)
    return records


def main(argv: list[str] | None = None) -> None:
    args, batch_sizes = parse_args(argv, __doc__.split("\n")[0])
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models, pypi_error = make_models()
    settings = {"torch": torch.__version__, "mannlab": mannlab.__version__,
                "python": platform.python_version(), "machine": platform.machine(),
                "threads": args.threads, "steps": args.steps, "repeats": args.repeats,
                "warmup": args.warmup, "batch_sizes": batch_sizes, "pypi_dnc_error": pypi_error}
    start = time.perf_counter()
    records = run(models, batch_sizes, args.steps, args.repeats, args.warmup)
    settings["total_seconds"] = round(time.perf_counter() - start, 1)
    settings["load_average_1min"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None

    print(f"T={args.steps}, threads={args.threads}, median of {args.repeats} "
          f"(warm-up {args.warmup}), torch {torch.__version__}, "
          f"{settings['total_seconds']} s total, load average {settings['load_average_1min']} "
          f"on {os.cpu_count()} cores\n")
    if pypi_error:
        print(f"dnc (PyPI) not timed: {pypi_error}\n")
    print(markdown_table(records))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"settings": settings, "records": records}, handle, indent=2)


if __name__ == "__main__":
    main()
