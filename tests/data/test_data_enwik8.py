"""enwik8: the zip with one member (generated here, tiny split), the split sizes, the task's
next-byte windows (no network, no real data set)."""

import zipfile

import pytest

from mannlab import tasks
from mannlab.data import download, enwik8
from mannlab.errors import DataError

TEXT = bytes(range(32, 127)) * 2  # 190 bytes


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


def test_zip_and_plain_file_split(tmp_path):
    (tmp_path / "enwik8").mkdir()
    with zipfile.ZipFile(tmp_path / "enwik8" / "enwik8.zip", "w") as zf:
        zf.writestr("enwik8", TEXT)
    parts = enwik8.load_enwik8(str(tmp_path), sizes=(150, 20, 20))
    assert parts["train"] == TEXT[:150] and parts["valid"] == TEXT[150:170] and parts["test"] == TEXT[170:]
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "enwik8").write_bytes(TEXT)
    assert enwik8.load_enwik8(str(tmp_path / "plain"), sizes=(150, 20, 20)) == parts
    with pytest.raises(DataError, match="190 bytes, the split needs 100000000"):
        enwik8.load_enwik8(str(tmp_path / "plain"))
    assert enwik8.SPLIT == (90_000_000, 5_000_000, 5_000_000)


def test_task_windows(tmp_path):
    (tmp_path / "enwik8").write_bytes(TEXT)
    task = tasks.make("enwik8", data_dir=str(tmp_path), length=10, split_sizes=[150, 20, 20])
    assert task.split_size("train") == 14 and task.split_size("test") == 1
    _, (x, y, m) = next(task.ordered_batches("train", 2))
    assert x.shape == (2, 10, 256) and m.sum() == 20
    assert x[1].argmax(-1).tolist() == list(TEXT[10:20]) and y[1].argmax(-1).tolist() == list(TEXT[11:21])
