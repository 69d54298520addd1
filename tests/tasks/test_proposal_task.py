"""The proposal tasks (SST on windows of whole videos; ARMIN section 4.3, appendix C.3): windows
and labels agree with proposal_math, anchor weights come from the training split, the loss
is SST's weighted one, epochs, the whole-video evaluation (JSON, figures, seconds for
THUMOS'14), and `mannlab train` + `eval` + `compare --proposals` on a tiny synthetic task."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from data_files import write_thumos
from mannlab import ConfigError, DataError, tasks
from mannlab.cli import main
from mannlab.config import RunConfig, TrainConfig
from mannlab.evaluation.proposals import evaluate_proposals, score_videos
from mannlab.reporting.proposal_figures import draw_evaluation_figures
from mannlab.tasks.proposal_math import anchor_weights, proposal_labels, weighted_proposal_loss
from mannlab.training.schedules import epoch_plan, step_decay
from mannlab.wrappers import model_for_task

TINY = dict(
    train_videos=8,
    valid_videos=2,
    test_videos=3,
    video_steps=64,
    feature_size=8,
    classes=2,
    min_length=4,
    max_length=16,
    gap=[2, 8],
    window=32,
    anchors=8,
    anchor_stride=2,
)
TINY_SETS = [f"task.{k}={json.dumps(v)}" for k, v in TINY.items()]


def tiny(**kw):
    return tasks.make("proposals-synthetic", **{**TINY, **kw})


def tiny_model(task, name="gru", **kw):
    torch.manual_seed(0)
    sizes = {
        "gru": dict(hidden_size=6),
        "lstm": dict(hidden_size=5),
        "armin": dict(hidden_size=4, memory_slots=3),
    }
    return model_for_task(task, name, projection_size=5, **{**sizes[name], **kw})


# ------------------------------------------------------------------ windows and labels


def test_windows_are_slices_of_whole_videos_with_their_labels():
    task = tiny()
    assert (task.input_size, task.output_size, task.train_length) == (8, 8, 32)
    assert task.input_kind == "snippets" and task.loss_key == "wbce"
    inputs, targets, mask = task.sample(6, [3, 1], split="valid")
    assert inputs.shape == (6, 32, 8) and targets.shape == (6, 32, 8) and bool((mask == 1).all())
    chosen, starts = task.window_positions(6, [3, 1], 32, "valid")
    for b, (v, start) in enumerate(zip(chosen, starts)):
        video = task.videos("valid")[v]
        assert torch.equal(inputs[b], torch.from_numpy(video.features[start : start + 32]))
        labels = proposal_labels(video.segments, len(video.features), task.lengths, 0.5)
        assert np.array_equal(targets[b].numpy(), labels[start : start + 32])
    assert np.array_equal(task.lengths, 2 * np.arange(1, 9))
    again = task.sample(6, [3, 1], split="valid")
    assert all(torch.equal(a, b) for a, b in zip((inputs, targets, mask), again))


def test_a_video_shorter_than_the_window_is_padded_with_mask_zero():
    task = tiny()
    inputs, targets, mask = task.sample(3, 0, length=100)
    assert inputs.shape == (3, 100, 8)
    assert bool((mask[:, :64] == 1).all()) and bool((mask[:, 64:] == 0).all())
    assert float(inputs[:, 64:].abs().sum()) == 0 and float(targets[:, 64:].sum()) == 0


def test_splits_come_from_disjoint_seeds():
    task = tiny()
    names = {split: {v.name for v in task.videos(split)} for split in ("train", "valid", "test")}
    assert [len(names[s]) for s in ("train", "valid", "test")] == [8, 2, 3]
    assert not (
        names["train"] & names["valid"] or names["train"] & names["test"] or names["valid"] & names["test"]
    )
    firsts = [task.videos(s)[0].features for s in ("train", "valid", "test")]
    assert not np.array_equal(firsts[0], firsts[1]) and not np.array_equal(firsts[0], firsts[2])
    other = tiny(data_seed=1)
    assert not np.array_equal(other.videos("train")[0].features, firsts[0])


def test_anchor_weights_come_from_the_training_split():
    task = tiny()
    train = [proposal_labels(v.segments, len(v.features), task.lengths) for v in task.videos("train")]
    test = [proposal_labels(v.segments, len(v.features), task.lengths) for v in task.videos("test")]
    assert np.allclose(task.weights, anchor_weights(train))
    assert not np.allclose(task.weights, anchor_weights(test))
    assert np.allclose(task.weights.sum(1), 1.0)


def test_loss_is_sst_weighted_bce_and_metrics():
    task = tiny()
    inputs, targets, mask = task.sample(4, 0)
    mask[1, 20:] = 0
    logits = torch.randn(4, 32, 8, generator=torch.Generator().manual_seed(0), requires_grad=True)
    loss = task.loss(logits, targets, mask)
    assert torch.isfinite(loss) and loss.requires_grad
    assert torch.allclose(loss, weighted_proposal_loss(logits, targets, mask, task.weights))
    # step_nll sums the same terms per step: its total over the scored pairs is the loss
    assert torch.allclose(task.step_nll(logits, targets, mask).sum() / (mask.sum() * 8), loss)
    metrics = task.metrics(logits, targets, mask)
    assert set(metrics) == {"wbce", "bce", "positive_rate"}
    assert math.isclose(metrics["wbce"], float(loss.detach()), rel_tol=1e-6)
    # at logits 0 every pair costs w ln 2 (the constant predictor's loss)
    zero = task.metrics(torch.zeros(4, 32, 8), targets, mask)
    assert math.isclose(zero["bce"], math.log(2), rel_tol=1e-6)
    loss.backward()
    assert torch.isfinite(logits.grad).all()


def test_epochs_tile_the_training_videos():
    task = tiny()
    assert task.windows("train") == 8 * 2  # 64-step videos, windows of 32
    assert task.steps_per_epoch(5) == 4 and task.steps_per_epoch(16) == 1
    train = TrainConfig(epochs=3, steps=1000, batch_size=5, lr_decay_epochs=(2,), lr_decay_steps=(5,))
    planned, milestones = epoch_plan(train, task)
    assert planned.steps == 12 and milestones == (5, 8)
    assert epoch_plan(TrainConfig(epochs=3, steps=7, batch_size=5), task)[0].steps == 7  # the smaller
    assert step_decay(1.0, 4, milestones, 0.1) == 1.0
    assert math.isclose(step_decay(1.0, 5, milestones, 0.1), 0.1)
    assert math.isclose(step_decay(1.0, 9, milestones, 0.1), 0.01)
    with pytest.raises(ConfigError, match="need a task that defines an epoch"):
        epoch_plan(TrainConfig(epochs=3), tasks.make("copy"))


def test_parameters_are_checked():
    with pytest.raises(ConfigError, match="window must be an integer >= 1"):
        tiny(window=0)
    with pytest.raises(ConfigError, match="label_tiou must be a finite number"):
        tiny(label_tiou=1.5)
    with pytest.raises(ConfigError, match="video_steps"):
        tiny(video_steps=10)  # max_length + the longest gap do not fit
    with pytest.raises(ConfigError, match="unknown parameter 'windw'"):
        tiny(windw=3)
    with pytest.raises(ConfigError, match="unknown split 'dev'"):
        tiny().sample(2, 0, split="dev")


# ------------------------------------------------------------------ evaluation


@pytest.mark.parametrize("name", ["gru", "lstm", "armin"])
def test_chunked_scoring_equals_one_pass_and_batching_changes_nothing(name):
    task = tiny(video_steps=48, max_length=12, test_videos=3)
    model = tiny_model(task, name).double()
    videos = task.videos("test")
    whole = score_videos(model, videos, chunk=1000, batch_size=1)
    chunked = score_videos(model, videos, chunk=7, batch_size=3)
    for a, b in zip(whole, chunked, strict=True):
        assert a.shape == (48, 8) and np.allclose(a, b, atol=1e-10)
        assert ((a > 0) & (a < 1)).all()


def test_evaluation_writes_proposals_recall_and_figures(tmp_path):
    task = tiny()
    model = tiny_model(task)
    result = evaluate_proposals(model, task, "test", out_dir=tmp_path)
    assert set(result["files"]) == {"proposals", "eval"}  # evaluation draws nothing
    summary = result["summary"]
    assert {"recall@1000_tiou0.6", "recall@1000_tiou0.8", "ar@100", "ar@1000"} <= set(summary)
    assert all(0.0 <= v <= 1.0 for v in summary.values())
    assert result["videos"] == 3 and result["unit"] == "steps"
    for path in result["files"].values():
        assert (tmp_path / path.split(str(tmp_path) + "/")[1]).is_file()
    document = json.loads((tmp_path / "proposals-test.json").read_text())
    assert document["unit"] == "steps" and set(document["results"]) == {v.name for v in task.videos("test")}
    first = next(iter(document["results"].values()))
    scores = [p["score"] for p in first]
    assert scores == sorted(scores, reverse=True) and len(first) <= task.params["max_proposals"]
    assert all(0 <= p["segment"][0] < p["segment"][1] <= 64 for p in first)
    saved = json.loads((tmp_path / "eval-test.json").read_text())
    assert saved["summary"] == summary and len(saved["curves"]["recall_vs_tiou"][0]) == 20
    figures = draw_evaluation_figures(result, tmp_path, label="gru")
    assert figures["recall_vs_proposals"] == str(tmp_path / "figures" / "proposals_test_ar_vs_proposals.png")
    assert all(Path(path).stat().st_size > 1000 for path in figures.values())
    first_two = evaluate_proposals(model, task, "test", limit=2, batch_size=1)
    assert first_two["videos"] == 2 and "files" not in first_two


# ------------------------------------------------------------------ THUMOS'14 from a tiny fixture


def test_thumos_task_reads_the_files_and_writes_seconds(tmp_path):
    root = write_thumos(tmp_path)
    task = tasks.make("thumos14-proposals", data_dir=str(root), valid_videos=2, window=16)
    assert [len(task.videos(s)) for s in ("train", "valid", "test")] == [4, 2, 2]
    video = task.videos("test")[0]
    assert video.fps == 30.0 and video.snippet_frames == 16
    assert np.allclose(video.segments, np.array([[2.0, 5.2], [12.1, 14.0]]) * 30 / 16)
    assert task.input_size == 5 and task.steps_per_epoch(2) == 8  # 4 videos x ceil(60 / 16)
    result = evaluate_proposals(tiny_model(task), task, "test", out_dir=tmp_path / "run")
    assert result["unit"] == "seconds"
    document = json.loads((tmp_path / "run" / "proposals-test.json").read_text())
    assert document["ground_truth"]["video_test_0000000"] == [[2.0, 5.2], [12.1, 14.0]]
    ends = [p["segment"][1] for p in document["results"]["video_test_0000000"]]
    assert max(ends) <= 60 * 16 / 30 + 1e-6  # seconds, within the video


def test_thumos_task_says_what_is_missing(tmp_path):
    with pytest.raises(DataError, match="THUMOS'14 validation annotations not found"):
        tasks.make("thumos14-proposals", data_dir=str(tmp_path))
    root = write_thumos(tmp_path)
    (root / "thumos14" / "features.npz").unlink()
    with pytest.raises(DataError, match="THUMOS'14 features not found"):
        tasks.make("thumos14-proposals", data_dir=str(root))
    with pytest.raises(ConfigError, match="valid_videos must be < 6"):
        write_thumos(tmp_path / "b")
        tasks.make("thumos14-proposals", data_dir=str(tmp_path / "b"), valid_videos=6)


# ------------------------------------------------------------------ the command line


def test_train_eval_and_compare_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    common = ["--task", "proposals-synthetic", "--steps", "6", "--no-progress", "--batch-size", "4"]
    sets = [
        *TINY_SETS,
        "model.projection_size=6",
        "train.val_every=3",
        "train.val_batch_size=4",
        "train.val_batches=1",
        "train.lr_decay_steps=[4]",
    ]
    for name, size in (("gru", "model.hidden_size=6"), ("armin", "model.hidden_size=4")):
        args = ["train", "--model", name, *common, "--run-dir", f"runs/{name}"]
        assert main([*args, *[a for s in [*sets, size] for a in ("--set", s)]]) == 0
        assert main(["eval", f"runs/{name}"]) == 0
    out = capsys.readouterr().out
    assert "recall@1000 tIoU 0.6" in out and "ar@100" in out and "proposals-test.json" in out
    assert "figures/proposals_test_ar_vs_proposals.png" in out  # drawn by `mannlab eval`
    state = torch.load(tmp_path / "runs/gru/checkpoints/last/train_state.pt", weights_only=True)
    assert math.isclose(state["optimizer"]["param_groups"][0]["lr"], 2e-4)  # 2e-3 / 10 after step 4
    config = RunConfig.from_dict(__import__("tomllib").loads((tmp_path / "runs/gru/config.toml").read_text()))
    assert config.train.lr_decay_steps == (4,)
    assert main(["compare", "--proposals", "runs/gru", "runs/armin", "X=runs/gru", "--out", "figs/syn"]) == 0
    out = capsys.readouterr().out
    assert "| gru | 1 |" in out and "| armin | 1 |" in out and "| X | 1 |" in out
    assert (tmp_path / "figs/syn-ar-vs-proposals.png").is_file()
    assert (tmp_path / "figs/syn-recall-vs-tiou.png").is_file()


def test_compare_proposals_asks_for_the_evaluation_first(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit):
        main(["compare", "--proposals", str(tmp_path / "run"), "--out", str(tmp_path / "x")])
    assert "mannlab eval" in capsys.readouterr().err


def test_a_recipe_runs_and_evaluates_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sets = [*TINY_SETS, "model.hidden_size=4", "model.memory_slots=3", "model.projection_size=6"]
    sets += ["train.steps=4", "train.val_every=2", "train.val_batch_size=4", "train.val_batches=1"]
    sets += ["train.batch_size=4", "train.lr_decay_steps=[3]"]
    argv = ["run", "proposals-synthetic-armin", "--seeds", "0", "--run-dir", "runs/syn", "--no-progress"]
    assert main([*argv, *[a for s in sets for a in ("--set", s)]]) == 0
    assert main(["eval", "runs/syn/seed0"]) == 0
    assert "recall@1000 tIoU 0.8" in capsys.readouterr().out
    assert (tmp_path / "runs/syn/seed0/figures/proposals_test_recall_vs_tiou.png").is_file()


def test_report_has_a_proposal_table(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sets = [*TINY_SETS, "model.hidden_size=4", "model.projection_size=6", "train.val_every=2"]
    sets += ["train.val_batch_size=4", "train.val_batches=1"]
    for seed in (0, 1):
        argv = ["train", "--model", "gru", "--task", "proposals-synthetic", "--steps", "2"]
        argv += ["--seed", f"{seed}", "--batch-size", "4", "--no-progress"]
        argv += ["--run-dir", f"runs/gru/seed{seed}"]
        assert main([*argv, *[a for s in sets for a in ("--set", s)]]) == 0
    assert main(["eval", "runs/gru/seed0"]) == 0
    capsys.readouterr()
    assert main(["report", "runs"]) == 0
    out = capsys.readouterr().out
    assert "# Temporal action proposals in `runs`" in out and "| gru (`gru`) | 1 |" in out
    assert "Not evaluated (1" in out and "`gru/seed1`" in out
