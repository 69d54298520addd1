"""Speed of the NTM copy configuration, as ratios to a torch.nn.LSTMCell loop.

Measures, per time step, the median over several repeats of:
  train  forward + loss + backward over a whole sequence, divided by its length T
  infer  forward under torch.no_grad(), divided by T
for three models measured in the same run, on the same inputs:
  NTM        mannlab.NTM(9, 8), 100-unit LSTM controller, 128 x 20 memory,
             one read and one write head (the NTM paper's copy configuration)
  LSTMCell   torch.nn.LSTMCell(9, 100) stepped in a Python loop + Linear(100, 8):
             the reference, since the NTM also steps its controller in Python
  LSTM       torch.nn.LSTM(9, 100) (the fused sequence op) + Linear, for information
  NTM (tensor path)  the same NTM with the compiled kernels switched off (mannlab.ops.use_kernels)
  pytorch-ntm  loudinthecloud/pytorch-ntm's EncapsulatedNTM in the same configuration (100-unit
             LSTM controller, 128 x 20 memory, one read and one write head, copy width 8),
             imported from a checkout given with --pytorch-ntm DIR (not measured without it);
             its outputs are already sigmoids, which the loss here takes as logits (one more
             element-wise op, the same work otherwise)

and, once per training setting (untimed), the bytes autograd keeps for the
backward pass (unique tensor storages saved during the forward): the
activation memory a training step needs beyond the weights; and the peak memory of a
training step: how far the process's resident set (Linux's VmHWM, reset before the step
through /proc/self/clear_refs, after glibc's malloc_trim has returned the free heap) rises
above where it stood: everything the step allocates at once, tensors, NumPy arrays of the
kernels and the allocators' overhead ("n/a" where Linux's counters are not available).

    python benchmarks/bench_ntm.py                       # batch 1 and 32, T=41, 1 thread
    python benchmarks/bench_ntm.py --pytorch-ntm ~/src/pytorch-ntm
    python benchmarks/bench_ntm.py --threads 2 --json bench.json

One thread by default: on a small machine, intra-op threads mostly add noise,
and the ratio to LSTMCell is what should stay comparable between machines.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import mannlab
from mannlab.ops import use_kernels

INPUT, OUTPUT, HIDDEN = 9, 8, 100  # copy task: 8 bits + delimiter channel in, 8 bits out


class LSTMCellLoop(nn.Module):
    """The reference: an LSTMCell stepped over time in Python, with a linear head."""

    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.hidden = hidden
        self.cell = nn.LSTMCell(INPUT, hidden)
        self.head = nn.Linear(hidden, OUTPUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = c = x.new_zeros(x.shape[0], self.hidden)
        outputs = []
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
            outputs.append(h)
        return self.head(torch.stack(outputs, dim=1))


class FusedLSTM(nn.Module):
    """torch.nn.LSTM over the whole sequence (one fused op), with a linear head."""

    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.lstm = nn.LSTM(INPUT, hidden, batch_first=True)
        self.head = nn.Linear(hidden, OUTPUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0])


class Logits(nn.Module):
    """A mannlab sequence model, returning only the logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[0]


class TensorPath(nn.Module):
    """``model`` with the compiled kernels switched off for its calls (its attributes are
    the model's): the per-step tensor path of the same weights."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        with use_kernels(False):
            return self.model(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)


def ntm_copy() -> nn.Module:
    """mannlab.NTM in the NTM paper's copy configuration."""
    return Logits(
        mannlab.NTM(
            INPUT,
            OUTPUT,
            controller="lstm",
            controller_size=HIDDEN,
            memory_slots=128,
            memory_width=20,
            read_heads=1,
            write_heads=1,
        )
    )


class PytorchNTM(nn.Module):
    """loudinthecloud/pytorch-ntm's EncapsulatedNTM (``aio``, its package ``ntm``) in the copy
    configuration, stepped over a (B, T, 9) input as its copy task steps it."""

    def __init__(self, aio):
        super().__init__()
        self.ntm = aio.EncapsulatedNTM(INPUT, OUTPUT, HIDDEN, 1, 1, 128, 20)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ntm.init_sequence(x.shape[0])
        return torch.stack([self.ntm(x_t)[0] for x_t in x.unbind(1)], dim=1)


def import_pytorch_ntm(directory: str):
    """The ``ntm.aio`` module of a pytorch-ntm checkout at ``directory``."""
    if not os.path.isfile(os.path.join(directory, "ntm", "aio.py")):
        raise SystemExit(f"--pytorch-ntm: expected a pytorch-ntm checkout with ntm/aio.py, got {directory!r}")
    sys.path.insert(0, os.path.abspath(directory))
    try:
        return importlib.import_module("ntm.aio")
    finally:
        sys.path.pop(0)


MODELS: dict[str, Callable[[], nn.Module]] = {"NTM": ntm_copy, "LSTMCell": LSTMCellLoop, "LSTM": FusedLSTM}
REFERENCE = "LSTMCell"


def train_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    """Forward, BCE loss over every step, and backward (no optimizer update)."""
    model.zero_grad(set_to_none=True)
    F.binary_cross_entropy_with_logits(model(x), target).backward()


def infer_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    with torch.no_grad():
        model(x)


def eval_infer_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    """Forward only, in eval mode (argmax addressing for discrete models), without gradients."""
    model.eval()
    try:
        infer_step(model, x, target)
    finally:
        model.train()


def time_round_robin(
    calls: dict[str, Callable[[], None]],
    warmup: int,
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Times of each call on ``clock`` (default wall; time.process_time for CPU seconds),
    ``repeats`` rounds after ``warmup`` untimed rounds.

    The models take turns within every round (in a rotating order), so a change of
    machine load during the run slows all of them alike instead of one of them.
    """
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(warmup + repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            calls[name]()
            if round_index >= warmup:
                times[name].append(clock() - start)
    return times


#: the clocks time_round_robin can read: wall seconds, or CPU seconds of this process (fairer
#: on a machine shared with other jobs)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def cpu_round_robin(
    calls: dict[str, Callable[[], None]], warmup: int, repeats: int
) -> dict[str, list[float]]:
    """time_round_robin in CPU seconds of this process."""
    return time_round_robin(calls, warmup, repeats, clock=CLOCKS["cpu"])


def saved_for_backward_bytes(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> int:
    """Bytes of the unique storages autograd saves during one training forward."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()  # views of one storage count once
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = F.binary_cross_entropy_with_logits(model(x), target)
    loss.backward()  # free the graph
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params)  # activations only


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def peak_memory_mb(call: Callable[[], None]) -> float | None:
    """How far the resident set rises above its level before ``call`` (MB), from Linux's
    high-water mark VmHWM reset through /proc/self/clear_refs; None elsewhere. The freed
    heap goes back to the system first (glibc's malloc_trim), so the step's allocations
    show as new resident pages rather than reuse."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")  # reset VmHWM to the current resident set
        before = _status_kb("VmRSS")
        call()
        return (_status_kb("VmHWM") - before) / 1024
    except OSError:
        return None


def run(
    models: dict[str, nn.Module],
    reference: str,
    batch_sizes: list[int],
    steps: int,
    repeats: int,
    warmup: int,
    train: Callable = train_step,
    infer: Callable = infer_step,
    saved_memory: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    peak_memory: bool = False,
) -> list[dict]:
    """Time every model, mode and batch size; return one record per measurement.

    ``us_per_step`` is the median time per call divided by ``steps``; ``ratio`` is the
    median over rounds of (this model's time / the reference's time in the same round);
    with ``saved_memory`` training records also hold ``saved_mb``, with ``peak_memory``
    ``peak_mb`` (see above).
    """
    records = []
    for batch in batch_sizes:
        x = torch.randint(0, 2, (batch, steps, INPUT)).float()
        target = torch.randint(0, 2, (batch, steps, OUTPUT)).float()
        for mode, step_fn in (("train", train), ("infer", infer)):
            calls = {name: (lambda m=model: step_fn(m, x, target)) for name, model in models.items()}
            times = time_round_robin(calls, warmup, repeats, clock)
            for name, seconds in times.items():
                ratios = [a / b for a, b in zip(seconds, times[reference])]
                record = {
                    "mode": mode,
                    "batch": batch,
                    "model": name,
                    "steps": steps,
                    "us_per_step": 1e6 * statistics.median(seconds) / steps,
                    "us_per_step_min": 1e6 * min(seconds) / steps,
                    "reference": reference,
                    "ratio": statistics.median(ratios),
                }
                if mode == "train" and saved_memory:
                    record["saved_mb"] = saved_for_backward_bytes(models[name], x, target) / 2**20
                if mode == "train" and peak_memory:
                    record["peak_mb"] = peak_memory_mb(calls[name])
                records.append(record)
    return records


def markdown_table(records: list[dict], notes: dict[str, str] | None = None) -> str:
    """The records as a markdown table; ``notes`` adds a row per model not measured."""
    reference = records[0]["reference"]
    memory = any("saved_mb" in r for r in records)
    peak = any("peak_mb" in r for r in records)
    lines = [
        f"| mode | batch | model | µs / step | × {reference} |"
        + (" saved for backward (MB) |" if memory else "")
        + (" peak (MB) |" if peak else ""),
        "|---|---:|---|---:|---:|" + ("---:|" if memory else "") + ("---:|" if peak else ""),
    ]
    for r in records:
        saved = (f" {r['saved_mb']:.2f} |" if "saved_mb" in r else " |") if memory else ""
        if peak:
            value = r.get("peak_mb")
            saved += f" {value:.1f} |" if value is not None else (" n/a |" if "peak_mb" in r else " |")
        lines.append(
            f"| {r['mode']} | {r['batch']} | {r['model']} | {r['us_per_step']:.0f} "
            f"| {r['ratio']:.2f} |{saved}"
        )
    for name, why in (notes or {}).items():
        lines.append(f"| | | {name} | {why} | |" + (" |" if memory else "") + (" |" if peak else ""))
    return "\n".join(lines)


def report(
    args: argparse.Namespace,
    batch_sizes: list[int],
    models: dict[str, nn.Module],
    reference: str,
    notes: dict | None = None,
    not_measured: dict[str, str] | None = None,
    **run_options,
) -> None:
    """Time the models, print the settings line and the table, write --json if asked.

    ``notes`` go into the JSON settings and are printed under the settings line;
    ``not_measured`` (model -> why) are listed under the table.
    """
    settings = {
        "torch": torch.__version__,
        "mannlab": mannlab.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "threads": args.threads,
        "steps": args.steps,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "batch_sizes": batch_sizes,
        **(notes or {}),
    }
    start = time.perf_counter()
    records = run(models, reference, batch_sizes, args.steps, args.repeats, args.warmup, **run_options)
    settings["total_seconds"] = round(time.perf_counter() - start, 1)
    # Other processes on the machine add noise; the 1-minute load average shows how much.
    settings["load_average_1min"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    print(
        f"T={args.steps}, threads={args.threads}, median of {args.repeats} "
        f"(warm-up {args.warmup}), torch {torch.__version__}, "
        f"{settings['total_seconds']} s total, load average {settings['load_average_1min']} "
        f"on {os.cpu_count()} cores\n"
    )
    for key, value in (notes or {}).items():
        if value:
            print(f"{key}: {value}\n")
    print(markdown_table(records, not_measured))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"settings": settings, "records": records}, handle, indent=2)


def parse_args(
    argv: list[str] | None,
    description: str,
    add_options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> tuple[argparse.Namespace, list[int]]:
    """The options every benchmark here shares, plus a script's own (``add_options`` adds
    them to the parser); returns them and the batch sizes."""
    parser = argparse.ArgumentParser(description=description)
    if add_options is not None:
        add_options(parser)
    parser.add_argument("--batch-sizes", default="1,32", help="comma-separated (default: 1,32)")
    parser.add_argument(
        "--steps",
        type=int,
        default=41,
        help="sequence length T (default 41: copy of length 20 with delimiter)",
    )
    parser.add_argument(
        "--repeats", type=int, default=15, help="timed rounds; medians are reported (default 15)"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds before timing (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--json", metavar="OUT", help="also write the records and settings as JSON")
    args = parser.parse_args(argv)
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batch-sizes must be comma-separated integers, got {args.batch_sizes!r}")
    if (
        not batch_sizes
        or min(batch_sizes) < 1
        or args.steps < 1
        or args.repeats < 1
        or args.warmup < 0
        or args.threads < 1
    ):
        parser.error("batch sizes, --steps, --repeats and --threads must be >= 1, --warmup >= 0")

    return args, batch_sizes


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pytorch-ntm",
        metavar="DIR",
        help="a checkout of loudinthecloud/pytorch-ntm to measure against (not measured without it)",
    )
    parser.add_argument(
        "--no-tensor-path", action="store_true", help="leave out the NTM's tensor path (kernels off)"
    )


def main(argv: list[str] | None = None) -> None:
    args, batch_sizes = parse_args(argv, __doc__.split("\n")[0], add_options)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {name: make() for name, make in MODELS.items()}
    if not args.no_tensor_path:
        models["NTM (tensor path)"] = TensorPath(models["NTM"])
    not_measured = {}
    if args.pytorch_ntm:
        models["pytorch-ntm"] = PytorchNTM(import_pytorch_ntm(args.pytorch_ntm))
    else:
        not_measured["pytorch-ntm"] = "not measured (--pytorch-ntm DIR)"
    report(args, batch_sizes, models, REFERENCE, not_measured=not_measured, peak_memory=True)


if __name__ == "__main__":
    main()
