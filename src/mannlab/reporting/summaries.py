"""What `mannlab train` and `mannlab run` print: the end of a run and the table over seeds.

A summary (summary.json) of a run trained on contiguous streams (char-LM) has
``segments_per_epoch``; the others are summaries of sampled-batch runs.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from mannlab.reporting.text_tables import duration, format_group_errors, format_table


def describe(summary: dict[str, Any]) -> str:
    """The lines `mannlab train` prints at the end of a run."""
    if "segments_per_epoch" in summary:
        return describe_stream_summary(summary)
    return describe_summary(summary)


def seeds_table(summaries: list[dict[str, Any]]) -> str:
    """The markdown table `mannlab run` prints over the seeds of a recipe."""
    if "segments_per_epoch" in summaries[0]:
        return stream_seeds_table(summaries)
    return sampled_seeds_table(summaries)


def describe_summary(summary: dict[str, Any]) -> str:
    """What `mannlab train` prints at the end: solve status, the per-length table, file paths."""
    lines = []
    if summary["solved"]:
        lines.append(
            f"solved (val bce < {summary['solve_bce']:g}) at step {summary['solved_at_step']} "
            f"after {duration(summary['solved_at_seconds'])}"
        )
    else:
        best = summary["best_val"]
        key = best.get("metric", "bce")  # "ce" for data-set tasks (summaries before it: "bce")
        best_text = f"{best[key]:.4g} at step {best['step']}" if best.get(key) is not None else "none"
        lines.append(f"not solved (val {key} < {summary['solve_bce']:g}); best val {key} {best_text}")
    cpu = summary.get("cpu_seconds")  # absent in summaries written before it was recorded
    cpu_text = f" ({duration(cpu)} of CPU)" if cpu is not None else ""
    stop = " (the time budget ran out)" if summary.get("stopped_by") == "time" else ""
    lines.append(
        f"{summary['steps']} steps{stop} in {duration(summary['wall_seconds'])}{cpu_text}; "
        f"validation at step {summary['steps']}:"
    )
    lines.append(format_table(summary["final_val"] or []))
    groups = format_group_errors((summary["best_val"].get("rows") or [{}])[0])
    if groups:  # data-set tasks with groups: the error per bAbI task (MNIST digit, SNLI label)
        lines.append(
            f"validation error per group, best checkpoint (step {summary['best_val']['step']}): {groups}"
        )
    run_dir = Path(summary["run_dir"])
    lines.append(f"checkpoints: {run_dir / 'checkpoints'} (best, last)")
    for name, path in summary.get("figures", {}).items():
        lines.append(f"{name.replace('_', ' ')}: {path}")
    return "\n".join(lines)


def sampled_seeds_table(summaries: list[dict[str, Any]]) -> str:
    """Markdown table over seeds, then how many solved and the median cost of solving.

    Metrics are those of the best checkpoint (selected by validation bce at the training
    length, as the papers do); "stayed solved" counts the validations after the first
    solve that were still below the threshold, and "final bce" is the last validation.
    """

    def best_rows(s):
        return s["best_val"].get("rows") or s["final_val"] or []

    lengths = [(row["length"], row.get("multiple")) for row in best_rows(summaries[0])]
    key = summaries[0]["best_val"].get("metric", "bce")  # the loss: "ce" for data-set tasks
    # categorical (data-set) tasks report the fraction of scored steps wrong instead of bit errors
    second = "error" if any("error" in row for row in best_rows(summaries[0])) else "seq_bit_errors"
    header = ["seed", "solved", "steps to solve", "time to solve", "stayed solved"]
    for length, multiple in lengths:
        suffix = f"{length}" + (" (train)" if multiple == 1 else "")
        header += [f"{key} @{suffix}", f"{'error' if second == 'error' else 'bit errors/seq'} @{suffix}"]
    header += [f"final {key} @train", "steps"]
    grouped = "mean_group_error" in (best_rows(summaries[0]) or [{}])[0]  # bAbI: error per task
    if grouped:
        header += ["mean group error %", "failed groups"]
    rows = []
    for s in summaries:
        by_length = {row["length"]: row for row in best_rows(s)}
        after = s.get("after_solve")
        cells = [
            str(s["seed"]),
            "yes" if s["solved"] else "no",
            "-" if s["solved_at_step"] is None else str(s["solved_at_step"]),
            duration(s["solved_at_seconds"]),
            "-" if not after else f"{after['solved']}/{after['validations']}",
        ]
        for length, _ in lengths:
            row = by_length.get(length, {})
            cells += [_number(row.get(key)), _number(row.get(second))]
        final = (s["final_val"] or [{}])[0]
        cells += [_number(final.get(key)), str(s["steps"])]
        if grouped:
            best = (best_rows(s) or [{}])[0]
            mean, failed = best.get("mean_group_error"), best.get("failed_groups")
            cells += [
                "-" if mean is None else f"{100 * mean:.1f}",
                "-" if failed is None else str(int(failed)),
            ]
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    solved = [s for s in summaries if s["solved"]]
    note = f"\nSolved: {len(solved)}/{len(summaries)} seeds"
    if solved:
        note += (
            f"; median {statistics.median(s['solved_at_step'] for s in solved):g} steps, "
            f"{duration(statistics.median(s['solved_at_seconds'] for s in solved))} to solve"
        )
    return "\n".join(lines) + "\n" + note + "."


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def describe_stream_summary(summary: dict[str, Any]) -> str:
    """What `mannlab train` prints at the end of a char-LM run."""
    best, test = summary["best_val"], summary["test"]
    why = "the time budget" if summary["stopped_by"] == "time" else "the step budget"
    lines = [
        f"{summary['steps']} segments ({summary['epochs']:.3g} epochs) in "
        f"{duration(summary['wall_seconds'])}, stopped by {why}; "
        f"{summary['parameters']:,} parameters",
        f"best valid BPC {best['bpc']:.4f} at step {best['step']}",
        f"test BPC {test['bpc']:.4f} (best checkpoint, {test['symbols']:,} symbols in "
        f"{test['batch_size']} stream(s), state carried)",
        f"checkpoints: {Path(summary['run_dir']) / 'checkpoints'} (best, last)",
    ]
    lines += [f"{name.replace('_', ' ')}: {path}" for name, path in summary.get("figures", {}).items()]
    return "\n".join(lines)


def stream_seeds_table(summaries: list[dict[str, Any]]) -> str:
    """Markdown table over the seeds of a char-LM recipe."""
    lines = [
        "| seed | steps | epochs | minutes | parameters | best valid BPC (step) | test BPC |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {s['seed']} | {s['steps']} | {s['epochs']:.3g} | {s['wall_seconds'] / 60:.1f} "
            f"| {s['parameters']:,} | {s['best_val']['bpc']:.4f} ({s['best_val']['step']}) "
            f"| {s['test']['bpc']:.4f} |"
        )
    return "\n".join(lines)
