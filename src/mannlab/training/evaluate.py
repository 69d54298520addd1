"""Evaluate a trained model at chosen sequence lengths (generalisation), and print tables."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from mannlab.config import RunConfig, load_config
from mannlab.errors import CheckpointError
from mannlab.training.checkpoint import load_checkpoint
from mannlab.training.loop import validate

EVAL_SEED_OFFSET = 2 * 10**9  # evaluation batches never coincide with training or validation ones

# Column order and headers of format_table; other numeric keys follow in their own order.
COLUMNS = {"bce": "bce (nats/bit)", "ce": "ce (nats/step)", "bit_error_rate": "bit error rate",
           "seq_bit_errors": "bit errors/seq"}


def use_run_threads(config: RunConfig) -> None:
    """Use the run's torch thread count (train.threads) for its evaluation, as training did:
    these small models run fastest on one thread, and several threads fighting over a busy
    CPU (the compiled kernels' BLAS calls included) are many times slower."""
    if config.train.threads:
        torch.set_num_threads(config.train.threads)


def load_run(run_dir: str | Path, checkpoint: str = "best",
             overrides: Sequence[str] = ()) -> tuple[RunConfig, Any, torch.nn.Module, dict]:
    """(config, task, model with weights, checkpoint meta) of a run directory.

    ``checkpoint`` is "best" or "last"; "best" falls back to "last" if the run has none.
    ``overrides`` ("model.addressing=argmax", ...) change the run's config before the
    weights load into the model it builds.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    config = load_config(run_dir / "config.toml", list(overrides))
    task, model = config.build()
    names = [checkpoint] + (["last"] if checkpoint == "best" else [])
    for name in names:
        if (run_dir / "checkpoints" / name).is_dir():
            meta, _ = load_checkpoint(run_dir / "checkpoints" / name, model)
            return config, task, model, meta
    raise CheckpointError(f"no {' or '.join(names)} checkpoint in {run_dir / 'checkpoints'}; "
                          "has this run saved one yet?")


def evaluate(source: str | Path | tuple[torch.nn.Module, Any], lengths: Iterable[int],
             batches: int = 4, batch_size: int = 32, seed: int | None = None,
             checkpoint: str = "best") -> list[dict[str, Any]]:
    """Mean metrics per length: rows ``{"length": L, "bce": ..., "bit_error_rate": ..., ...}``.

    ``source`` is a run directory (its ``checkpoint`` is loaded, best by default)
    or a ``(model, task)`` pair. Batch ``k`` at length ``L`` is sampled with seed
    ``[seed, 2*10**9 + k, L]``; ``seed`` defaults to the run's seed (0 for a pair).
    """
    if isinstance(source, (str, Path)):
        config, task, model, _ = load_run(source, checkpoint)
        seed = config.seed if seed is None else seed
    else:
        model, task = source
        seed = 0 if seed is None else seed
    sets = [(None, length, [task.sample(batch_size, [seed, EVAL_SEED_OFFSET + k, length], length=length)
                            for k in range(batches)])
            for length in lengths]
    rows = validate(model, task, sets)
    for row in rows:
        del row["multiple"]
    return rows


def format_table(rows: Sequence[dict[str, Any]], train_length: int | None = None) -> str:
    """Plain-text table, one row per length; ``train_length`` marks that row "(train)". Per-group
    errors of data-set tasks (``error/<group>``) are left out: ``format_group_errors`` lists them."""
    if not rows:
        return "(no rows)"
    keys = [k for k in COLUMNS if any(k in r for r in rows)]
    keys += [k for k in rows[0] if k not in COLUMNS and k not in ("length", "multiple")
             and isinstance(rows[0][k], (int, float)) and not k.startswith("error/")]
    header = ["length"] + [COLUMNS.get(k, k) for k in keys]
    body = []
    for row in rows:
        label = str(row.get("length"))
        if row.get("multiple") == 1 or (train_length is not None and row.get("length") == train_length):
            label += " (train)"
        body.append([label] + [_fmt(row.get(k)) for k in keys])
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths)))
             for line in [header] + body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
