"""Figures are written, accept torch and numpy, and reject wrong inputs clearly."""

import json
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")  # no screen on CI

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from mannlab.errors import DataError  # noqa: E402
from mannlab.reporting import figures as plot  # noqa: E402

B, T, C_IN, C_OUT, R, H = 2, 7, 5, 4, 1, 2


class Trace(NamedTuple):
    read_weights: torch.Tensor
    write_weights: torch.Tensor
    memory: torch.Tensor  # an extra field the plot must ignore


class NoReads(NamedTuple):
    write_weights: torch.Tensor


def make_example(slots=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    trace = Trace(
        read_weights=torch.softmax(torch.randn(B, T, R, slots, generator=g), dim=-1),
        write_weights=torch.softmax(torch.randn(B, T, H, slots, generator=g), dim=-1),
        memory=torch.zeros(B, T, slots, 3),
    )
    inputs = torch.randint(0, 2, (B, T, C_IN), generator=g).float()
    targets = torch.randint(0, 2, (B, T, C_OUT), generator=g).float()
    logits = torch.randn(B, T, C_OUT, generator=g, requires_grad=True)
    mask = torch.zeros(B, T)
    mask[:, T // 2 :] = 1
    return trace, inputs, targets, logits, mask


def assert_png(path):
    assert path.exists() and path.stat().st_size > 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_memory_access_writes_png_from_torch(tmp_path):
    trace, inputs, targets, logits, mask = make_example()
    out = tmp_path / "figures" / "copy.png"  # parent folder is created
    fig = plot.memory_access(trace, inputs, targets, logits, mask, path=out, index=1, title="copy")
    assert_png(out)
    # inputs, targets, outputs, 2 write heads, 1 read head (+ a colour bar each)
    assert len([ax for ax in fig.axes if ax.get_label() != "<colorbar>"]) == 6
    assert not plt.fignum_exists(fig.number)  # closed after saving


def test_memory_access_accepts_numpy(tmp_path):
    trace, inputs, targets, logits, mask = make_example()
    np_trace = Trace(*(t.detach().numpy() for t in trace))
    out = tmp_path / "np.png"
    outputs = logits.detach().numpy()
    plot.memory_access(np_trace, inputs.numpy(), targets.numpy(), outputs, mask.numpy(), path=out)
    assert_png(out)


def test_memory_access_inputs_only_returns_open_figure():
    trace, inputs, *_ = make_example()
    fig = plot.memory_access(trace, inputs)
    try:
        assert plt.fignum_exists(fig.number)  # no path: the caller owns it
        assert any(ax.get_xlabel() == "time" for ax in fig.axes)
    finally:
        plt.close(fig)


def test_missing_read_weights_is_a_clear_value_error():
    _, inputs, *_ = make_example()
    with pytest.raises(ValueError, match="read_weights"):
        plot.memory_access(NoReads(torch.zeros(B, T, H, 8)), inputs)


def test_shape_mismatch_and_bad_index_are_value_errors():
    trace, inputs, *_ = make_example()
    with pytest.raises(ValueError, match="inputs"):
        plot.memory_access(trace, inputs[:, :-1])
    with pytest.raises(ValueError, match="index"):
        plot.memory_access(trace, inputs, index=B)


def test_large_memory_is_cropped_to_used_slots():
    slots = 128
    read = torch.zeros(B, T, 1, slots)
    write = torch.zeros(B, T, 1, slots)
    for t in range(T):  # a head walking through slots 40..46
        read[:, t, 0, 40 + t] = 1.0
        write[:, t, 0, 40 + t] = 1.0
    trace = Trace(read, write, torch.zeros(1))
    fig = plot.memory_access(trace, torch.zeros(B, T, 3))
    try:
        labels = {ax.get_ylabel() for ax in fig.axes}
        assert "memory slot (40-46 of 128)" in labels
    finally:
        plt.close(fig)

    fig = plot.memory_access(trace, torch.zeros(B, T, 3), max_slots=20)
    try:
        assert "memory slot (40-59 of 128)" in {ax.get_ylabel() for ax in fig.axes}
    finally:
        plt.close(fig)


def test_many_heads_are_summed_with_a_note():
    trace, inputs, *_ = make_example()
    many = Trace(torch.rand(B, T, 6, 16), trace.write_weights, trace.memory)
    fig = plot.memory_access(many, inputs)
    try:
        titles = [ax.get_title(loc="left") for ax in fig.axes]
        assert "read weightings (sum of 6 read heads)" in titles
    finally:
        plt.close(fig)


def metrics_rows():
    rows = []
    for step in range(0, 500, 50):
        rows.append({"step": step, "split": "train", "bce": 0.7 * 0.99**step, "loss": 0.7 * 0.99**step})
        for length in (20, 40):
            rows.append(
                {
                    "step": step,
                    "split": "val",
                    "length": length,
                    "bce": 0.6 * 0.99**step,
                    "bit_error_rate": max(0.0, 0.4 - step / 1000),
                }
            )
    return rows


def test_learning_curve_from_jsonl_with_truncated_last_line(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    text = "\n".join(json.dumps(r) for r in metrics_rows())
    metrics.write_text(text + '\n{"step": 500, "split": "tr')  # writer interrupted
    out = tmp_path / "curve.png"
    fig = plot.learning_curve(metrics, path=out, threshold=0.02, title="copy")
    assert_png(out)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["train bce", "val bce (length 20)", "val bce (length 40)", "threshold 0.02"]
    assert fig.axes[0].get_yscale() == "log"


def test_learning_curve_from_rows_and_run_dir(tmp_path):
    rows = metrics_rows()
    fig = plot.learning_curve(rows, metric="bit_error_rate")  # zeros drawn at a floor
    try:
        labels = fig.axes[0].get_legend_handles_labels()[1]
        assert labels[0] == "train loss"  # train rows have no bit_error_rate
    finally:
        plt.close(fig)
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "figures" / "curve.png"
    plot.learning_curve(tmp_path, path=out)
    assert_png(out)


def test_learning_curve_errors(tmp_path):
    with pytest.raises(ValueError, match="accuracy"):
        plot.learning_curve(metrics_rows(), metric="accuracy")
    bad = tmp_path / "metrics.jsonl"
    row = '{"step": 0, "split": "train", "bce": 1}'
    bad.write_text(f"{row}\nnot json\n{row}\n")  # a bad line that is not the last
    with pytest.raises(DataError, match="line 2"):
        plot.learning_curve(bad)


def _val_run(directory, values, cpu_per_step=None, multiples=(1, 2)):
    """A run directory whose metrics.jsonl holds validation rows at two length multiples."""
    directory.mkdir(parents=True)
    rows = []
    for step, value in enumerate(values, start=1):
        for multiple in multiples:
            row = {
                "step": step * 100,
                "split": "val",
                "length": 20 * multiple,
                "multiple": multiple,
                "bce": value * multiple,
                "wall": step * 60.0,
            }
            if cpu_per_step:
                row["cpu"] = step * cpu_per_step
            rows.append(row)
    (directory / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return directory


def test_compare_curves_one_line_per_run_at_the_training_length(tmp_path):
    a = _val_run(tmp_path / "a", [0.6, 0.3, 0.1], cpu_per_step=30.0)
    b = _val_run(tmp_path / "b", [0.5, 0.05], cpu_per_step=120.0)
    fig = plot.compare_curves({"A": a, "B": b / "metrics.jsonl"}, x="cpu", threshold=0.02)
    try:
        ax = fig.axes[0]
        assert ax.get_legend_handles_labels()[1] == ["A", "B", "threshold 0.02"]
        line_a, line_b = ax.get_lines()[:2]
        assert list(line_a.get_xdata()) == [0.5, 1.0, 1.5]  # CPU minutes
        assert list(line_a.get_ydata()) == [0.6, 0.3, 0.1]  # multiple 1 only
        assert list(line_b.get_xdata()) == [2.0, 4.0] and ax.get_xlabel() == "CPU minutes"
    finally:
        plt.close(fig)
    with pytest.raises(DataError, match="cpu"):  # an older run logged no CPU seconds
        plot.compare_curves({"old": _val_run(tmp_path / "old", [0.5])}, x="cpu")
    with pytest.raises(ValueError, match="x must be"):
        plot.compare_curves({"A": a}, x="epoch")


def test_compare_command_writes_the_figure(tmp_path, capsys):
    from mannlab.cli import main

    a = _val_run(tmp_path / "a", [0.6, 0.3])
    b = _val_run(tmp_path / "b", [0.5, 0.2])
    out = tmp_path / "cmp.png"
    assert main(["compare", f"first={a}", str(b), "--x", "wall", "--out", str(out)]) == 0
    assert_png(out)
    assert "comparison:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["compare", str(a), "--x", "cpu", "--out", str(out)])
