"""A diverged model is never "best": the untrained model is the first best checkpoint (step 0),
a validation worse than it never replaces it, and loading a run that diverged says so."""

import json
import logging
from pathlib import Path

import pytest

import mannlab
from conftest import tiny_lstm_run
from mannlab.config import RunConfig
from mannlab.loading import load_run
from mannlab.training import DivergedError, train
from mannlab.training.sampled import SampledBatches
from mannlab.training.source import Validation


def tiny(run_dir: Path, steps: int, **train_args) -> RunConfig:
    return tiny_lstm_run(
        run_dir, steps, **{"val_length_multiples": (1,), "checkpoint_every": 1, **train_args}
    )


def validations(monkeypatch, values):
    """SampledBatches.validate gives ``values`` in turn (the first: the untrained model)."""
    it = iter(values)

    def validate(self, model):
        value = next(it)
        row = {"bce": value, "length": 2, "multiple": 1}
        return Validation([({"bce": value}, {"length": 2, "multiple": 1})], value, value, [row])

    monkeypatch.setattr(SampledBatches, "validate", validate)


@pytest.fixture(autouse=True)
def _no_figures(no_figures):
    """Every run here draws no figures."""


def test_a_run_that_only_got_worse_keeps_the_untrained_model_as_best(tmp_path, monkeypatch, caplog):
    run = tmp_path / "run"
    validations(monkeypatch, [0.69, 1e2, 1e3, 1e5])
    with pytest.raises(DivergedError):
        train(tiny(run, steps=10))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "diverged"
    assert summary["best_val"]["step"] == 0 and summary["best_val"]["bce"] == 0.69
    assert json.loads((run / "checkpoints" / "best" / "meta.json").read_text())["step"] == 0
    with caplog.at_level(logging.WARNING, logger="mannlab"):
        model = mannlab.load(run)
    assert model is not None
    assert any(
        "diverged" in r.getMessage() and "best checkpoint, from step 0" in r.getMessage()
        for r in caplog.records
    )


def test_the_best_is_the_best_validation_below_the_untrained_models(tmp_path, monkeypatch, caplog):
    run = tmp_path / "run"
    validations(monkeypatch, [0.69, 0.8, 0.5, 0.6, 20.0, 30.0, 40.0])
    with pytest.raises(DivergedError):
        train(tiny(run, steps=10))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_val"]["step"] == 2 and summary["best_val"]["bce"] == 0.5
    assert json.loads((run / "checkpoints" / "best" / "meta.json").read_text())["step"] == 2
    with caplog.at_level(logging.WARNING, logger="mannlab"):
        load_run(run)
    assert any(
        "diverged" in r.getMessage() and "best checkpoint, from step 2" in r.getMessage()
        for r in caplog.records
    )


def test_a_run_that_did_not_diverge_loads_quietly(tmp_path, monkeypatch, caplog):
    run = tmp_path / "run"
    validations(monkeypatch, [0.69, 0.7, 0.6, 0.65])
    summary = train(tiny(run, steps=3))
    assert summary["stopped_by"] == "steps" and summary["best_val"]["step"] == 2
    with caplog.at_level(logging.WARNING, logger="mannlab"):
        load_run(run)
    assert not [r for r in caplog.records if "diverged" in r.getMessage()]
