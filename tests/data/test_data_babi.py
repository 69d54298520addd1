"""bAbI: parser on multi-story files with supporting facts, errors naming file and line,
archive and directory sources, validation split, vocabulary, the task's batches (fixtures
generated here in the v1.2 format; never the network or a real data set)."""

import io
import json
import tarfile

import pytest
import torch

from data_files import QA1, QA19, write_archive
from mannlab import tasks
from mannlab.data import babi, download
from mannlab.errors import ConfigError, DataError
from mannlab.models import build_model
from mannlab.reporting.text_tables import format_results
from mannlab.tasks.dataset import evaluate_split


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Tests never touch the network: a download attempt fails as it would offline."""

    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


def test_parse_multi_story_with_supporting_facts():
    qs = babi.parse(QA1 + QA19, "qa.txt", task=1)
    assert len(qs) == 4
    assert qs[0].facts == (
        ("mary", "moved", "to", "the", "bathroom"),
        ("john", "went", "to", "the", "hallway"),
    )
    assert (
        qs[0].question == ("where", "is", "mary") and qs[0].answer == "bathroom" and qs[0].supporting == (0,)
    )
    # the question line (3) is numbered but is no fact: line 4 is the third statement
    assert len(qs[1].facts) == 4 and qs[1].supporting == (2,) and qs[1].facts[2][0] == "daniel"
    assert qs[2].facts == (("sandra", "travelled", "to", "the", "office"),)  # a new story
    assert qs[3].answer == "e,n" and qs[3].supporting == (0, 1)


@pytest.mark.parametrize(
    "text, what",
    [
        ("1 Mary moved.\n3 John went.\n", "line 2: line number 3 does not follow 1"),
        ("1 Mary moved.\nJohn went.\n", "line 2: expected '<number> <sentence>'"),
        ("1 Mary moved.\n2 Where is Mary?\tbathroom\n", "line 2: a question must be"),
        ("1 Mary moved.\n2 Where is Mary?\tbathroom\t7\n", "line 2: supporting ids"),
        ("1 Mary moved.\n2 Where is Mary?\tbathroom\tone\n", "line 2: supporting ids"),
        ("1 Mary moved.\n2 Where is Mary? bathroom 1\n", "line 2: a question must be .*tab-separated"),
        ("1 Mary moved.\n" + "9" * 5000 + " John went.\n", "line 2: expected '<number> <sentence>'"),
    ],
    ids=["gap", "no-number", "no-ids", "unknown-id", "word-id", "no-tabs", "huge-number"],
)
def test_malformed_lines_name_file_and_line(text, what):
    with pytest.raises(DataError, match=f"qa9_x_train.txt, {what}"):
        babi.parse(text, "qa9_x_train.txt", task=9)


def test_load_from_archive_and_directory(tmp_path):
    archive = write_archive(tmp_path / "tasks_1-20_v1-2.tar.gz")
    from_archive = babi.load_babi([1, 19], "en-10k", str(archive))
    assert len(from_archive["train"]) == 10 * 4 and len(from_archive["test"]) == 4
    assert {q.task for q in from_archive["train"]} == {1, 19}
    with tarfile.open(archive) as tf:
        tf.extractall(tmp_path / "x", filter="data")
    for source in (
        tmp_path / "x",
        tmp_path / "x" / "tasks_1-20_v1-2",
        tmp_path / "x" / "tasks_1-20_v1-2" / "en-10k",
    ):
        assert babi.load_babi([1, 19], "en-10k", str(source)) == from_archive
    with pytest.raises(DataError, match="no en file for bAbI task 1"):
        babi.load_babi([1], "en", str(archive))
    with pytest.raises(DataError, match="no en-10k file for bAbI task 3"):
        babi.load_babi([3], "en-10k", str(archive))


def test_validation_split_is_seeded_and_per_task(tmp_path):
    qs = babi.load_babi([1, 19], "en-10k", str(write_archive(tmp_path / "a.tar.gz")))["train"]
    train, valid = babi.validation_split(qs, 0.1, seed=3)
    assert len(valid) == 3 + 1 and len(train) + len(valid) == len(qs)  # 10% of 30 and of 10
    assert sorted(q.task for q in valid) == [1, 1, 1, 19]
    assert babi.validation_split(qs, 0.1, seed=3) == (train, valid)
    words, answers = babi.vocabulary(qs)
    assert "mary" in words and answers == ["bathroom", "e,n", "hallway", "office"]


@pytest.fixture
def archive(tmp_path):
    return str(write_archive(tmp_path / "tasks_1-20_v1-2.tar.gz"))


def test_task_bow_batches(archive):
    task = tasks.make("babi", tasks=[1, 19], data_dir=archive, max_facts=3)
    v = len(task.words)
    assert task.input_size == 2 * v + 2 and task.output_size == 4
    assert {s: task.split_size(s) for s in task.splits} == {"train": 36, "valid": 4, "test": 4}
    x, y, m = task.sample(8, 0)
    assert torch.equal(x, task.sample(8, 0)[0])
    assert (m.sum(1) == 1).all() and (y.sum(-1) == m).all()
    q = task.questions["test"][1]  # Daniel: 4 facts, max_facts keeps the last 3
    x, y, m = task._pad([task._example(q)])
    assert x.shape[1] == 3 + 1 + 1 and m[0].tolist() == [0, 0, 0, 0, 1]
    assert x[0, 3, -2] == 1 and x[0, 4, -1] == 1 and x[0, :3, -2:].sum() == 0
    k = task.words.index("daniel")  # first word of a 6-word fact: u = 1 - 1/6, v = 1 - 2/6
    assert x[0, 1, k] == pytest.approx(5 / 6) and x[0, 1, v + k] == pytest.approx(2 / 3)
    assert task.answers[int(y[0, -1].argmax())] == "hallway"
    assert "where is daniel" in task.render(x, y, m)


def test_task_words_encoding(archive):
    task = tasks.make("babi", tasks=[1], data_dir=archive, encoding="words", answer_steps=0)
    q = task.questions["test"][0]
    x, y, m = task._pad([task._example(q)])
    assert x.shape[1] == 5 + 5 + 3 and m[0, -1] == 1 and x[0, -3:, -2].sum() == 3
    assert x[0, 4, -3] == 1 and x[0, 3, -3] == 0  # end-of-sentence on the fact's last word


def test_bad_parameters(archive):
    with pytest.raises(ConfigError, match="tasks must be"):
        tasks.make("babi", tasks=[21], data_dir=archive)
    with pytest.raises(ConfigError, match="fact_encoder must be one of bow, gru, bigru, words, got 'glove'"):
        tasks.make("babi", tasks=[1], data_dir=archive, encoding="glove")
    with pytest.raises(ConfigError, match="fact_encoder must be one of bow, gru, bigru, words"):
        tasks.make("babi", tasks=[1], data_dir=archive, fact_encoder="lstm")
    with pytest.raises(ConfigError, match="disagree"):
        tasks.make("babi", tasks=[1], data_dir=archive, fact_encoder="gru", encoding="bow")
    for key in ("word_size", "fact_size"):
        with pytest.raises(ConfigError, match=key):
            tasks.make("babi", tasks=[1], data_dir=archive, fact_encoder="gru", **{key: 0})


@pytest.mark.parametrize("model", ["lstm", "ntm", "dnc"])
def test_models_train_and_report_per_task(archive, model):
    task = tasks.make("babi", tasks=[1, 19], data_dir=archive)
    kwargs = (
        {"hidden_size": 8}
        if model == "lstm"
        else {"controller_size": 8, "memory_slots": 4, "memory_width": 4}
    )
    net = build_model(model, task.input_size, task.output_size, **kwargs)
    x, y, m = task.sample(4, 1, split="valid")
    logits, _ = net(x)
    loss = task.loss(logits, y, m)
    loss.backward()
    metrics = task.metrics(logits.detach(), y, m)
    assert set(metrics) == {"ce", "error", "seq_error"} and metrics["ce"] == pytest.approx(loss.item())
    result = evaluate_split(net, task, "test", batch_size=3)
    assert result["examples"] == 4 and set(result["per_group"]) == {
        "qa1 single-supporting-fact",
        "qa19 path-finding",
    }
    assert result["per_group"]["qa1 single-supporting-fact"]["examples"] == 3
    assert "mean over groups" in format_results(result)


def test_cli_train_with_data_dir_then_per_task_eval(archive, tmp_path, capsys):
    from mannlab.cli import main

    run = tmp_path / "run"
    status = main(
        [
            "train",
            "--model",
            "lstm",
            "--task",
            "babi",
            "--data-dir",
            archive,
            "--run-dir",
            str(run),
            "--steps",
            "3",
            "--no-progress",
            "--set",
            "model.hidden_size=8",
            "--set",
            "task.tasks=[1, 19]",
            "--set",
            "train.val_every=3",
            "--set",
            "train.val_batch_size=4",
            "--set",
            "train.val_batches=1",
        ]
    )
    assert status == 0
    rows = [line for line in (run / "metrics.jsonl").read_text().splitlines() if '"val"' in line]
    assert len(rows) == 1 and '"error"' in rows[0] and '"multiple": 1' in rows[0]
    capsys.readouterr()
    assert main(["eval", str(run), "--split", "test"]) == 0
    result = json.loads((run / "eval-test.json").read_text())
    assert result["examples"] == 4 and set(result["per_group"]) == {
        "qa1 single-supporting-fact",
        "qa19 path-finding",
    }
    out = capsys.readouterr().out
    assert "qa19 path-finding" in out and (run / "eval-test.json").is_file()
    assert "length" not in out  # a data set has no lengths: no length rows


def test_non_utf8_file_names_file_and_line(tmp_path):
    archive = write_archive(
        tmp_path / "a.tar.gz", tasks_text={1: ("single-supporting-fact", QA1 + "1 Caf\xe9\n")}
    )
    with tarfile.open(archive) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf]
    with tarfile.open(archive, "w:gz") as tf:
        for member, data in members:
            data = data.replace("\xe9".encode(), b"\xe9")  # Latin-1, not UTF-8
            member.size = len(data)
            tf.addfile(member, io.BytesIO(data))
    with pytest.raises(DataError, match=r"qa1_single-supporting-fact_test.txt, line 9: expected UTF-8 text"):
        babi.load_babi([1], "en-10k", str(archive), splits=["test"])


def test_symlinks_out_of_the_data_directory_are_refused(tmp_path):
    archive = write_archive(tmp_path / "a.tar.gz")
    with tarfile.open(archive) as tf:
        tf.extractall(tmp_path / "x", filter="data")
    en = tmp_path / "x" / "tasks_1-20_v1-2" / "en-10k"
    outside = tmp_path / "secret.txt"
    outside.write_text(QA1)
    test_file = en / "qa1_single-supporting-fact_test.txt"
    test_file.unlink()
    test_file.symlink_to(outside)
    with pytest.raises(
        DataError, match="qa1_single-supporting-fact_test.txt resolves to .*outside the data directory"
    ):
        babi.load_babi([1], "en-10k", str(tmp_path / "x"))
    test_file.unlink()
    test_file.symlink_to(en / "qa1_single-supporting-fact_train.txt")  # inside: fine
    assert len(babi.load_babi([1], "en-10k", str(tmp_path / "x"))["test"]) == 10 * 3
    # the data directory itself may be a symlink, at any level the loader accepts
    (tmp_path / "linked").symlink_to(tmp_path / "x")
    (tmp_path / "alias").mkdir()
    (tmp_path / "alias" / "en-10k").symlink_to(en)
    for source in ("linked", "alias/en-10k"):
        assert len(babi.load_babi([1], "en-10k", str(tmp_path / source))["test"]) == 10 * 3
