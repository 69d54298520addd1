"""`mannlab simulate wormhole` and `mannlab gradflow`: run an analysis (mannlab.analysis),
write its CSV and PNG (mannlab.reporting), print the numbers."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Sequence

import mannlab
from mannlab.analysis import wormhole
from mannlab.cli.arguments import name_list, path, positive_int, positive_int_list, seed
from mannlab.config import load_config
from mannlab.errors import ConfigError
from mannlab.reporting import analysis_figures as figures
from mannlab.reporting.csv_files import write_csv
from mannlab.reporting.summaries import duration
from mannlab.tasks.base import Task

SIMULATE_HELP = """\
Simulations of the analyses of the papers. Available: wormhole (TARDIS paper, section 6).
"""

WORMHOLE_HELP = """\
Simulate the read/write heads of untrained MANNs that pick memory cells uniformly at random
(TARDIS paper, section 6), vectorised over simulations, for three schemes:
  tardis  sequential writes for the first k steps, then write into the cell just read
  umann   independent uniform read and write heads
  urmann  sequential writes (wrapping round when k < T), uniform reads
Writes into --out:
  wormhole-lengths.png/.csv  figure 3: eq. 40 wormhole path length stored in each cell
                             over time (T = --steps, k = --cells) for TARDIS and uMANN,
                             beside the analytic t/k - 1
  wormhole-paths.png/.csv    figure 5: expected shortest path from h_t1 back to h_t0 over
                             recurrent edges and wormholes, and its length outside
                             wormholes, for each memory size of --memory-sizes
A read of a cell not yet written (--unwritten; the paper is silent): "empty" reads the
initial memory, which holds no micro-state (no wormhole); "written" picks uniformly among
the written cells only. Figure 5 draws one line per policy.
"""

GRADFLOW_HELP = """\
Gradient flow through time (TARDIS paper, section 5): for each model, the norm of the
Jacobian of the output at the last step t1 with respect to the input at t0
(--quantity output, Frobenius norm of dy_t1/dx_t0) or of the loss at t1
(--quantity loss, ||dL_t1/dx_t0||), against the distance t1 - t0 = 0..--max-distance,
averaged over --samples sequences of --task. Each MODEL is a model name (freshly
initialised with --seed; options after a colon, e.g. dntm:addressing=argmax or
ntm:memory_slots=32,controller=fnn) or a run directory (its best checkpoint).
Models run in eval mode (discrete reads as argmax) on a float64 copy. Writes a PNG (--out)
and a CSV with the same stem (model, distance, mean, sem, median).
"""


def add_commands(command) -> None:
    """The `simulate` and `gradflow` subcommands."""
    simulate = command("simulate", "simulations of the papers' analyses (wormhole paths)", SIMULATE_HELP)
    kinds = simulate.add_subparsers(title="simulations", metavar="KIND")
    wormhole = kinds.add_parser(
        "wormhole",
        help="wormhole path lengths (TARDIS figures 3, 5)",
        description=WORMHOLE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  mannlab simulate wormhole --out runs/wormhole\n"
        "  mannlab simulate wormhole --t0 10 --t1 100 "
        "--memory-sizes 5,10,20,50,100\n",
    )
    wormhole.add_argument(
        "--steps", type=positive_int, default=200, help="figure 3: sequence length T (default 200)"
    )
    wormhole.add_argument(
        "--cells", type=positive_int, default=50, help="figure 3: memory size k (default 50)"
    )
    wormhole.add_argument(
        "--simulations", type=positive_int, default=100, help="figure 3: simulations (default 100)"
    )
    wormhole.add_argument("--t0", type=int, default=5, help="figure 5: step depended on (default 5)")
    wormhole.add_argument("--t1", type=int, default=50, help="figure 5: dependent step (default 50)")
    wormhole.add_argument(
        "--path-simulations",
        type=positive_int,
        default=200,
        help="figure 5: simulations per point (default 200)",
    )
    wormhole.add_argument(
        "--memory-sizes",
        type=positive_int_list,
        metavar="K1,K2,...",
        default=list(DEFAULT_MEMORY_SIZES),
        help=f"figure 5: memory sizes (default {','.join(map(str, DEFAULT_MEMORY_SIZES))})",
    )
    wormhole.add_argument(
        "--schemes",
        type=name_list,
        default=["tardis", "umann", "urmann"],
        metavar="S1,...",
        help="figure 5: schemes (default tardis,umann,urmann)",
    )
    wormhole.add_argument(
        "--unwritten",
        type=name_list,
        default=["empty", "written"],
        metavar="P1,...",
        help="figure 5: policies for unwritten cells (default empty,written)",
    )
    wormhole.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
    wormhole.add_argument(
        "--out",
        type=path,
        metavar="DIR",
        default="runs/wormhole",
        help="output directory (default runs/wormhole)",
    )
    wormhole.set_defaults(func=cmd_simulate_wormhole)

    gradflow = command(
        "gradflow",
        "Jacobian norm against distance for several models",
        GRADFLOW_HELP,
        "examples:\n  mannlab gradflow lstm ntm dnc --task copy --out gradflow.png\n"
        "  mannlab gradflow runs/ntm-copy-seed0 lstm --max-distance 100 --samples 16\n",
    )
    gradflow.add_argument(
        "models", nargs="+", metavar="MODEL", help="model names (e.g. lstm, ntm, dnc) or run directories"
    )
    gradflow.add_argument(
        "--task", help="task name (default: the task of the first run directory, else copy)"
    )
    gradflow.add_argument(
        "--length",
        type=positive_int,
        help="the task's length parameter (default: the smallest giving > max distance steps)",
    )
    gradflow.add_argument(
        "--max-distance", type=positive_int, default=200, help="largest t1 - t0 (default 200)"
    )
    gradflow.add_argument(
        "--samples", type=positive_int, default=32, help="sequences averaged over (default 32)"
    )
    gradflow.add_argument(
        "--batch-size", type=positive_int, default=16, help="sequences per batch (default 16)"
    )
    gradflow.add_argument(
        "--quantity",
        choices=("output", "loss"),
        default="output",
        help="dy_t1/dx_t0 (default) or dL_t1/dx_t0",
    )
    gradflow.add_argument("--seed", type=seed, default=0, help="seed of initialisation and data (default 0)")
    gradflow.add_argument(
        "--checkpoint",
        choices=("best", "last"),
        default="best",
        help="checkpoint of run directories (default best)",
    )
    gradflow.add_argument(
        "--chunk",
        type=positive_int,
        default=16,
        help="sequences per forward/backward pass; each sample counts once per output "
        "unit (default 16; the DNC needs about 75 MB per sequence of 200 steps)",
    )
    gradflow.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")
    gradflow.add_argument(
        "--out", type=path, metavar="FILE.png", help="figure path (default runs/gradflow/gradflow-<task>.png)"
    )
    gradflow.set_defaults(func=cmd_gradflow)


def cmd_simulate_wormhole(args: argparse.Namespace) -> int:
    try:
        result = wormhole_report(
            args.out,
            args.steps,
            args.cells,
            args.simulations,
            args.t0,
            args.t1,
            args.path_simulations,
            args.memory_sizes,
            args.schemes,
            args.unwritten,
            args.seed,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    for scheme, (mean, sem, analytic) in result["final_lengths"].items():
        print(
            f"{scheme}: mean path length in a cell at T={args.steps}: {mean:.3f} "
            f"(sem {sem:.3f}); T/k - 1 = {analytic:g}"
        )
    print(f"shortest path {args.t1} -> {args.t0} (mean over {args.path_simulations} simulations):")
    for row in result["path_rows"]:
        print(
            f"  {row['scheme']:7s} unwritten={row['unwritten']:8s} k={row['cells']:<4d} "
            f"total {row['total_mean']:6.2f}  outside wormholes {row['outside_mean']:6.2f}"
        )
    print("\n".join(f"wrote {path}" for path in result["files"]))
    return 0


def cmd_gradflow(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(max(args.threads, 1))
    if args.task:
        task = mannlab.tasks.make(args.task)
    else:
        runs = [Path(m) for m in args.models if Path(m).is_dir()]
        task = mannlab.tasks.make("copy")
        if runs:
            config = load_config(runs[0] / "config.toml")
            task = mannlab.tasks.make(config.task, **config.task_args)
    if not isinstance(task, Task):
        raise ConfigError(f"gradflow takes a generated or data-set task, not {type(task).__name__}")
    out = Path(args.out) if args.out else Path("runs") / "gradflow" / f"gradflow-{task.name}.png"
    try:
        result = gradflow_report(
            args.models,
            task,
            out,
            args.max_distance,
            args.samples,
            args.batch_size,
            args.seed,
            args.length,
            args.quantity,
            args.checkpoint,
            args.chunk,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    print(
        f"{task.name}, {task.length_name} {result['length']}, {args.samples} samples, "
        f"norm of {args.quantity} gradient at distance:"
    )
    for label, flow in result["results"].items():
        picks = [d for d in (0, 1, 10, 50, 100, 200) if d <= args.max_distance]
        values = "  ".join(f"d={d}: {flow.mean[d]:.3g}" for d in picks)
        print(f"  {label}: {values}  ({duration(result['seconds'][label])})")
    print("\n".join(f"wrote {path}" for path in result["files"]))
    return 0


DEFAULT_MEMORY_SIZES = (2, 3, 5, 8, 10, 15, 20, 30, 40, 50, 60, 80, 100)


def wormhole_report(
    out_dir: str | Path,
    steps: int = 200,
    cells: int = 50,
    simulations: int = 100,
    t0: int = 5,
    t1: int = 50,
    path_simulations: int = 200,
    memory_sizes: Sequence[int] = DEFAULT_MEMORY_SIZES,
    schemes: Sequence[str] = wormhole.SCHEMES,
    unwritten: Sequence[str] = wormhole.UNWRITTEN,
    seed: int = 0,
) -> dict[str, Any]:
    """Figures 3 and 5 of the TARDIS paper into ``out_dir``.

    wormhole-lengths.{png,csv}: eq. 40 length per cell over time (T=steps, k=cells) for
    TARDIS and uMANN (the paper's figure 3; urMANN is defined for k >= T, where every
    length is 0), policy "empty" for unwritten cells (uniform reads over all k cells);
    wormhole-paths.{png,csv}: shortest path h_t0 -> h_t1 for each memory size,
    scheme and unwritten-cell policy. Returns paths, rows and wall seconds.
    """
    wormhole.check_dependency(t0, t1)  # fail before any file is written
    out = Path(out_dir)
    started = time.perf_counter()
    curves = {s: wormhole.length_curves(s, steps, cells, simulations, seed) for s in ("tardis", "umann")}
    length_rows = [
        {
            "scheme": s,
            "t": t + 1,
            "mean": c.mean[t],
            "sem": c.sem[t],
            "analytic": c.analytic[t],
            "cell_min": c.cells_mean[t].min(),
            "cell_max": c.cells_mean[t].max(),
        }
        for s, c in curves.items()
        for t in range(steps)
    ]
    write_csv(out / "wormhole-lengths.csv", length_rows)
    figures.wormhole_lengths(curves, cells, simulations, out / "wormhole-lengths.png")
    lengths_seconds = time.perf_counter() - started
    rows = wormhole.path_sweep(memory_sizes, t0, t1, path_simulations, seed, schemes, unwritten)
    write_csv(out / "wormhole-paths.csv", [{"t0": t0, "t1": t1, **r} for r in rows])
    figures.wormhole_paths(rows, t0, t1, path_simulations, out / "wormhole-paths.png")
    return {
        "files": [out / f"wormhole-{n}.{e}" for n in ("lengths", "paths") for e in ("png", "csv")],
        "final_lengths": {s: (c.mean[-1], c.sem[-1], c.analytic[-1]) for s, c in curves.items()},
        "path_rows": rows,
        "seconds": (lengths_seconds, time.perf_counter() - started),
    }


def gradflow_report(
    specs: Sequence[str],
    task: Any,
    out: str | Path,
    max_distance: int = 200,
    samples: int = 32,
    batch_size: int = 16,
    seed: int = 0,
    length: int | None = None,
    quantity: str = "output",
    checkpoint: str = "best",
    chunk: int = 16,
) -> dict[str, Any]:
    """Gradient flow of each model (registry name or run directory) on ``task`` into
    ``out`` (a .png; the CSV goes next to it with the same stem). Returns the paths,
    the GradientFlow per label and the wall seconds per label."""
    from mannlab.analysis import gradflow

    if not specs:
        raise ValueError("give at least one model name or run directory")
    if length is None:
        length = gradflow.length_for_steps(task, max_distance + 1)
    results, seconds = {}, {}
    for spec in specs:
        label, model = gradflow.load_model(spec, task, seed, checkpoint)
        started = time.perf_counter()
        results[label] = gradflow.gradient_flow(
            model, task, max_distance, samples, batch_size, seed, length, quantity, chunk
        )
        seconds[label] = time.perf_counter() - started
    out = Path(out)
    rows = [
        {
            "model": label,
            "distance": int(d),
            "mean": flow.mean[d],
            "sem": flow.sem[d],
            "median": flow.median[d],
        }
        for label, flow in results.items()
        for d in flow.distances
    ]
    csv_path = out.with_suffix(".csv")
    write_csv(csv_path, rows)
    title = f"{task.name}, {task.length_name} {length}, {samples} samples, t1 = last step"
    figures.gradient_flow(results, gradflow.QUANTITY_LABELS[quantity], title, out)
    return {"files": [out, csv_path], "results": results, "seconds": seconds, "length": length}
