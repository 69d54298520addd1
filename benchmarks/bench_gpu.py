"""Training-step speed of every memory model on a GPU, beside cuDNN, in one run.

For each model, at each batch size, the median time of one training step (forward, BCE
loss, backward, Adam update) on the copy task's shapes (T = 41: 20 inputs, a delimiter, 20
outputs; 9 input and 8 output bits), on:

  kernels   the Triton kernels where the configuration has them (mannlab.ops.<model>.
            triton_kernels: ARMIN, the NTM, the D-NTM, TARDIS, the DNC; forced, so kernels
            not yet marked GPU_CHECKED are measured too), else the tensor path
  tensor    the same model with the kernels switched off (use_kernels(False)): the
            step-by-step tensor path, launch-bound on a GPU
  compiled  the op's "compiled" backend (use_kernels("compiled")): its one-step function under
            torch.compile with CUDA graphs; "compiled-nographs" the same without them
  cuDNN     torch.nn.LSTM(9, width) + Linear(width, 8), width = the model's controller
            (hidden) width: the reference every ratio is against

and sequences per second (batch / step time). Models: the papers' copy configurations
(defaults of mannlab.NTM, DNC, DNTM, TARDIS, ARMIN), D-NTM soft and REINFORCE.

    python benchmarks/bench_gpu.py                               # batch 32, 512, 4096
    python benchmarks/bench_gpu.py --batch-sizes 32 --models armin,ntm,dntm-soft --json gpu.json
    python benchmarks/bench_gpu.py --device cpu --batch-sizes 4 --repeats 2   # a smoke run

Where a path would take too long (the tensor path at the largest batches), ``--budget``
seconds per measurement cap the rounds (at least one timed round after the warm-up).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import mannlab
from mannlab.ops import compiled, dispatch, use_kernels

T, INPUT, OUTPUT = 41, 9, 8

#: name -> (constructor arguments, the controller width cuDNN's LSTM gets)
MODELS: dict[str, tuple[dict, int]] = {
    "ntm": (dict(), 100),
    "dnc": (dict(), 128),
    "dntm-soft": (dict(addressing="soft"), 100),
    "dntm-reinforce": (dict(addressing="reinforce"), 100),
    "tardis": (dict(), 120),
    "armin": (dict(), 100),
}


def build(name: str, **options) -> nn.Module:
    """bench_gpu's model ``name``; ``options`` override its constructor arguments."""
    kwargs, _ = MODELS[name]
    family = name.split("-")[0]
    return mannlab.models.build_model(family, INPUT, OUTPUT, **{**kwargs, **options})


def op_covers(model: nn.Module, backend: str) -> bool:
    """Whether the model's op has ``backend`` and it covers the model's training pass."""
    cell = model._modules.get("cell")
    op = getattr(cell, "op", None)
    if op is None or backend not in op.BACKENDS:
        return False
    options = cell.op_options(False, True)
    return options is not None and op.covers(options, cell.op_weights(), backend)


def kernels_setting(model: nn.Module, device: torch.device) -> bool | str:
    """The kernels switch of the "kernels" path: the Triton kernels forced on a GPU where the
    model's configuration has them, whether or not they are marked checked there (running
    them here is the check), else the switch on."""
    cell = model._modules.get("cell")
    if device.type != "cuda" or getattr(cell, "op", None) is None:
        return True
    has = dispatch.load_triton(cell.op.NAME) is not None and op_covers(model, "triton")
    return "triton" if has else True


class CuDNNLSTM(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.lstm = nn.LSTM(INPUT, width, batch_first=True)
        self.head = nn.Linear(width, OUTPUT)

    def forward(self, x):
        return self.head(self.lstm(x)[0]), None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """One step: forward, BCE loss (plus the model's auxiliary loss, e.g. REINFORCE's), backward,
    Adam."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    aux = getattr(model, "uses_aux_loss", False)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        if aux:
            logits, _, trace = model(x, return_trace=True)
        else:
            logits, _ = model(x)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y)
        if aux:
            nll = nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none").sum(-1)
            loss = loss + model.aux_loss(trace, nll.detach())
        loss.backward()
        optimizer.step()

    return step


def median_seconds(step: Callable[[], None], device: torch.device, warmup: int, repeats: int, budget: float):
    """Median wall seconds of ``step`` after ``warmup`` rounds; fewer rounds where they would
    run past ``budget`` seconds (at least one)."""
    for _ in range(warmup):
        step()
    sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (not times or time.perf_counter() - start < budget):
        begin = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - begin)
    return statistics.median(times), len(times)


def measure(args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device)
    records = []
    for name in args.models:
        _, width = MODELS[name]
        for batch in args.batch_sizes:
            gen = torch.Generator().manual_seed(0)
            x = torch.randint(0, 2, (batch, T, INPUT), generator=gen).float().to(device)
            y = torch.randint(0, 2, (batch, T, OUTPUT), generator=gen).float().to(device)
            paths = {"cuDNN": (lambda w=width: CuDNNLSTM(w), True), "kernels": (lambda: build(name), True)}
            if not args.no_tensor_path:
                paths["tensor"] = (lambda: build(name), False)
            if not args.no_compiled and op_covers(build(name), "compiled"):
                paths["compiled"] = (lambda: build(name), "compiled")
                if device.type == "cuda":
                    paths["compiled-nographs"] = (lambda: build(name), "compiled")
            row = {"model": name, "batch": batch, "device": str(device)}
            for path, (make, kernels) in paths.items():
                torch.manual_seed(0)
                model = make().to(device).train()
                compiled.CUDA_GRAPHS = path != "compiled-nographs"
                setting = kernels if isinstance(kernels, str) else kernels and kernels_setting(model, device)
                with use_kernels(setting):
                    step = training_step(model, x, y)
                    try:
                        seconds, rounds = median_seconds(step, device, args.warmup, args.repeats, args.budget)
                    except torch.OutOfMemoryError:
                        row[path] = None
                        torch.cuda.empty_cache()
                        continue
                row[path] = {"ms": 1e3 * seconds, "rounds": rounds, "sequences_per_s": batch / seconds}
                del model, step
            base = row["cuDNN"]["ms"] if row.get("cuDNN") else None
            for path in ("kernels", "tensor", "compiled", "compiled-nographs"):
                if row.get(path) and base:
                    row[path]["x_cudnn"] = row[path]["ms"] / base
            if row.get("kernels") and row.get("tensor"):
                row["speedup_over_tensor"] = row["tensor"]["ms"] / row["kernels"]["ms"]
            records.append(row)
            print(line(row), flush=True)
    return records


def line(row: dict) -> str:
    def cell(path: str) -> str:
        value = row.get(path)
        if value is None:
            return f"{path} -" if path in row else ""
        ratio = f" ({value['x_cudnn']:.1f}x cuDNN)" if "x_cudnn" in value else ""
        return f"{path} {value['ms']:.2f} ms{ratio}"

    paths = ("kernels", "compiled", "compiled-nographs", "tensor", "cuDNN")
    parts = [f"{row['model']:>15} B={row['batch']:<5}", *(cell(path) for path in paths)]
    if "speedup_over_tensor" in row:
        parts.append(f"kernels {row['speedup_over_tensor']:.1f}x faster than tensor")
    return " | ".join(p for p in parts if p)


def table(records: list[dict]) -> str:
    """The records as a Markdown table."""
    nan = float("nan")
    lines = [
        "| model | batch | kernels ms | compiled ms | compiled, no graphs ms | tensor ms | cuDNN ms "
        "| kernels x cuDNN | compiled x cuDNN | tensor / kernels | seq/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in records:
        k, g, n, t, c = (
            row.get(p) or {} for p in ("kernels", "compiled", "compiled-nographs", "tensor", "cuDNN")
        )
        ms = [f"{v['ms']:.2f}" if v else "-" for v in (k, g, n, t, c)]
        lines.append(
            f"| {row['model']} | {row['batch']} | {' | '.join(ms)} | {k.get('x_cudnn', nan):.1f}x | "
            f"{g.get('x_cudnn', nan):.1f}x | {row.get('speedup_over_tensor', nan):.1f}x | "
            f"{k.get('sequences_per_s', nan):.0f} |"
        )
    return "\n".join(lines)


def settings(args: argparse.Namespace) -> dict:
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": args.device,
        "T": T,
        "warmup": args.warmup,
        "repeats": args.repeats,
    }
    if args.device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    names = ", ".join(MODELS)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {names}")
    parser.add_argument("--batch-sizes", default="32,512,4096", help="comma-separated batch sizes")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (Triton compiles here)")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps; the median is reported")
    parser.add_argument("--budget", type=float, default=5.0, help="seconds per measurement at most")
    parser.add_argument("--no-tensor-path", action="store_true", help="leave out the models' tensor paths")
    parser.add_argument("--no-compiled", action="store_true", help="leave out the compiled step")
    parser.add_argument("--json", type=Path, help="also write the records and settings as JSON")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    info = settings(args)
    print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    records = measure(args)
    print(table(records))
    if args.json:
        args.json.write_text(json.dumps({"settings": info, "records": records}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
