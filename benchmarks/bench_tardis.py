"""Speed of TARDIS, compiled whole-sequence kernels against the per-step tensor path, as ratios
to LSTM references measured in the same run, in CPU seconds.

Two parts, each timed in rounds where the models take turns in a rotating order (so a change
of machine load slows them alike); every time is CPU time of this process (time.process_time:
one torch thread, the kernels' BLAS limited to one thread), not wall time, so other jobs on a
shared machine inflate it less:

copy (the sizes of recipes/tardis-copy-*.toml: hidden 120, 16 cells of 4 address + 32 content
features; input 9, output 8, random binary inputs), per time step (whole sequence / T):
  train  forward + loss + backward (no optimizer update); REINFORCE adds aux_loss (the eq. 17
         auxiliary reward and the estimator, what training/loop.py adds, reading the trace)
  infer  forward in eval mode under torch.no_grad() (argmax reads)
  models TARDIS gumbel (straight-through, learned 1/τ), TARDIS reinforce, each on the compiled
         path (mannlab.ops.tardis) and on the tensor path (mannlab.ops.use_kernels(False));
         LSTMCell(9, 120) stepped in Python + Linear (the reference, as in bench_armin.py) and
         nn.LSTM(9, 120) + Linear, for information
char-LM (bench_charlm.py's protocol: CharLM with embedding 64 over 50 symbols, segments of
T = 150, train = forward + cross-entropy + backward + Adam step): TARDIS of
recipes/ptb-char-tardis.toml (hidden 194, 20 cells of 8 + 32, layer norm, gumbel reads) on both
paths, against nn.LSTM(240) of the same parameter count; the ratio is bench_charlm.py's
"speed ÷ nn.LSTM" (median over rounds of t_nn.LSTM / t_model: above 1 faster than nn.LSTM).

    python benchmarks/bench_tardis.py                   # copy at batch 1 and 16, char-LM 1 and 32
    python benchmarks/bench_tardis.py --batch-sizes 1 --no-charlm --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mannlab  # noqa: E402
from bench_ntm import (
    INPUT,
    OUTPUT,
    FusedLSTM,
    LSTMCellLoop,
    TensorPath,  # noqa: E402
    cpu_round_robin,
    saved_for_backward_bytes,
)
from mannlab.tasks.base import step_nll  # noqa: E402

HIDDEN, SLOTS, ADDRESS, CONTENT = 120, 16, 4, 32  # recipes/tardis-copy-*.toml
REFERENCE = "LSTMCell"
CHARLM_REFERENCE = "nn.LSTM"


class TARDISLogits(nn.Module):
    """TARDIS on the copy sizes returning logits; ``train_loss`` is what one training step
    differentiates (with REINFORCE: + aux_loss with the auxiliary reward, as training/loop.py)."""

    def __init__(self, addressing: str, kernels: bool):
        super().__init__()
        model = mannlab.TARDIS(
            INPUT,
            OUTPUT,
            hidden_size=HIDDEN,
            memory_slots=SLOTS,
            address_size=ADDRESS,
            content_size=CONTENT,
            addressing=addressing,
        )
        self.model = model if kernels else TensorPath(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[0]

    def train_loss(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if not self.model.uses_aux_loss:
            return F.binary_cross_entropy_with_logits(self(x), target)
        logits, _, trace = self.model(x, return_trace=True)
        mask = torch.ones(target.shape[:2])
        nll = step_nll(logits, target, mask)
        return F.binary_cross_entropy_with_logits(logits, target) + self.model.aux_loss(
            trace, nll.detach(), score=lambda out: step_nll(out, target, mask)
        )


def copy_models() -> dict[str, nn.Module]:
    return {
        "TARDIS gumbel": TARDISLogits("gumbel", True),
        "TARDIS gumbel (tensor path)": TARDISLogits("gumbel", False),
        "TARDIS reinforce": TARDISLogits("reinforce", True),
        "TARDIS reinforce (tensor path)": TARDISLogits("reinforce", False),
        "LSTMCell": LSTMCellLoop(HIDDEN),
        "LSTM": FusedLSTM(HIDDEN),
    }


def train_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    model.train()
    model.zero_grad(set_to_none=True)
    loss = (
        model.train_loss(x, target)
        if hasattr(model, "train_loss")
        else F.binary_cross_entropy_with_logits(model(x), target)
    )
    loss.backward()


def infer_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    finally:
        model.train()


def run_copy(args: argparse.Namespace, batch_sizes: list[int]) -> list[dict]:
    torch.manual_seed(0)
    models = copy_models()
    records = []
    for batch in batch_sizes:
        x = torch.randint(0, 2, (batch, args.steps, INPUT)).float()
        target = torch.randint(0, 2, (batch, args.steps, OUTPUT)).float()
        for mode, step_fn in (("train", train_step), ("infer", infer_step)):
            calls = {name: (lambda m=model: step_fn(m, x, target)) for name, model in models.items()}
            times = cpu_round_robin(calls, args.warmup, args.repeats)
            for name, seconds in times.items():
                record = {
                    "part": "copy",
                    "mode": mode,
                    "batch": batch,
                    "model": name,
                    "steps": args.steps,
                    "us_per_step": 1e6 * statistics.median(seconds) / args.steps,
                    "reference": REFERENCE,
                    "ratio": statistics.median(a / b for a, b in zip(seconds, times[REFERENCE])),
                }
                if mode == "train":
                    record["saved_mb"] = saved_for_backward_bytes(models[name], x, target) / 2**20
                records.append(record)
    return records


def run_charlm(args: argparse.Namespace, batch_sizes: list[int]) -> list[dict]:
    from bench_charlm import CALLS, VOCAB, build

    specs = {
        "nn.LSTM": ("lstm", dict(hidden_size=240)),
        "TARDIS": (
            "tardis",
            dict(hidden_size=194, memory_slots=20, address_size=8, content_size=32, layer_norm=True),
        ),
        "TARDIS (tensor path)": (
            "tardis",
            dict(hidden_size=194, memory_slots=20, address_size=8, content_size=32, layer_norm=True),
        ),
    }
    built = {}
    for label, (name, kwargs) in specs.items():
        torch.manual_seed(0)
        built[label] = build(name, kwargs)
    charlm = built["TARDIS (tensor path)"][0]
    charlm.core = TensorPath(charlm.core)
    records = []
    for batch in batch_sizes:
        x = torch.randint(0, VOCAB, (batch, args.charlm_steps + 1))
        for mode, call in CALLS.items():
            calls = {label: (lambda m=m, o=o: call(m, o, x)) for label, (m, o) in built.items()}
            times = cpu_round_robin(calls, args.charlm_warmup, args.charlm_repeats)
            for label, seconds in times.items():
                records.append(
                    {
                        "part": "char-LM",
                        "mode": mode,
                        "batch": batch,
                        "model": label,
                        "steps": args.charlm_steps,
                        "parameters": sum(p.numel() for p in built[label][0].parameters()),
                        "chars_per_cpu_s": batch * args.charlm_steps / statistics.median(seconds),
                        "reference": CHARLM_REFERENCE,
                        "speed_vs_reference": statistics.median(
                            r / s for r, s in zip(times[CHARLM_REFERENCE], seconds)
                        ),
                    }
                )
    return records


def tables(records: list[dict]) -> str:
    copy = [r for r in records if r["part"] == "copy"]
    lm = [r for r in records if r["part"] == "char-LM"]
    out = []
    if copy:
        out += [
            "| mode | batch | model | CPU µs / step | × LSTMCell | saved for backward (MB) |",
            "|---|---:|---|---:|---:|---:|",
        ]
        out += [
            f"| {r['mode']} | {r['batch']} | {r['model']} | {r['us_per_step']:.0f} | "
            f"{r['ratio']:.2f} | {r['saved_mb']:.2f} |"
            if "saved_mb" in r
            else f"| {r['mode']} | {r['batch']} | {r['model']} | {r['us_per_step']:.0f} | "
            f"{r['ratio']:.2f} | |"
            for r in copy
        ]
    if lm:
        out += [
            "",
            "| mode | batch | model | parameters | chars / CPU s | speed ÷ nn.LSTM |",
            "|---|---:|---|---:|---:|---:|",
        ]
        out += [
            f"| {r['mode']} | {r['batch']} | {r['model']} | {r['parameters']:,} | "
            f"{r['chars_per_cpu_s']:,.0f} | {r['speed_vs_reference']:.2f} |"
            for r in lm
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", default="1,16", help="copy part (default: 1,16)")
    parser.add_argument("--steps", type=int, default=41, help="copy part's T (default 41)")
    parser.add_argument("--repeats", type=int, default=15, help="copy part's timed rounds (15)")
    parser.add_argument("--warmup", type=int, default=3, help="copy part's untimed rounds (3)")
    parser.add_argument("--charlm-batch-sizes", default="1,32", help="char-LM part (default: 1,32)")
    parser.add_argument("--charlm-steps", type=int, default=150, help="char-LM segment T (150)")
    parser.add_argument("--charlm-repeats", type=int, default=5, help="char-LM timed rounds (5)")
    parser.add_argument("--charlm-warmup", type=int, default=1, help="char-LM untimed rounds (1)")
    parser.add_argument("--no-charlm", action="store_true", help="skip the char-LM part")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--json", metavar="OUT", help="also write the records and settings as JSON")
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    lm_batch_sizes = [int(b) for b in args.charlm_batch_sizes.split(",") if b.strip()]
    torch.set_num_threads(args.threads)
    start, cpu_start, load_before = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    records = run_copy(args, batch_sizes)
    if not args.no_charlm:
        records += run_charlm(args, lm_batch_sizes)
    settings = {
        "torch": torch.__version__,
        "mannlab": mannlab.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "clock": "process CPU time",
        "steps": args.steps,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "batch_sizes": batch_sizes,
        "charlm_batch_sizes": [] if args.no_charlm else lm_batch_sizes,
        "charlm_steps": args.charlm_steps,
        "charlm_repeats": args.charlm_repeats,
        "total_seconds": round(time.perf_counter() - start, 1),
        "total_cpu_seconds": round(time.process_time() - cpu_start, 1),
        "load_average_1min_start": round(load_before, 2),
        "load_average_1min_end": round(os.getloadavg()[0], 2),
    }
    print(
        f"copy T={args.steps} (median of {args.repeats}, warm-up {args.warmup}), char-LM "
        f"T={args.charlm_steps} (median of {args.charlm_repeats}), threads={args.threads}, "
        f"CPU time, torch {torch.__version__}, {settings['total_seconds']} s total "
        f"({settings['total_cpu_seconds']} CPU s), load average "
        f"{settings['load_average_1min_start']} -> {settings['load_average_1min_end']} on "
        f"{os.cpu_count()} cores\n"
    )
    print(tables(records))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"settings": settings, "records": records}, handle, indent=2)


if __name__ == "__main__":
    main()
