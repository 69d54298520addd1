"""Where the reads land (evaluation/reads.py) and the tasks' source steps it relies on."""

import json

import numpy as np
import pytest
import torch

import mannlab
from conftest import tiny_lstm_run
from mannlab.evaluation import evaluate_lengths
from mannlab.evaluation.reads import read_targets
from mannlab.tasks import make


def one_hot(cells, slots):
    return torch.nn.functional.one_hot(torch.tensor(cells), slots).float()


def test_read_targets_worked_example():
    # writes: step 0 -> cell 0, 1 -> 1, 2 -> 2, 3 -> 0 (overwrites step 0's item), 4, 5 -> 3
    write = one_hot([0, 1, 2, 0, 3, 3], 4).view(1, 6, 1, 4)
    read = torch.zeros(1, 6, 1, 4)
    read[0, 3, 0, 1] = 1.0  # the query step reads cell 1, its source's cell
    read[0, 4, 0, 1] = 1.0  # output step 4 (source step 1) reads cell 1
    read[0, 5, 0, [0, 2]] = 0.5  # output step 5 (source step 0) half on cell 0, half on cell 2
    sources = np.array([[-1, -1, -1, 1, 1, 0]])
    mask = torch.tensor([[0, 0, 0, 0, 1, 1.0]])
    got = read_targets(read, write, sources, mask)
    assert got["reads_on_source"] == pytest.approx((1.0 + 0.5) / 2)
    # ahead 1: step 4 -> cell of step 2 (cell 2): 0; step 5 -> cell of step 1 (cell 1): 0
    assert got["reads_ahead_1"] == 0.0
    # ahead 2: step 4 -> step 3's cell 0: 0; step 5 -> step 2's cell 2: 0.5
    assert got["reads_ahead_2"] == pytest.approx(0.25)
    # behind 1: only step 4 has one (step 0's cell 0): 0
    assert got["reads_behind_1"] == 0.0
    # step 4's source cell 1 was kept; step 5's cell 0 was rewritten at step 3
    assert got["source_kept"] == pytest.approx(0.5)
    assert got["query_reads_on_source"] == 1.0


def test_read_targets_several_heads_count_each_cell_once():
    write = torch.zeros(1, 3, 2, 3)
    write[0, 0, :, 1] = 1.0  # both write heads choose cell 1 at step 0
    write[0, 1:, :, 2] = 1.0
    read = torch.zeros(1, 3, 2, 3)
    read[0, 2, 0, 1] = 1.0  # head 0 on the source's cell, head 1 elsewhere
    read[0, 2, 1, 0] = 1.0
    got = read_targets(read, write, np.array([[-1, -1, 0]]), torch.tensor([[0, 0, 1.0]]))
    assert got["reads_on_source"] == pytest.approx(0.5)
    assert "query_reads_on_source" not in got


def test_read_targets_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"sources must be \(B, T\)"):
        read_targets(torch.zeros(1, 3, 1, 2), torch.zeros(1, 3, 1, 2), np.zeros((1, 4)), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="must agree"):
        read_targets(torch.zeros(1, 3, 1, 2), torch.zeros(2, 3, 1, 2), np.zeros((1, 3)), torch.zeros(1, 3))


@pytest.mark.parametrize(
    "name, params",
    [
        ("copy", {"min_length": 1, "max_length": 6}),
        ("reverse", {"max_length": 5}),
        ("repeat_copy", {"max_length": 3, "max_repeats": 3}),
        ("associative_recall", {"min_items": 2, "max_items": 5}),
    ],
)
def test_source_steps_point_at_the_content(name, params):
    task = make(name, **params)
    x, y, m = task.sample(16, 3)
    sources = task.source_steps(x)
    width = y.shape[-1] - (1 if name == "repeat_copy" else 0)
    assert sources.shape == m.shape and (sources >= 0).any()
    for b, t in zip(*np.nonzero(sources >= 0)):
        s = sources[b, t]
        assert s < t
        wanted = y[b, t, :width] if m[b, t] > 0 else x[b, t, :width]  # output, or the query's row
        assert torch.equal(wanted, x[b, s, :width])
    if name == "associative_recall":  # each answer row and each query row has its source
        span = task.params["item_length"]
        assert ((sources >= 0).sum(1) == 2 * span).all()
    assert (sources[m.numpy() > 0] >= 0).any()


def test_tasks_without_sources_say_none():
    assert make("priority_sort").source_steps(torch.zeros(1, 3, 10)) is None


def test_evaluate_lengths_reports_reads_of_a_memory_model():
    task = make("copy", max_length=4)
    model = mannlab.TARDIS(task.input_size, task.output_size, hidden_size=16, memory_slots=8)
    rows = evaluate_lengths(model, task, [4], batches=1, batch_size=4, reads=True)
    assert {"reads_on_source", "reads_ahead_1", "source_kept"} <= rows[0].keys()
    assert 0.0 <= rows[0]["reads_on_source"] <= 1.0
    plain = evaluate_lengths(model, task, [4], batches=1, batch_size=4)
    assert "reads_on_source" not in plain[0] and plain[0]["bce"] == rows[0]["bce"]
    lstm = mannlab.LSTM(task.input_size, task.output_size, hidden_size=8)
    assert "reads_on_source" not in evaluate_lengths(lstm, task, [4], batches=1, batch_size=4, reads=True)[0]


def test_validation_logs_the_reads_when_asked(tmp_path, no_figures):
    from dataclasses import replace

    from mannlab.training import train

    lstm = tiny_lstm_run(tmp_path / "run", steps=2, val_every=2, val_reads=True)
    config = replace(lstm, model="tardis", model_args={"hidden_size": 8, "memory_slots": 8})
    train(config)
    rows = [row for row in map(json.loads, open(tmp_path / "run" / "metrics.jsonl")) if row["split"] == "val"]
    assert rows and all("reads_on_source" in row and "source_kept" in row for row in rows)


def test_read_curves_draw_the_logged_reads(tmp_path):
    from mannlab.errors import DataError
    from mannlab.reporting.read_figures import has_read_curves, read_curves

    rows = [
        {"step": s, "split": "val", "multiple": 1, "bce": 0.5, "reads_on_source": 0.1 * s, "source_kept": 1.0}
        for s in (1, 2, 3)
    ]
    assert has_read_curves(rows)
    read_curves(rows, tmp_path / "reads.png", title="t")
    assert (tmp_path / "reads.png").stat().st_size > 0
    plain = [{"step": 1, "split": "val", "bce": 0.5}]
    assert not has_read_curves(plain)
    with pytest.raises(DataError, match="train.val_reads"):
        read_curves(plain)
