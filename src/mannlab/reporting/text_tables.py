"""Plain-text tables of evaluation results: metrics per length, errors per group; the one
duration format of every report (``duration``)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

# Column order and headers of format_table; other numeric keys follow in their own order.
COLUMNS = {
    "bce": "bce (nats/bit)",
    "ce": "ce (nats/step)",
    "bit_error_rate": "bit error rate",
    "seq_bit_errors": "bit errors/seq",
}


def duration(seconds: float | None) -> str:
    """A wall or CPU time for people: "95.0 s" below 2 minutes, "12.5 min" below 2 hours, else
    "3.2 h"; "-" for None (not measured, or never reached)."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def format_table(rows: Sequence[dict[str, Any]], train_length: int | None = None) -> str:
    """Plain-text table, one row per length; ``train_length`` marks that row "(train)". Per-group
    errors of data-set tasks (``error/<group>``) are left out: ``format_group_errors`` lists them."""
    if not rows:
        return "(no rows)"
    keys = [k for k in COLUMNS if any(k in r for r in rows)]
    keys += [
        k
        for k in rows[0]
        if k not in COLUMNS
        and k not in ("length", "multiple")
        and isinstance(rows[0][k], (int, float))
        and not k.startswith("error/")
    ]
    header = ["length"] + [COLUMNS.get(k, k) for k in keys]
    body = []
    for row in rows:
        label = str(row.get("length"))
        if row.get("multiple") == 1 or (train_length is not None and row.get("length") == train_length):
            label += " (train)"
        body.append([label] + [_fmt(row.get(k)) for k in keys])
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = [
        "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths)))
        for line in [header] + body
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def format_group_errors(row: dict[str, Any]) -> str:
    """One line from a validation row's group metrics: "qa1 12.0%, qa4 3.0%; mean 7.5%, failed
    1/2"; empty if the row has none."""
    groups = [(k[len("error/") :], v) for k, v in row.items() if k.startswith("error/")]
    if not groups:
        return ""
    text = ", ".join(f"{name} {100 * v:.1f}%" for name, v in groups)
    if "mean_group_error" in row:
        text += f"; mean {100 * row['mean_group_error']:.1f}%"
    if "failed_groups" in row:
        text += f", failed {int(row['failed_groups'])}/{len(groups)}"
    return text


def format_results(result: dict[str, Any]) -> str:
    """A plain-text table: one row per group, then the mean over groups, the number of failed
    groups (tasks with a ``fail_threshold``, e.g. bAbI tasks above 5% error) and the overall
    error."""
    rows = [(name, f"{100 * r['error']:.1f}", str(r["examples"])) for name, r in result["per_group"].items()]
    errors = [r["error"] for r in result["per_group"].values()]
    if len(rows) > 1:
        rows.append(("mean over groups", f"{100 * float(np.mean(errors)):.1f}", ""))
    threshold = result.get("fail_threshold")
    if threshold is not None:
        failed = sum(e > threshold for e in errors)
        rows.append((f"failed (error > {100 * threshold:g}%)", f"{failed}/{len(errors)}", ""))
    rows.append(("all scored steps", f"{100 * result['error']:.1f}", str(result["examples"])))
    width = max(len(r[0]) for r in rows + [("group", "", "")])
    lines = [f"{'group':<{width}}  error %  examples", "-" * (width + 19)]
    lines += [f"{a:<{width}}  {b:>7}  {c:>8}" for a, b, c in rows]
    return "\n".join(lines)


def format_proposals(result: dict[str, Any]) -> str:
    """What `mannlab eval` prints for a proposal task: ARMIN table 3's recall at 1,000
    proposals (tIoU 0.6, 0.8) and the average recall at 50..1,000 proposals."""
    found = result["result"]
    summary = found["summary"]
    recall = [k for k in summary if k.startswith("recall@")]
    ar = [k for k in summary if k.startswith("ar@")]
    lines = [
        f"{result['model']} on {result['task']}, {result['split']} split, {result['checkpoint']} "
        f"checkpoint (step {result['step']}): {found['videos']} videos, {found['instances']} "
        f"ground-truth segments, {found['proposals_per_video']:.0f} proposals per video "
        f"(NMS tIoU {found['settings']['nms_tiou']:g}, in {found['unit']})",
        "  " + "  ".join(f"{k.replace('_tiou', ' tIoU ')} {summary[k]:.3f}" for k in recall),
        "  average recall (tIoU 0.5:0.05:1): " + "  ".join(f"{k} {summary[k]:.3f}" for k in ar),
    ]
    lines += [f"written {path}" for path in found["files"].values()]
    return "\n".join(lines)


def format_evaluation(result: dict[str, Any]) -> str:
    """What `mannlab eval` prints for mannlab.evaluation.evaluate_run's result, by its kind."""
    where = f"{result['checkpoint']} checkpoint (step {result['step']})"
    if result["kind"] == "bpc":
        lines = [f"{result['run_dir']}, {where}, state carried:"]
        for split in ("valid", "test"):
            row = result[split]
            lines.append(
                f"  {split}: {row['bpc']:.4f} BPC ({row['symbols']:,} symbols, {row['batch_size']} stream(s))"
            )
        return "\n".join(lines)
    if result["kind"] == "proposals":
        return format_proposals(result)
    if result["kind"] == "split":
        found = result["result"]
        lines = [
            f"{result['model']} on {result['task']}, {result['split']} split, "
            f"{found['checkpoint']} checkpoint",
            format_results(found),
        ]
        if "fed_back" in found:
            fb = found["fed_back"]
            lines.append(
                f"predictions fed back: per-digit error {100 * fb['digit_error']:.2f}%, "
                f"sequence error {100 * fb['sequence_error']:.2f}% over "
                f"{fb['sequences']} sequences"
            )
        lines.append(f"written {result['path']}")
        return "\n".join(lines)
    return (
        f"{result['model']} on {result['task']}, {where}, {result['batches']} x "
        f"{result['batch_size']} sequences per length ({result['length_name']}):\n"
        + format_table(result["rows"], train_length=result["train_length"])
    )
