"""The bAbI task end to end: the GRU fact encoder (D-NTM appendix A.1.1) in front of any model,
per-task validation errors in the training loop, the per-task result table (mean error,
failed tasks), and the 'ce' metric key of data-set tasks. Fixtures: generated v1.2 files
(tests/data/test_data_babi.py), never the network or a real data set."""

import json

import numpy as np
import pytest
import torch

from data_files import write_archive
from mannlab import tasks
from mannlab.building import build_run
from mannlab.config import RunConfig
from mannlab.data import download
from mannlab.errors import ConfigError
from mannlab.evaluation import mean_metrics
from mannlab.reporting.text_tables import format_group_errors, format_results
from mannlab.tasks.dataset import evaluate_split
from mannlab.training.sampled import validation_sets
from mannlab.training.schedules import start_minibatch
from mannlab.training.update import model_aux_loss
from mannlab.wrappers import FactEncoded, GRUFactEncoder, model_for_task


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


@pytest.fixture
def archive(tmp_path):
    return str(write_archive(tmp_path / "tasks_1-20_v1-2.tar.gz"))


def gru_task(archive, **params):
    return tasks.make("babi", tasks=[1, 19], data_dir=archive, fact_encoder="gru", **params)


def test_gru_inputs_are_word_ids_one_sentence_per_step(archive):
    task = gru_task(archive, max_facts=3)
    assert task.params["fact_encoder"] == "gru" and task.params["encoding"] is None
    longest = len("how do you go from the hallway to the kitchen".split())
    assert task.sentence_length == longest and task.input_size == longest + 2
    q = task.questions["test"][1]  # Daniel: 4 facts, the last 3 kept
    x, y, m = task._pad([task._example(q)])
    assert x.shape == (1, 3 + 1 + 1, longest + 2) and m[0].tolist() == [0, 0, 0, 0, 1]
    ids = x[0, :, :longest].long()
    words = [" ".join(task.words[int(i) - 1] for i in row if i > 0) for row in ids]
    assert words == [
        "john went to the hallway",
        "daniel went back to the hallway",
        "sandra moved to the garden",
        "where is daniel",
        "",
    ]
    assert x[0, 3, -2] == 1 and x[0, 4, -1] == 1 and x[0, :3, -2:].sum() == 0
    assert "daniel went back to the hallway" in task.render(x, y, m)
    x2, _, _ = task.sample(6, 3)
    assert torch.equal(x2, task.sample(6, 3)[0])


def test_gru_encoder_is_the_final_state_and_order_sensitive():
    torch.manual_seed(0)
    enc = GRUFactEncoder(vocabulary_size=9, word_size=5, fact_size=7)
    ids = torch.tensor([[3, 1, 4, 0, 0], [4, 1, 3, 0, 0], [2, 7, 1, 8, 2], [0, 0, 0, 0, 0]])
    facts = enc(ids)
    assert facts.shape == (4, 7)
    for n, length in enumerate([3, 3, 5]):  # the state after the last real word
        _, last = enc.gru(enc.embedding(ids[n : n + 1, :length]))
        assert torch.allclose(facts[n], last[0, 0], atol=1e-6)
    assert torch.equal(facts[3], torch.zeros(7))  # no words: the zero vector
    assert not torch.allclose(facts[0], facts[1])  # a bag of words could not tell these apart
    facts.sum().backward()
    assert enc.embedding.weight.grad[0].abs().sum() == 0 and enc.gru.weight_hh_l0.grad.abs().sum() > 0


def test_bidirectional_encoder_keeps_the_first_word_and_last_word_states(archive):
    torch.manual_seed(0)
    enc = GRUFactEncoder(vocabulary_size=9, word_size=5, fact_size=6, bidirectional=True)
    ids = torch.tensor([[3, 1, 4, 0, 0], [2, 7, 1, 8, 2], [0, 0, 0, 0, 0]])
    facts = enc(ids)
    assert facts.shape == (3, 6) and torch.equal(facts[2], torch.zeros(6))
    for n, length in enumerate([3, 5]):
        words = enc.embedding(ids[n : n + 1, :length])
        _, last = enc.gru(words)  # forward: after the last word; backward: after the first
        assert torch.allclose(facts[n], torch.cat([last[0, 0], last[1, 0]]), atol=1e-6)
    task = tasks.make("babi", tasks=[1, 19], data_dir=archive, fact_encoder="bigru", fact_size=8)
    net = model_for_task(task, "lstm", hidden_size=4)
    assert net.encoder.gru.bidirectional and net.model.input_size == 8 + 2
    x, _, _ = task.sample(2, 0)
    assert net(x)[0].shape == (*x.shape[:2], task.output_size)
    with pytest.raises(ConfigError, match="fact_size.*even"):
        tasks.make("babi", tasks=[1], data_dir=archive, fact_encoder="bigru", fact_size=7)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("lstm", {"hidden_size": 8}),
        ("ntm", {"controller_size": 8, "memory_slots": 4, "memory_width": 4}),
        ("dnc", {"controller_size": 8, "memory_slots": 4, "memory_width": 4}),
        (
            "dntm",
            {
                "controller": "gru",
                "controller_size": 8,
                "memory_slots": 4,
                "address_size": 2,
                "content_size": 3,
                "addressing": "reinforce",
                "curriculum_p0": 1.0,
            },
        ),
        (
            "tardis",
            {
                "hidden_size": 8,
                "memory_slots": 4,
                "address_size": 2,
                "content_size": 3,
                "addressing": "reinforce",
            },
        ),
        ("armin", {"hidden_size": 8, "memory_slots": 4}),
    ],
)
def test_every_model_trains_jointly_with_the_encoder(archive, name, kwargs):
    task = gru_task(archive)
    net = build_run(
        RunConfig.from_dict({"model": {"name": name, **kwargs}, "task": {"name": "babi", **task.params}})
    )[1]
    assert isinstance(net, FactEncoded) and net.model.input_size == 64 + 2
    start_minibatch(net, 0)  # the D-NTM curriculum switch reaches the model
    if name == "dntm":
        assert net.model.soft_minibatch is True and "soft_minibatch" not in net.__dict__
    x, y, m = task.sample(3, 0)
    logits, _, trace = net(x, return_trace=True)
    assert logits.shape == (*x.shape[:2], task.output_size)
    assert name == "lstm" or hasattr(trace, "read_weights")
    loss = task.loss(logits, y, m)
    if net.uses_aux_loss:
        loss = loss + model_aux_loss(
            net,
            trace,
            task.step_nll(logits, y, m).detach(),
            lambda out: task.step_nll(out, y, m),
            task.outputs_per_step,
        )
    loss.backward()
    assert net.encoder.gru.weight_ih_l0.grad.abs().sum() > 0
    assert any(k.startswith("encoder.") for k in net.state_dict())
    assert any(k.startswith("model.") for k in net.state_dict())


def test_bow_builds_the_plain_model(archive):
    task = tasks.make("babi", tasks=[1], data_dir=archive)
    net = model_for_task(task, "lstm", hidden_size=4)
    assert not isinstance(net, FactEncoded) and task.params["fact_encoder"] == "bow"
    assert tasks.make("babi", tasks=[1], data_dir=archive, encoding="words").params["fact_encoder"] == "words"


def test_validation_errors_per_task_are_pooled_over_batches(archive):
    task = tasks.make("babi", tasks=[1, 19], data_dir=archive)
    config = RunConfig.from_dict(
        {
            "model": {"name": "lstm", "hidden_size": 4},
            "task": {"name": "babi"},
            "train": {"val_batch_size": 5, "val_batches": 3},
        }
    )
    sets = validation_sets(task, config)
    ((multiple, _, batches),) = sets
    assert multiple == 1 and all(len(b) == 4 for b in batches)
    net = model_for_task(task, "lstm", hidden_size=4)
    with torch.no_grad():
        row = mean_metrics(net, task, batches)
        wrong = {1: [0, 0], 19: [0, 0]}
        for x, y, m, groups in batches:
            hits = (net(x)[0].argmax(-1) != y.argmax(-1))[m > 0]
            for g, h in zip(groups, hits.tolist()):
                wrong[int(g)][0] += h
                wrong[int(g)][1] += 1
    expected = {g: w / n for g, (w, n) in wrong.items()}
    assert row["error/qa1"] == pytest.approx(expected[1]) and row["error/qa19"] == pytest.approx(expected[19])
    assert row["mean_group_error"] == pytest.approx((expected[1] + expected[19]) / 2)
    assert row["failed_groups"] == sum(e > 0.05 for e in expected.values())
    assert "ce" in row and "bce" not in row
    assert format_group_errors(row).startswith(f"qa1 {100 * expected[1]:.1f}%, qa19")


def test_result_table_reports_mean_error_and_failed_tasks(archive):
    task = gru_task(archive)
    net = model_for_task(task, "lstm", hidden_size=4)
    result = evaluate_split(net, task, "test", batch_size=3)
    errors = [r["error"] for r in result["per_group"].values()]
    assert result["mean_group_error"] == pytest.approx(np.mean(errors))
    assert result["failed_groups"] == sum(e > 0.05 for e in errors) and result["fail_threshold"] == 0.05
    assert "ce" in result and "bce" not in result
    table = format_results(result)
    failed = [line.split()[-1] for line in table.splitlines() if line.startswith("failed (error > 5%)")]
    assert "mean over groups" in table and failed == [f"{result['failed_groups']}/2"]


def test_training_run_logs_per_task_errors_and_ce(archive, tmp_path, capsys):
    from mannlab.cli import main

    run = tmp_path / "run"
    status = main(
        [
            "train",
            "--model",
            "ntm",
            "--task",
            "babi",
            "--data-dir",
            archive,
            "--run-dir",
            str(run),
            "--steps",
            "4",
            "--no-progress",
            "--set",
            "task.fact_encoder=gru",
            "--set",
            "task.tasks=[1, 19]",
            "--set",
            "task.fact_size=6",
            "--set",
            "task.word_size=4",
            "--set",
            "model.controller_size=6",
            "--set",
            "model.memory_slots=4",
            "--set",
            "model.memory_width=3",
            "--set",
            "train.val_every=2",
            "--set",
            "train.val_batch_size=4",
            "--set",
            "train.val_batches=2",
        ]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert "validation error per group" in out and "qa19" in out
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if r["split"] == "val"]
    train = [r for r in rows if r["split"] == "train"]
    assert len(val) == 2 and train and all("ce" in r and "bce" not in r for r in rows)
    assert {"error/qa1", "error/qa19", "mean_group_error", "failed_groups"} <= set(val[0])
    summary = json.loads((run / "summary.json").read_text())
    # the best: the lowest validation, the untrained model's (step 0, not a logged row) included
    assert summary["best_val"]["metric"] == "ce" and summary["best_val"]["ce"] <= min(r["ce"] for r in val)
    assert (run / "figures" / "learning_curve.png").is_file()
    assert 'fact_encoder = "gru"' in (run / "config.toml").read_text()
    assert main(["eval", str(run), "--split", "test"]) == 0
    result = json.loads((run / "eval-test.json").read_text())
    assert result["examples"] == 4 and "failed_groups" in result
    assert "failed (error > 5%)" in capsys.readouterr().out
