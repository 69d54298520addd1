"""Tables over many runs, in the layout of Table 2 of Taguchi & Tsuruoka ("Partially
Non-Recurrent Controllers for Memory-Augmented Neural Networks"): `mannlab report`.

A runs directory is searched (recursively) for run directories, i.e. directories
holding a ``config.toml`` next to a ``summary.json`` (finished) or ``metrics.jsonl`` /
``checkpoints/`` (started, not finished). `mannlab run` writes them as
``<group>/seed<k>/``; model, controller and task are read from each run's
``config.toml`` (the group directory's name is only shown, never parsed).

Per cell (task x (model, controller)) the report gives the mean over seeds of the
bit error rate in percent of the best-by-validation checkpoint at the training
length (``summary["best_val"]["rows"]``, the row with multiple 1; ``final_val``
when the best checkpoint has no validation row), and in brackets the number of
seeds whose bit error rate is exactly 0 (no wrong bit in the validation set):
"37.5 (0)", as in the paper. A second table gives seeds, steps and wall time.
Runs of data-set tasks get the per-group test error table of ``group_tables`` instead.

    text = build_report("runs/table2", paper=True)
"""

from __future__ import annotations

import inspect
import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from mannlab.config import read_toml
from mannlab.errors import ConfigError, DataError
from mannlab.reporting.group_tables import by_task, column_key, find_group_evals, group_error_rows
from mannlab.reporting.text_tables import duration
from mannlab.rundir.files import read_json, write_atomic
from mannlab.rundir.metrics_log import read_metrics

__all__ = [
    "Run",
    "PAPER_COLUMNS",
    "PAPER_TABLE2",
    "PAPER_SEEDS",
    "find_runs",
    "bit_error_percent",
    "error_table",
    "runs_table",
    "build_report",
    "write_report",
]

# ----------------------------------------------------------------- the paper

PAPER_SEEDS = 10  # "average scores of ten individual models"

# Column order of the paper's Table 2: the plain one-layer EN and LSTM (128 units),
# then NTM and DNC with the FNN, EN, proposed EN, LSTM and proposed LSTM controllers.
# Keys are (model, controller) in mannlab's names; the plain EN has no mannlab model yet.
PAPER_COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("elman", None),
    ("lstm", None),
    ("ntm", "fnn"),
    ("ntm", "elman"),
    ("ntm", "pnr-elman"),
    ("ntm", "lstm"),
    ("ntm", "pnr-lstm"),
    ("dnc", "fnn"),
    ("dnc", "elman"),
    ("dnc", "pnr-elman"),
    ("dnc", "lstm"),
    ("dnc", "pnr-lstm"),
)

# Table 2 (average bit error rate in %, and in brackets how many of the ten models
# reached 0.0 %), transcribed from the paper's text; one entry per PAPER_COLUMNS item.
_PAPER_ROWS: dict[str, tuple[tuple[float, int], ...]] = {
    "copy": (
        (37.5, 0),
        (21.8, 0),
        (0.0, 10),
        (0.0, 9),
        (0.0, 10),
        (11.0, 3),
        (0.0, 10),
        (2.8, 9),
        (0.0, 9),
        (0.0, 10),
        (13.2, 3),
        (3.3, 7),
    ),
    "reverse": (
        (25.8, 0),
        (13.2, 0),
        (10.0, 6),
        (2.0, 8),
        (15.2, 2),
        (8.9, 2),
        (7.8, 3),
        (2.2, 9),
        (7.4, 5),
        (0.0, 10),
        (7.7, 1),
        (13.5, 3),
    ),
    "bigram_flip": (
        (37.1, 0),
        (23.2, 0),
        (4.5, 3),
        (2.0, 8),
        (0.0, 10),
        (9.6, 5),
        (0.0, 10),
        (2.8, 5),
        (0.8, 8),
        (1.7, 8),
        (9.6, 3),
        (7.0, 6),
    ),
    "odd_first": (
        (36.0, 0),
        (13.1, 0),
        (3.2, 1),
        (2.9, 6),
        (0.2, 7),
        (5.7, 3),
        (0.0, 10),
        (18.0, 0),
        (4.7, 2),
        (2.7, 6),
        (10.1, 1),
        (10.6, 1),
    ),
    "repeat_copy": (
        (15.6, 0),
        (7.7, 0),
        (1.0, 8),
        (0.0, 10),
        (0.0, 10),
        (0.9, 5),
        (0.0, 10),
        (1.5, 8),
        (0.3, 9),
        (0.0, 10),
        (0.0, 10),
        (0.0, 10),
    ),
    "priority_sort": (
        (30.0, 0),
        (14.7, 0),
        (11.2, 0),
        (7.4, 0),
        (9.3, 0),
        (7.5, 0),
        (8.2, 0),
        (12.1, 0),
        (6.7, 0),
        (9.0, 0),
        (8.3, 0),
        (4.4, 0),
    ),
}
PAPER_TABLE2: dict[str, dict[tuple[str, str | None], tuple[float, int]]] = {
    task: dict(zip(PAPER_COLUMNS, row, strict=True)) for task, row in _PAPER_ROWS.items()
}

# Display order: the paper's, then anything else alphabetically.
TASK_ORDER = tuple(_PAPER_ROWS)
MODEL_ORDER = ("elman", "lstm", "ntm", "dnc")
CONTROLLER_ORDER = ("fnn", "elman", "pnr-elman", "lstm", "pnr-lstm")
MODEL_LABELS = {"elman": "EN", "lstm": "LSTM", "ntm": "NTM", "dnc": "DNC"}

SEED_DIR = re.compile(r"seed\d+")
# model arguments that make a different method, not a different size: a run whose value is
# not the model's default gets its own column (D-NTM soft / REINFORCE, ARMIN's TARDIS read)
VARIANT_KEYS = ("addressing", "read")
LAST_VALIDATIONS = 10  # ARMIN Table 1: an unsolved run is scored by its last 10 validations


# --------------------------------------------------------------------- runs


@dataclass
class Run:
    """One run directory: what it trained (from config.toml) and its summary.json, if finished."""

    path: Path
    group: Path  # the parent for the <group>/seed<k> layout, else the run itself
    model: str
    controller: str | None  # None for models without a controller (the plain LSTM)
    variant: str | None  # non-default VARIANT_KEYS, e.g. "addressing=reinforce"
    task: str
    seed: int | None
    summary: dict[str, Any] | None  # None: not finished (no summary.json yet)
    config: dict[str, Any]  # config.toml as read

    @property
    def column(self) -> tuple[str, str | None]:
        """(model, controller and variant): runs that differ in these are different columns."""
        return (self.model, ", ".join(p for p in (self.controller, self.variant) if p) or None)

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def bit_error_percent(self) -> float | None:
        return None if self.summary is None else bit_error_percent(self.summary)


def bit_error_percent(summary: dict[str, Any]) -> float | None:
    """Bit error rate (%) at the training length of the best checkpoint (else the last validation)."""
    for rows in ((summary.get("best_val") or {}).get("rows"), summary.get("final_val")):
        row = _training_length_row(rows or [])
        if row is not None and row.get("bit_error_rate") is not None:
            return 100.0 * float(row["bit_error_rate"])
    return None


def _training_length_row(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    for row in rows:
        if row.get("multiple") == 1:
            return row
    return None


def find_runs(runs_dir: str | Path) -> tuple[list[Run], list[str]]:
    """All run directories under ``runs_dir`` (itself included), and warnings about skipped ones."""
    root = Path(runs_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"runs directory not found: {runs_dir}")
    runs, warnings = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        if "checkpoints" in dirnames:
            dirnames.remove("checkpoints")  # no runs inside a run's checkpoints
        started = (
            "summary.json" in filenames or "metrics.jsonl" in filenames or (here / "checkpoints").is_dir()
        )
        if not started:
            continue
        if "config.toml" not in filenames:
            if "summary.json" in filenames:
                warnings.append(f"{here}: summary.json without config.toml, skipped")
            continue
        runs.append(_read_run(here))
    return runs, warnings


def _read_run(path: Path) -> Run:
    try:
        config = read_toml(path / "config.toml")
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    model_table, task_table = config.get("model"), config.get("task")
    if (
        not isinstance(model_table, dict)
        or not isinstance(task_table, dict)
        or "name" not in model_table
        or "name" not in task_table
    ):
        raise DataError(f"{path / 'config.toml'}: expected [model] and [task] tables with a name")
    model = str(model_table["name"]).strip().lower().replace("_", "-")
    controller = model_table.get("controller", _model_default(model, "controller"))
    if controller is not None:
        controller = str(controller).strip().lower().replace("_", "-")
    variant = (
        ", ".join(
            f"{key}={model_table[key]}"
            for key in VARIANT_KEYS
            if key in model_table and model_table[key] != _model_default(model, key)
        )
        or None
    )
    task = str(task_table["name"]).strip().lower().replace("-", "_")
    summary = None
    if os.path.lexists(path / "summary.json"):  # read_json names anything but a file
        summary = read_json(path / "summary.json")
        if not isinstance(summary, dict):
            raise DataError(f"{path / 'summary.json'}: expected a JSON object")
    seed = (summary or {}).get("seed", config.get("seed"))
    group = path.parent if SEED_DIR.fullmatch(path.name) else path
    return Run(path, group, model, controller, variant, task, seed, summary, config)


def _model_default(model: str, key: str) -> Any:
    """The model's default for a constructor argument (config.toml holds only the keys a
    recipe set); None for an unknown model or argument."""
    try:
        from mannlab.models import MODELS

        param = inspect.signature(MODELS[model]).parameters.get(key)
    except (ImportError, KeyError):
        return None
    return None if param is None else param.default


# ------------------------------------------------------------------- tables


def _order(values: Iterable[str | None], preferred: tuple[str, ...]) -> list:
    def key(value):
        if value in preferred:
            return (0, preferred.index(value), "")
        return (1, 0, value or "")

    return sorted(set(values), key=key)


def _columns(runs: list[Run]) -> list[tuple[str, str | None]]:
    models = _order((r.model for r in runs), MODEL_ORDER)
    columns = []
    for model in models:
        controllers = _order((r.column[1] for r in runs if r.model == model), CONTROLLER_ORDER)
        columns += [(model, c) for c in controllers]
    return columns


def column_label(column: tuple[str, str | None]) -> str:
    model, controller = column
    label = MODEL_LABELS.get(model, model)
    return label if controller is None else f"{label} {controller}"


def _cell(runs: list[Run]) -> str:
    values = [v for v in (r.bit_error_percent for r in runs) if v is not None]
    if not values:
        return "-"
    solved = sum(v == 0.0 for v in values)
    return f"{statistics.fmean(values):.1f} ({solved})"


def _markdown(header: list[str], rows: list[list[str]], align: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def error_table(runs: list[Run], paper: bool = False) -> str:
    """Markdown: a row per task, a column per (model, controller), cells "mean % (seeds at 0)".

    Cells without a finished run are "-". With ``paper``, each task of the paper's Table 2
    is followed by a row with the paper's numbers for the same columns ("-" where the
    paper has none).
    """
    columns = _columns(runs)
    rows = []
    for task in _order((r.task for r in runs), TASK_ORDER):
        cells = [_cell([r for r in runs if r.task == task and r.column == col]) for col in columns]
        rows.append([task] + cells)
        if paper and task in PAPER_TABLE2:
            reported = PAPER_TABLE2[task]
            rows.append(
                [f"{task} (paper)"]
                + [
                    "-" if col not in reported else f"{reported[col][0]:.1f} ({reported[col][1]})"
                    for col in columns
                ]
            )
    header = ["task"] + [column_label(c) for c in columns]
    return _markdown(header, rows, ["---"] + ["---:"] * len(columns))


def runs_table(runs: list[Run], root: Path | None = None) -> str:
    """Markdown: a row per (task, model, controller) with seeds, steps, solves and wall time."""
    rows = []
    for task in _order((r.task for r in runs), TASK_ORDER):
        for column in _columns(runs):
            cell = [r for r in runs if r.task == task and r.column == column]
            if not cell:
                continue
            done = [(r, r.summary) for r in cell if r.summary is not None]  # the finished runs
            seeds = sorted((r.seed for r, _ in done if r.seed is not None))
            steps = [s["steps"] for _, s in done if s.get("steps") is not None]
            best = [
                s["best_val"]["step"] for _, s in done if (s.get("best_val") or {}).get("step") is not None
            ]
            walls = [s["wall_seconds"] for _, s in done if s.get("wall_seconds") is not None]
            cpus = [s["cpu_seconds"] for _, s in done if s.get("cpu_seconds") is not None]
            solved = sum(bool(s.get("solved")) for _, s in done)
            solved_steps = [s["solved_at_step"] for _, s in done if s.get("solved_at_step") is not None]
            solved_walls = [s["solved_at_seconds"] for _, s in done if s.get("solved_at_seconds") is not None]
            unsolved_bces = [
                b for b in (last_val_bce(r.path) for r, s in done if not s.get("solved")) if b is not None
            ]
            groups = sorted({_relative(r.group, root) for r in cell})
            model, controller = column
            rows.append(
                [
                    task,
                    model,
                    controller or "-",
                    str(len(done)),
                    ", ".join(map(str, seeds)) or "-",
                    str(len(cell) - len(done)),
                    _mean(steps),
                    _mean(best),
                    f"{solved}/{len(done)}",
                    _mean(solved_steps),
                    duration(statistics.fmean(solved_walls)) if solved_walls else "-",
                    f"{statistics.fmean(unsolved_bces):.3f}" if unsolved_bces else "-",
                    duration(statistics.fmean(walls)) if walls else "-",
                    duration(sum(walls)) if walls else "-",
                    duration(statistics.fmean(cpus)) if cpus else "-",
                    ", ".join(f"`{g}`" for g in groups),
                ]
            )
    header = [
        "task",
        "model",
        "controller, variant",
        "seeds",
        "seed ids",
        "unfinished",
        "steps (mean)",
        "best step (mean)",
        "val bce solved",
        "solved at step (mean)",
        "wall to solve (mean)",
        f"unsolved: last {LAST_VALIDATIONS} val bce (mean)",
        "wall per seed",
        "wall total",
        "CPU per seed",
        "directory",
    ]
    return _markdown(header, rows, ["---"] * 3 + ["---:"] * 12 + ["---"])


def last_val_bce(run_path: Path, n: int = LAST_VALIDATIONS) -> float | None:
    """Mean validation BCE at the training length over a run's last n validations (the ARMIN
    paper's Table 1 figure for an unsolved run), from metrics.jsonl; None without any."""
    path = run_path / "metrics.jsonl"
    if not path.is_file():
        return None
    values = [
        float(row["bce"])
        for row in read_metrics(path)
        if row.get("split") == "val" and row.get("multiple") == 1 and row.get("bce") is not None
    ]
    return statistics.fmean(values[-n:]) if values else None


def _relative(path: Path, root: Path | None) -> str:
    if root is not None:
        try:
            rel = path.relative_to(root)
            return "." if str(rel) == "." else str(rel)
        except ValueError:
            pass
    return str(path)


def _mean(values: list[float]) -> str:
    return "-" if not values else f"{statistics.fmean(values):.0f}"


def _pooling_warnings(runs: list[Run], root: Path) -> list[str]:
    """A cell fed by more than one group directory mixes recipes (e.g. batch 1 and batch 16)."""
    warnings = []
    cells: dict[tuple, set[str]] = {}
    for r in runs:
        cells.setdefault((r.task, r.column), set()).add(_relative(r.group, root))
    for (task, column), groups in sorted(cells.items(), key=lambda item: str(item[0])):
        if len(groups) > 1:
            warnings.append(
                f"{task} / {column_label(column)} pools runs of {len(groups)} directories "
                f"({', '.join(sorted(groups))}); report on one recipe's runs directory "
                f"to keep them apart"
            )
    seen: dict[tuple, Path] = {}
    for r in runs:
        key = (r.task, r.column, r.seed)
        if r.seed is not None and key in seen:
            warnings.append(
                f"seed {r.seed} of {r.task} / {column_label(r.column)} appears twice: "
                f"{_relative(seen[key], root)} and {_relative(r.path, root)}"
            )
        seen.setdefault(key, r.path)
    return warnings


def build_report(runs_dir: str | Path, paper: bool = False) -> str:
    """The markdown report of every run under ``runs_dir`` (see the module docstring)."""
    root = Path(runs_dir)
    runs, warnings = find_runs(root)
    if not runs:
        raise DataError(
            f"no runs in {runs_dir}: expected run directories with config.toml and "
            f"summary.json, e.g. <group>/seed<k>/ as `mannlab run` writes them"
        )
    data_runs = [r for r in runs if r.task in _data_task_names()]
    proposal_runs = [r for r in runs if _is_proposal_task(r.task)]
    toy_runs = [r for r in runs if r not in data_runs and r not in proposal_runs]
    lines = _data_section(runs_dir, root, data_runs)
    if proposal_runs:
        lines += ["", ""] if lines else []
        lines += _proposal_section(runs_dir, root, proposal_runs)
    if toy_runs:
        lines += ["", ""] if lines else []
        lines += _toy_section(runs_dir, root, toy_runs, paper)
        warnings += _pooling_warnings(toy_runs, root)
    if warnings:
        lines += ["", "Warnings:", ""] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


def _toy_section(runs_dir: str | Path, root: Path, runs: list[Run], paper: bool) -> list[str]:
    """Bit error rates of the algorithmic-task runs in the layout of the paper's Table 2."""
    unfinished = sum(not r.finished for r in runs)
    lines = [
        f"# Bit error rates of the runs in `{runs_dir}`",
        "",
        "Mean over seeds of the bit error rate (%) at the training length (validation set, "
        "multiple 1) of the best-by-validation checkpoint; in brackets the number of seeds "
        'with 0 bit errors. The layout of Table 2 of Taguchi & Tsuruoka; "-": no finished run'
        + (f" ({unfinished} run{'s' if unfinished != 1 else ''} not finished yet)." if unfinished else "."),
    ]
    if paper:
        lines.append(
            f'Rows "(paper)": the paper\'s Table 2 ({PAPER_SEEDS} models per cell, '
            "1,000,000 training sequences each, test set of 10,000 sequences)."
        )
    lines += [
        "",
        error_table(runs, paper=paper),
        "",
        "## Runs",
        "",
        "Seeds with a summary.json (finished); steps and the step of the best checkpoint "
        '(means over seeds); "val bce solved": seeds whose validation bce at the training '
        "length dropped below train.solve_bce, the mean step and wall time at which they "
        "did, and the unsolved seeds' mean validation bce over their last "
        f"{LAST_VALIDATIONS} validations (the figures of the ARMIN paper's Table 1); "
        "wall and CPU time are training time as "
        "recorded (CPU: of the training process; '-' for runs recorded before it was).",
        "",
        runs_table(runs, root),
    ]
    return lines


def _data_task_names() -> set[str]:
    from mannlab.tasks import data_names

    return set(data_names())


def _is_proposal_task(name: str) -> bool:
    from mannlab.tasks import proposal_names

    return str(name).strip().lower().replace("_", "-") in proposal_names()


def _proposal_section(runs_dir: str | Path, root: Path, runs: list[Run]) -> list[str]:
    """ARMIN table 3's numbers of the proposal-task runs, a row per group of seeds, from each
    run's eval-test.json (reporting/proposal_runs.py)."""
    from mannlab.reporting.proposal_runs import EVAL_FILE, proposal_table, read_proposal_eval

    evaluated = [r for r in runs if (r.path / EVAL_FILE.format(split="test")).is_file()]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(evaluated, key=lambda r: str(r.group)):
        label = f"{r.model} (`{_relative(r.group, root)}`)"
        groups.setdefault(label, []).append(read_proposal_eval(r.path, "test"))
    lines = [
        f"# Temporal action proposals in `{runs_dir}`",
        "",
        "Recall at 1,000 average proposals per video at tIoU 0.6 and 0.8 (ARMIN table 3) and "
        "average recall (tIoU 0.5:0.05:1) at 50, 100 and 1,000 proposals, on the test videos, of "
        "each run's best checkpoint, from its eval-test.json; a row per directory of seeds: "
        "the mean, and [min, max] over seeds.",
        "",
        proposal_table(groups) if groups else "No run has an eval-test.json yet.",
    ]
    missing = [r for r in runs if r not in evaluated]
    if missing:
        lines += ["", f"Not evaluated ({len(missing)}; `mannlab eval RUN`):", ""]
        lines += [f"- `{_relative(r.path, root)}`" for r in missing]
    return lines


def _data_section(runs_dir: str | Path, root: Path, data_runs: list[Run]) -> list[str]:
    """Per-group test errors of the data-set runs (bAbI tasks, digits, labels), if any."""
    if not data_runs:
        return []
    evals = find_group_evals([r.path for r in data_runs])
    columns = _config_columns(root, data_runs)
    for e in evals:
        e.column = columns[e.path]
    missing = [r for r in data_runs if not any(e.path == r.path for e in evals)]
    lines = [
        f"# Test error per group of the data-set runs in `{runs_dir}`",
        "",
        "Error (%) on the test split of each run's best checkpoint, from its eval-test.json; "
        "a column per configuration (the seeds of one jointly trained model, or one model "
        "per bAbI task), named by the runs' common directory; a cell is the mean over seeds.",
        "",
    ]
    for task, task_evals in by_task(evals).items():
        header, rows = group_error_rows(task_evals)
        lines += [f"## {task}", "", _markdown(header, rows, ["---"] + ["---:"] * (len(header) - 1)), ""]
    if not evals:
        lines += ["No run has an eval-test.json yet.", ""]
    if missing:
        lines += [f"Not evaluated ({len(missing)}; `mannlab eval RUN --split test`):", ""] + [
            f"- `{_relative(r.path, root)}`" for r in missing
        ]
    while not lines[-1]:
        lines.pop()
    return lines


def _config_columns(root: Path, runs: list[Run]) -> dict[Path, str]:
    """Column label per run path: runs alike but for seed, place and bAbI tasks share one,
    named by their groups' common directory relative to ``root`` (``root``'s own name for ".")."""
    alike: dict[str, list[Run]] = {}
    for r in runs:
        alike.setdefault(column_key(r.config), []).append(r)
    labels = {}
    for members in alike.values():
        label = _relative(Path(os.path.commonpath([str(r.group) for r in members])), root)
        labels.update({r.path: root.resolve().name if label == "." else label for r in members})
    return labels


def write_report(
    runs_dir: str | Path, out: str | Path | None = None, paper: bool = False
) -> tuple[str, Path]:
    """Build the report and write it to ``out`` (default ``<runs_dir>/report.md``; an
    existing directory ``out`` receives ``report.md``)."""
    text = build_report(runs_dir, paper=paper)
    path = Path(out) if out is not None else Path(runs_dir) / "report.md"
    if path.is_dir():
        path = path / "report.md"
    write_atomic(path, text)
    return text, path
