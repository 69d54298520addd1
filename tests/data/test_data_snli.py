"""SNLI: the 1.0 jsonl format in its zip (generated here), '-' labels dropped, malformed
lines named by file and line, the task's layout (no network, no real data set)."""

import json
import zipfile

import pytest

from mannlab import tasks
from mannlab.data import download, snli
from mannlab.errors import DataError

ROWS = [
    ("entailment", "A man plays a guitar.", "A man plays music."),
    ("contradiction", "A dog runs on the beach.", "A cat sleeps."),
    ("-", "Two kids read.", "Kids are reading."),
    ("neutral", "A woman walks.", "A woman walks to work."),
]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


def jsonl(rows):
    return "".join(
        json.dumps(
            {
                "gold_label": g,
                "sentence1": p,
                "sentence2": h,
                "pairID": str(i),
                "sentence1_parse": "(ROOT)",
                "annotator_labels": [g],
            }
        )
        + "\n"
        for i, (g, p, h) in enumerate(rows)
    )


@pytest.fixture
def archive(tmp_path):
    path = tmp_path / "snli" / "snli_1.0.zip"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zf:
        for name in ("train", "dev", "test"):
            zf.writestr(f"snli_1.0/snli_1.0_{name}.jsonl", jsonl(ROWS))
    return tmp_path


def test_load_and_drop_unlabelled(archive):
    pairs = snli.load_snli(data_dir=str(archive))
    assert [len(v) for v in pairs.values()] == [3, 3, 3]
    first = pairs["train"][0]
    assert first.premise == ("a", "man", "plays", "a", "guitar", ".") and first.label == 0
    assert [p.label for p in pairs["valid"]] == [0, 2, 1]


def test_malformed_line_named():
    with pytest.raises(DataError, match="dev.jsonl, line 2: expected a JSON object"):
        snli.parse_jsonl(jsonl(ROWS[:1]) + "{not json\n", "dev.jsonl")
    with pytest.raises(DataError, match="dev.jsonl, line 1: gold_label must be"):
        snli.parse_jsonl(jsonl([("maybe", "a", "b")]), "dev.jsonl")


def test_missing_copy_is_an_offline_error(tmp_path):
    with pytest.raises(download.MissingData, match="(?s)--download.*snli/snli_1.0.zip"):
        snli.load_snli(data_dir=str(tmp_path))
    with pytest.raises(DataError, match="could not download .*snli_1.0.zip"):
        snli.load_snli(data_dir=str(tmp_path), download=True)


def test_task_layout(archive):
    task = tasks.make("snli", data_dir=str(archive), vocab_size=5)
    assert task.input_size == 5 + 2 and task.output_size == 3
    x, y, m = task._pad([task._example(task.pairs["test"][1])])  # 7 + 1 + 4 steps
    assert x.shape[1] == 12 and x[0, 7, -1] == 1 and m[0].tolist() == [0] * 11 + [1]
    assert int(y[0, -1].argmax()) == 2 and (x[0].sum(-1) == 1).all()
    assert x[0, 2, -2] == 1  # "runs" is not among the 5 most frequent words: <unk>
    assert task.sample(2, 0, split="valid")[0].shape[0] == 2


@pytest.mark.parametrize(
    "line, what",
    [
        ("[" * 100_000 + "]" * 100_000, "RecursionError"),
        ('{"gold_label": "neutral", "sentence1": 1' + "0" * 5000 + ', "sentence2": "b"}', "ValueError"),
        ('["entailment", "a", "b"]', "TypeError"),
        (
            '{"gold_label": "neutral", "sentence1": null, "sentence2": "b"}',
            "must be strings, got NoneType and str",
        ),
    ],
    ids=["deep", "huge-int", "list", "null"],
)
def test_malformed_json_is_a_data_error(line, what):
    with pytest.raises(DataError, match=f"dev.jsonl, line 2: .*{what}"):
        snli.parse_jsonl(jsonl(ROWS[:1]) + line + "\n", "dev.jsonl")


def test_non_utf8_file_named(tmp_path):
    (tmp_path / "snli_1.0").mkdir()
    (tmp_path / "snli_1.0" / "snli_1.0_test.jsonl").write_bytes(jsonl(ROWS).encode() + b'{"x": "\xff"}\n')
    with pytest.raises(DataError, match=r"snli_1.0_test.jsonl, line 5: expected UTF-8 text"):
        snli.load_snli(["test"], data_dir=str(tmp_path))
