"""Registers, spills, local and shared memory of the memory models' Triton kernels, compiled for
a GPU on a machine without one.

For each model of bench_gpu.py whose cell has Triton kernels (``mannlab.ops.<name>.
triton_kernels``: ARMIN, the NTM, the D-NTM, and any model that gains them), one training step
runs on CPU tensors with the kernels forced and every kernel launch caught instead of run: the
launch code (ops/<name>/triton_sequence.py) works out the arguments, constexprs, BLOCK_B and
num_warps as it does on a GPU (the rows per program as on a GPU of ``--sms`` multiprocessors,
or what ``--rows`` forces). Each distinct launch is then compiled for the target (sm_90 by
default, Triton's own specialisation of the arguments) and ptxas' report is read: registers per
thread, spill stores and loads, the stack frame (local memory per thread) and shared memory.

    python benchmarks/triton_resources.py                        # every model with kernels
    python benchmarks/triton_resources.py --models armin,ntm --json resources.json
    python benchmarks/triton_resources.py --models ntm --num-warps 8   # try another launch
    python benchmarks/triton_resources.py --models ntm --batch 512 --rows 16   # force the rows
    python benchmarks/triton_resources.py --models tardis --options \
        '{"hidden_size": 128, "memory_slots": 128, "address_size": 32, "content_size": 96,
          "read_mlp_size": 128, "layer_norm": true, "recurrent_dropout": 0.1}'   # other sizes

No GPU needed; a compile takes a minute or a few on a small CPU (Triton's cache skips the
compile on a rerun, not the ptxas report: that is run again on the cached PTX).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu  # noqa: E402
from mannlab.ops import dispatch, triton_math, use_kernels  # noqa: E402


def triton_models() -> list[str]:
    """bench_gpu.py's models whose op has Triton kernels covering their configuration."""
    names = []
    for name in bench_gpu.MODELS:
        model = bench_gpu.build(name)
        op = getattr(model._modules.get("cell"), "op", None)
        if (
            op is not None
            and dispatch.load_triton(op.NAME) is not None
            and bench_gpu.op_covers(model, "triton")
        ):
            names.append(name)
    return names


@contextlib.contextmanager
def caught_launches():
    """Every JITFunction launch in the block, as (kernel, args, kwargs), instead of run. The
    outputs the kernels would write are left as allocated; the NaN and infinities of that
    uninitialised memory become zeros so that the steps after (losses that check their input)
    go on."""
    launches: list[tuple[JITFunction, tuple, dict]] = []
    run = JITFunction.run

    def catch(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, dict(kwargs)))
        for arg in args:
            if isinstance(arg, torch.Tensor) and arg.is_floating_point():
                arg.nan_to_num_(0.0, 0.0, 0.0)

    JITFunction.run = catch
    try:
        yield launches
    finally:
        JITFunction.run = run


def launches_of(name: str, batch: int, options: dict | None = None) -> list[tuple[JITFunction, tuple, dict]]:
    """The kernel launches of one training step of bench_gpu's model ``name`` (forward, loss,
    backward) on the copy task's shapes; ``options`` override its constructor arguments."""
    torch.manual_seed(0)
    model = bench_gpu.build(name, **(options or {})).train()
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (batch, bench_gpu.T, bench_gpu.INPUT), generator=gen).float()
    y = torch.randint(0, 2, (batch, bench_gpu.T, bench_gpu.OUTPUT), generator=gen).float()
    with caught_launches() as launches, use_kernels("triton"):
        bench_gpu.training_step(model, x, y)()
    return launches


_PTXAS = {
    "registers": r"Used (\d+) registers",
    "stack_bytes": r"(\d+) bytes stack frame",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
}


def ptxas_report(ptx: str, capability: int, fp_fusion: bool) -> dict:
    """ptxas -v on the PTX with the flags (and the ptxas) Triton's NVIDIA backend compiles with."""
    ptxas = knobs.nvidia.ptxas_blackwell if capability >= 90 else knobs.nvidia.ptxas
    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        Path(src).write_text(ptx)
        flags = ["-lineinfo", "-v", "--regAllocOptLevel=2", f"--gpu-name={arch}"]
        if not fp_fusion:
            flags.append("--fmad=false")
        done = subprocess.run(
            [ptxas.path, *flags, src, "-o", src + ".o"], capture_output=True, text=True, check=True
        )
    log = done.stderr + done.stdout
    return {key: int(m.group(1)) if (m := re.search(pattern, log)) else 0 for key, pattern in _PTXAS.items()}


def compile_launch(kernel: JITFunction, args: tuple, kwargs: dict, target: GPUTarget, num_warps: int | None):
    """Compile one caught launch for ``target`` as JITFunction.run would on that device."""
    backend = make_backend(target)
    kwargs = dict(kwargs, debug=False)
    if num_warps is not None:
        kwargs["num_warps"] = num_warps
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    source = ASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(source, target=target, options=options.__dict__)


def measure(args: argparse.Namespace) -> list[dict]:
    target = GPUTarget("cuda", args.capability, 32)
    records, seen = [], set()
    for name in args.models:
        for kernel, call_args, kwargs in launches_of(name, args.batch, args.options):
            if args.kernels and not any(k in kernel.__name__ for k in args.kernels):
                continue
            constexprs = {p.name: v for p, v in zip(kernel.params, call_args) if p.is_constexpr}
            constexprs.update(kwargs)
            key = (kernel.module, kernel.__name__, json.dumps(constexprs, sort_keys=True, default=str))
            if key in seen:
                continue
            seen.add(key)
            start = time.perf_counter()
            compiled = compile_launch(kernel, call_args, kwargs, target, args.num_warps)
            seconds = time.perf_counter() - start
            meta = compiled.metadata
            row = {
                "model": name,
                "module": kernel.module,
                "kernel": kernel.__name__,
                "num_warps": meta.num_warps,
                "rows": constexprs.get("BLOCK_B"),
                **ptxas_report(compiled.asm["ptx"], args.capability, meta.enable_fp_fusion),
                "shared_bytes": meta.shared,
                "compile_s": round(seconds, 1),
                "constexprs": constexprs,
            }
            records.append(row)
            print(line(row), flush=True)
    return records


def line(row: dict) -> str:
    return (
        f"{row['model']:>15} {row['kernel']:<22} rows {row['rows']} warps {row['num_warps']}: "
        f"{row['registers']} regs, "
        f"spills {row['spill_stores']} B stored / {row['spill_loads']} B loaded, "
        f"stack {row['stack_bytes']} B, shared {row['shared_bytes']} B ({row['compile_s']} s)"
    )


def table(records: list[dict]) -> str:
    lines = [
        "| model | kernel | rows | warps | registers | spill stores B | spill loads B | stack (local) B "
        "| shared B |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['model']} | {r['kernel']} | {r['rows']} | {r['num_warps']} | {r['registers']} | "
            f"{r['spill_stores']} | "
            f"{r['spill_loads']} | {r['stack_bytes']} | {r['shared_bytes']} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--models", help="comma-separated bench_gpu.py models (default: those with kernels)")
    parser.add_argument("--kernels", default="", help="comma-separated parts of kernel names to keep")
    parser.add_argument("--batch", type=int, default=32, help="batch of the caught training step")
    parser.add_argument("--capability", type=int, default=90, help="compute capability (90: H100, H200)")
    parser.add_argument("--num-warps", type=int, help="compile with this num_warps instead of the launch's")
    parser.add_argument(
        "--sms", type=int, default=132, help="the GPU's multiprocessors the rows per program are chosen for"
    )
    parser.add_argument(
        "--rows", type=int, help=f"force the rows per program ({triton_math.ROWS_VARIABLE}) of the kernels"
    )
    parser.add_argument("--json", type=Path, help="also write the records and settings as JSON")
    parser.add_argument(
        "--options",
        type=json.loads,
        default={},
        help="a JSON object of constructor arguments over the models' own",
    )
    args = parser.parse_args(argv)
    if not isinstance(args.options, dict):
        parser.error(f"--options takes a JSON object, got {args.options!r}")
    args.models = [m for m in args.models.split(",") if m] if args.models else triton_models()
    unknown = [m for m in args.models if m not in bench_gpu.MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(bench_gpu.MODELS)}")
    args.kernels = [k for k in args.kernels.split(",") if k]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("triton_resources.py compiles the kernels: run it without TRITON_INTERPRET=1")
    # the launches are caught on CPU tensors: count the SMs of the GPU they are compiled for
    triton_math.multiprocessors = lambda device: args.sms
    if args.rows is not None:
        os.environ[triton_math.ROWS_VARIABLE] = str(args.rows)
    settings = {"triton": triton.__version__, "capability": args.capability, "batch": args.batch}
    settings.update(sms=args.sms, rows=args.rows or "chosen")
    if args.options:
        settings["options"] = args.options
    print(" ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    records = measure(args)
    print(table(records))
    if args.json:
        args.json.write_text(json.dumps({"settings": settings, "records": records}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
