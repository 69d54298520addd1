"""The analyses end to end (what `mannlab simulate wormhole` and `mannlab gradflow` run):
compute, write the CSV and the PNG, return the file paths and the numbers."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from mannlab.analysis import figures, wormhole
from mannlab.analysis.tables import write_csv

DEFAULT_MEMORY_SIZES = (2, 3, 5, 8, 10, 15, 20, 30, 40, 50, 60, 80, 100)


def wormhole_report(out_dir: str | Path, steps: int = 200, cells: int = 50, simulations: int = 100,
                    t0: int = 5, t1: int = 50, path_simulations: int = 200,
                    memory_sizes: Sequence[int] = DEFAULT_MEMORY_SIZES,
                    schemes: Sequence[str] = wormhole.SCHEMES,
                    unwritten: Sequence[str] = wormhole.UNWRITTEN, seed: int = 0) -> dict[str, Any]:
    """Figures 3 and 5 of the TARDIS paper into ``out_dir``.

    wormhole-lengths.{png,csv}: eq. 40 length per cell over time (T=steps, k=cells) for
    TARDIS and uMANN (the paper's figure 3; urMANN is defined for k >= T, where every
    length is 0), policy "empty" for unwritten cells (uniform reads over all k cells);
    wormhole-paths.{png,csv}: shortest path h_t0 -> h_t1 for each memory size,
    scheme and unwritten-cell policy. Returns paths, rows and wall seconds.
    """
    wormhole.check_dependency(t0, t1)            # fail before any file is written
    out = Path(out_dir)
    started = time.perf_counter()
    curves = {s: wormhole.length_curves(s, steps, cells, simulations, seed)
              for s in ("tardis", "umann")}
    length_rows = [{"scheme": s, "t": t + 1, "mean": c.mean[t], "sem": c.sem[t],
                    "analytic": c.analytic[t], "cell_min": c.cells_mean[t].min(),
                    "cell_max": c.cells_mean[t].max()}
                   for s, c in curves.items() for t in range(steps)]
    write_csv(out / "wormhole-lengths.csv", length_rows)
    figures.wormhole_lengths(curves, cells, simulations, out / "wormhole-lengths.png")
    lengths_seconds = time.perf_counter() - started
    rows = wormhole.path_sweep(memory_sizes, t0, t1, path_simulations, seed, schemes, unwritten)
    write_csv(out / "wormhole-paths.csv", [{"t0": t0, "t1": t1, **r} for r in rows])
    figures.wormhole_paths(rows, t0, t1, path_simulations, out / "wormhole-paths.png")
    return {"files": [out / f"wormhole-{n}.{e}" for n in ("lengths", "paths") for e in ("png", "csv")],
            "final_lengths": {s: (c.mean[-1], c.sem[-1], c.analytic[-1]) for s, c in curves.items()},
            "path_rows": rows, "seconds": (lengths_seconds, time.perf_counter() - started)}


def gradflow_report(specs: Sequence[str], task: Any, out: str | Path, max_distance: int = 200,
                    samples: int = 32, batch_size: int = 16, seed: int = 0,
                    length: int | None = None, quantity: str = "output",
                    checkpoint: str = "best", chunk: int = 16) -> dict[str, Any]:
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
        results[label] = gradflow.gradient_flow(model, task, max_distance, samples, batch_size,
                                                seed, length, quantity, chunk)
        seconds[label] = time.perf_counter() - started
    out = Path(out)
    rows = [{"model": label, "distance": int(d), "mean": flow.mean[d], "sem": flow.sem[d],
             "median": flow.median[d]}
            for label, flow in results.items() for d in flow.distances]
    csv_path = out.with_suffix(".csv")
    write_csv(csv_path, rows)
    title = (f"{task.name}, {task.length_name} {length}, {samples} samples, "
             f"t1 = last step")
    figures.gradient_flow(results, gradflow.QUANTITY_LABELS[quantity], title, out)
    return {"files": [out, csv_path], "results": results, "seconds": seconds, "length": length}
