"""The NaN and memory soak (reliability/soak.py) on a tiny LSTM: its checks find the first
non-finite loss, gradient or parameter with the step and batch seed, and its run and
report files are written."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from mannlab.config import RunConfig

spec = importlib.util.spec_from_file_location("soak", Path(__file__).parents[2] / "reliability" / "soak.py")
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

TINY = {
    "seed": 3,
    "model": {"name": "lstm", "hidden_size": 4},
    "task": {"name": "copy", "width": 2, "min_length": 1, "max_length": 2},
    "train": {"optimizer": "adam", "lr": 1e-3, "batch_size": 2, "val_batch_size": 2, "val_batches": 1},
}
RECIPE = """\
[model]
name = "lstm"
hidden_size = 4
[task]
name = "copy"
width = 2
min_length = 1
max_length = 2
[train]
batch_size = 2
val_batch_size = 2
val_batches = 1
"""


def tiny_soak(every=2):
    return soak.Soak(RunConfig.from_dict(TINY), every)


def test_first_non_finite_names_the_tensor():
    good, bad = torch.ones(3), torch.tensor([1.0, math.nan])
    assert soak.first_non_finite([("a", good)]) is None
    assert soak.first_non_finite([("a", good), ("b", bad), ("c", bad)]) == "b"
    assert soak.first_non_finite([("a", torch.tensor([math.inf]))]) == "a"


def test_a_clean_run_samples_rss_and_loss():
    result = tiny_soak().run(steps=5, progress_every=0)
    assert result["steps_done"] == 5 and result["non_finite"] is None and result["stopped"] == "steps"
    assert [r["step"] for r in result["samples"]] == [0, 2, 4, 5]
    assert all(r["rss"] > 0 for r in result["samples"]) and result["rss_max"] >= result["rss_start"]
    assert all(math.isfinite(r["loss"]) for r in result["samples"][1:])


def test_a_nan_weight_stops_at_the_first_step_with_its_batch_seed():
    run = tiny_soak()
    with torch.no_grad():
        next(run.model.parameters())[0] = math.nan
    result = run.run(steps=5, progress_every=0)
    assert result["non_finite"] == {
        "step": 0,
        "batch_seed": [3, 0],
        "where": "loss",
        "loss": result["non_finite"]["loss"],
    }
    assert result["steps_done"] == 0 and result["stopped"] == "non-finite"


def test_a_nan_gradient_names_the_parameter():
    run = tiny_soak()
    name, param = run.params[-1]
    calls = []

    def poison(grad):
        calls.append(1)
        return grad * math.nan if len(calls) == 3 else grad

    param.register_hook(poison)
    result = run.run(steps=5, progress_every=0)
    assert result["non_finite"] == {"step": 2, "batch_seed": [3, 2], "where": "gradient", "tensor": name}
    assert result["steps_done"] == 2


def test_commands_write_the_run_the_summary_and_the_figures(tmp_path):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    out = tmp_path / "out"
    common = ["--out", str(out), "--every", "2", "--progress", "0"]
    assert soak.main(["train", "--model", "lstm", "--recipe", str(recipe), "--steps", "3", *common]) == 0
    run = json.loads((out / "lstm.json").read_text())
    assert run["steps_done"] == 3 and run["non_finite_count"] == 0 and run["recipe"] == str(recipe)
    resume = ["train", "--model", "lstm", "--recipe", str(recipe), "--steps", "5", "--resume"]
    assert soak.main([*resume, *common]) == 0
    run = json.loads((out / "lstm.json").read_text())
    assert run["steps_done"] == 5 and run["sittings"] == 2
    with pytest.raises(SystemExit) as done:  # a finished run is left as it is
        soak.main([*resume, *common])
    assert done.value.code == 0 and json.loads((out / "lstm.json").read_text()) == run
    soak.main(["report", "--out", str(out), "--figures", str(tmp_path / "fig")])
    assert json.loads((out / "summary.json").read_text())["lstm"]["steps_asked"] == 5
    assert (tmp_path / "fig" / "soak-loss.png").stat().st_size > 0
    assert (tmp_path / "fig" / "soak-rss.png").stat().st_size > 0


def test_synthetic_stream_is_in_the_ptb_character_format(tmp_path):
    folder = soak.synthetic_ptb(tmp_path, symbols=2000)
    text = (folder / "ptb.char.train.txt").read_text()
    assert set(text) <= set("abcdefghijklmnopqrstuvwxyz_ \n") and text.endswith(" \n ")
    assert len(text.split()) >= 2000


def test_a_resumed_soak_ends_as_one_run(tmp_path):
    whole = soak.Soak(RunConfig.from_dict(TINY), 2, tmp_path / "whole.ckpt").run(steps=6, progress_every=0)
    soak.Soak(RunConfig.from_dict(TINY), 2, tmp_path / "split.ckpt").run(steps=3, progress_every=0)
    second = soak.Soak(RunConfig.from_dict(TINY), 2, tmp_path / "split.ckpt")
    second.resume()
    split = second.run(steps=6, progress_every=0)
    assert split["steps_done"] == 6 and split["sittings"] == 2 and whole["sittings"] == 1
    a, b = ({r["step"]: r["loss"] for r in run["samples"] if r["loss"] is not None} for run in (whole, split))
    assert a[2] == b[2] and a[6] == b[6]
    saved = soak.Soak(RunConfig.from_dict(TINY), 2, tmp_path / "whole.ckpt")
    saved.resume()
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(saved.params, second.params))


def test_resume_refuses_another_config(tmp_path):
    soak.Soak(RunConfig.from_dict(TINY), 2, tmp_path / "a.ckpt").run(steps=1, progress_every=0)
    other = RunConfig.from_dict({**TINY, "seed": 4})
    with pytest.raises(SystemExit, match="another config"):
        soak.Soak(other, 2, tmp_path / "a.ckpt").resume()
