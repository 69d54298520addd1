"""Speed and memory of the char-level LM models, as ratios to torch.nn.LSTM in the same run.

The CPU analogue of ARMIN's figure 3 and table 4. Every model is a CharLM: an embedding
of 64, the recurrent model, a linear head over 50 symbols (PTB's vocabulary), on random
symbols, segments of T = 150 (the papers' TBPTT length). Two groups, each with its own
reference:

  equal hidden size (--hidden, default 256; memory 20 x d_h as in figure 3)
    nn.LSTM        torch.nn.LSTM (the fused op; mannlab.LSTM with every option off)
    LSTM LN        mannlab.LSTM with layer norm (a Python cell loop: nn.LSTM cannot do it)
    LSTM LN+ZO     the same with zoneout 0.3 on h and c (the papers' baseline)
    ARMIN          20 slots of width d_h, layer norm, gumbel reads, no zoneout: the compiled
                   whole-sequence path (mannlab.ops.armin) in training; inference in
                   eval mode takes it too (argmax reads)
    ARMIN ZO       the same with zoneout 0.3 (the paper's PTB setting), which the compiled
                   path does not cover: the per-step tensor path
    TARDIS         20 cells of d_h / 5 address + 4 d_h / 5 content features, gumbel reads
  equal parameter count: the models of recipes/ptb-char-*.toml (about 313k parameters)
    nn.LSTM 240, LSTM LN 240 (the recipe), LSTM LN+ZO 240, ARMIN 128 (n_mem 20, the
    recipe), ARMIN ZO 128, TARDIS 194 (20 cells, 8 + 32)

Modes, per call on a (B, T) segment from the initial state:
  train  forward + cross-entropy + backward + Adam step (what one TBPTT step costs)
  infer  forward in eval mode under torch.no_grad()

Columns: characters per second (B T / median call time), the speed relative to the
group's nn.LSTM (median over rounds of t_nn.LSTM / t_model, both measured in the same
round; the models take turns in a rotating order, bench_ntm.time_round_robin), and the
peak memory of one call: each (model, mode, batch) runs again in a fresh process, which
first makes a tiny call (B = 1, T = 2) so imports, compiled kernels and the allocator's
first pages are in place, resets the kernel's peak-RSS mark (writing 5 to
/proc/self/clear_refs; Linux), makes one real call and reports the peak resident set size
(VmHWM in /proc/self/status) minus the RSS before the call: the memory the call needs on
top of the weights (activations, gradients, Adam's state, temporaries, allocator slack).
Linux only; --no-memory skips it.

    python benchmarks/bench_charlm.py                      # batch 1 and 32, T=150, 1 thread
    python benchmarks/bench_charlm.py --batch-sizes 32 --repeats 9 --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mannlab  # noqa: E402
from bench_ntm import time_round_robin  # noqa: E402
from mannlab.wrappers import CharLM  # noqa: E402

VOCAB, EMBEDDING, SLOTS = 50, 64, 20
REFERENCE = "nn.LSTM"


def specs(hidden: int) -> dict[str, dict[str, tuple[str, dict]]]:
    """group -> model label -> (registry name, keyword arguments)."""
    address = max(1, hidden // 5)
    return {
        f"equal hidden size {hidden}": {
            "nn.LSTM": ("lstm", dict(hidden_size=hidden)),
            "LSTM LN": ("lstm", dict(hidden_size=hidden, layer_norm=True)),
            "LSTM LN+ZO": ("lstm", dict(hidden_size=hidden, layer_norm=True, zoneout=0.3)),
            "ARMIN": ("armin", dict(hidden_size=hidden, memory_slots=SLOTS)),
            "ARMIN ZO": ("armin", dict(hidden_size=hidden, memory_slots=SLOTS, zoneout=0.3)),
            "TARDIS": (
                "tardis",
                dict(
                    hidden_size=hidden,
                    memory_slots=SLOTS,
                    address_size=address,
                    content_size=hidden - address,
                ),
            ),
        },
        "equal parameters (recipes)": {
            "nn.LSTM": ("lstm", dict(hidden_size=240)),
            "LSTM LN": ("lstm", dict(hidden_size=240, layer_norm=True)),
            "LSTM LN+ZO": ("lstm", dict(hidden_size=240, layer_norm=True, zoneout=0.3)),
            "ARMIN": ("armin", dict(hidden_size=128, memory_slots=SLOTS)),
            "ARMIN ZO": ("armin", dict(hidden_size=128, memory_slots=SLOTS, zoneout=0.3)),
            "TARDIS": ("tardis", dict(hidden_size=194, memory_slots=SLOTS, address_size=8, content_size=32)),
        },
    }


def build(name: str, kwargs: dict) -> tuple[CharLM, torch.optim.Optimizer]:
    model = CharLM(VOCAB, name, embedding_size=EMBEDDING, **kwargs)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def train_call(model: CharLM, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model.train()
    logits, _ = model(x[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def infer_call(model: CharLM, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model.eval()
    with torch.no_grad():
        model(x[:, :-1])


CALLS: dict[str, Callable] = {"train": train_call, "infer": infer_call}


def peak_memory_mb(name: str, kwargs: dict, mode: str, batch: int, steps: int, threads: int) -> float:
    """Peak-RSS growth of one call in a fresh process (see the module docstring)."""
    code = (
        "import sys, json; sys.path.insert(0, %r); import bench_charlm as b; "
        "print(json.dumps(b._child(*json.loads(sys.argv[1]))))" % str(Path(__file__).parent)
    )
    args = json.dumps([name, kwargs, mode, batch, steps, threads])
    out = subprocess.run([sys.executable, "-c", code, args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _child(name: str, kwargs: dict, mode: str, batch: int, steps: int, threads: int) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, optimizer = build(name, kwargs)
    CALLS[mode](model, optimizer, torch.randint(0, VOCAB, (1, 3)))  # tiny warm-up
    with open("/proc/self/clear_refs", "w") as fh:  # reset the peak RSS (VmHWM) to the current RSS
        fh.write("5")
    rss = _status_kb("VmRSS")
    CALLS[mode](model, optimizer, torch.randint(0, VOCAB, (batch, steps + 1)))
    return max(0, _status_kb("VmHWM") - rss) / 1024


def _status_kb(key: str) -> int:
    """A kB field of /proc/self/status (VmRSS: resident set now; VmHWM: its peak)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def run(args: argparse.Namespace, batch_sizes: list[int]) -> list[dict]:
    records = []
    for group, models in specs(args.hidden).items():
        built = {}
        for label, (name, kwargs) in models.items():
            torch.manual_seed(0)
            built[label] = build(name, kwargs)
        for batch in batch_sizes:
            x = torch.randint(0, VOCAB, (batch, args.steps + 1))
            for mode, call in CALLS.items():
                calls = {label: (lambda m=m, o=o: call(m, o, x)) for label, (m, o) in built.items()}
                times = time_round_robin(calls, args.warmup, args.repeats)
                for label, seconds in times.items():
                    name, kwargs = models[label]
                    record = {
                        "group": group,
                        "mode": mode,
                        "batch": batch,
                        "model": label,
                        "steps": args.steps,
                        "parameters": sum(p.numel() for p in built[label][0].parameters()),
                        "chars_per_s": batch * args.steps / statistics.median(seconds),
                        "speed_vs_reference": statistics.median(
                            r / s for r, s in zip(times[REFERENCE], seconds)
                        ),
                        "reference": REFERENCE,
                    }
                    if not args.no_memory:
                        record["peak_mb"] = peak_memory_mb(
                            name, kwargs, mode, batch, args.steps, args.threads
                        )
                    records.append(record)
    return records


def markdown_table(records: list[dict]) -> str:
    memory = any("peak_mb" in r for r in records)
    lines = [
        "| group | mode | batch | model | parameters | chars/s | speed ÷ nn.LSTM |"
        + (" peak memory (MB) |" if memory else ""),
        "|---|---|---:|---|---:|---:|---:|" + ("---:|" if memory else ""),
    ]
    for r in records:
        peak = f" {r['peak_mb']:.1f} |" if memory else ""
        lines.append(
            f"| {r['group']} | {r['mode']} | {r['batch']} | {r['model']} | "
            f"{r['parameters']:,} | {r['chars_per_s']:,.0f} | {r['speed_vs_reference']:.2f} |" + peak
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", default="1,32", help="comma-separated (default: 1,32)")
    parser.add_argument("--steps", type=int, default=150, help="segment length T (default 150)")
    parser.add_argument("--hidden", type=int, default=256, help="the equal-hidden-size group's d_h")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds; medians (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument("--json", metavar="OUT", help="also write the records and settings as JSON")
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    torch.set_num_threads(args.threads)
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    records = run(args, batch_sizes)
    settings = {
        "torch": torch.__version__,
        "mannlab": mannlab.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "steps": args.steps,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "batch_sizes": batch_sizes,
        "total_seconds": round(time.perf_counter() - start, 1),
        "load_average_1min_start": round(load_before, 2),
        "load_average_1min_end": round(os.getloadavg()[0], 2),
    }
    print(
        f"T={args.steps}, threads={args.threads}, median of {args.repeats} (warm-up {args.warmup}), "
        f"torch {torch.__version__}, {settings['total_seconds']} s total, load average "
        f"{settings['load_average_1min_start']} -> {settings['load_average_1min_end']} on "
        f"{os.cpu_count()} cores\n"
    )
    print(markdown_table(records))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"settings": settings, "records": records}, handle, indent=2)


if __name__ == "__main__":
    main()
