"""MNIST: IDX parsing (.gz), malformed files, the seeded fixed permutation, the task's
batches (tiny IDX files generated here; never the network or a real data set)."""

import gzip
import struct

import numpy as np
import pytest
import torch

from data_files import idx_bytes, write_mnist
from mannlab import tasks
from mannlab.data import download, mnist
from mannlab.errors import DataError


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


def test_parse_idx_round_trip_and_errors():
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 5
    assert np.array_equal(mnist.parse_idx(idx_bytes(a)), a)
    good = idx_bytes(np.zeros((2, 2), np.uint8))
    with pytest.raises(DataError, match="f.idx: not an IDX file"):
        mnist.parse_idx(b"\x01" + good[1:], "f.idx")
    with pytest.raises(DataError, match=r"f.idx: IDX shape \(2, 2\) needs 16 bytes, the file has 15"):
        mnist.parse_idx(good[:-1], "f.idx")


def test_load_gz_and_corrupt_file(tmp_path):
    data = write_mnist(tmp_path)
    images, labels = mnist.load_mnist("train", str(tmp_path))
    assert np.array_equal(images, data["train"][0]) and labels.dtype == np.int64 and labels[3] == 3
    (tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8bjunk")
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz: cannot decompress"):
        mnist.load_mnist("test", str(tmp_path))


def test_missing_files_offline_error(tmp_path):
    with pytest.raises(download.MissingData, match="(?s)--download.*t10k-labels-idx1-ubyte.gz"):
        mnist.load_mnist("train", str(tmp_path))  # nothing downloaded unless asked; all four files named
    assert not (tmp_path / "mnist").exists()
    with pytest.raises(DataError, match="could not download .*train-images-idx3-ubyte.gz.*offline"):
        mnist.load_mnist("train", str(tmp_path), download=True)
    assert not any((tmp_path / "mnist").iterdir())


def test_permutation_fixed_by_seed():
    p = mnist.permutation(784, 5)
    assert np.array_equal(p, mnist.permutation(784, 5)) and sorted(p) == list(range(784))
    assert not np.array_equal(p, mnist.permutation(784, 6))


def test_sequential_and_permuted_tasks(tmp_path):
    data = write_mnist(tmp_path)
    seq = tasks.make("mnist", data_dir=str(tmp_path), valid_size=5)
    assert {s: seq.split_size(s) for s in seq.splits} == {"train": 25, "valid": 5, "test": 10}
    x, y, m = seq.sample(3, 0, split="test")
    assert x.shape == (3, 784, 1) and y.shape == (3, 784, 10) and m[:, -1].tolist() == [1, 1, 1]
    assert m[:, :-1].sum() == 0
    _, (x, y, m) = next(seq.ordered_batches("test", 3))
    assert torch.allclose(x[1, :, 0], torch.from_numpy(data["test"][0][1].reshape(-1) / 255.0).float())
    assert int(y[1, -1].argmax()) == 1
    perm = tasks.make("mnist", data_dir=str(tmp_path), valid_size=5, permuted=True, permutation_seed=7)
    _, (xp, _, _) = next(perm.ordered_batches("test", 3))
    order = mnist.permutation(784, 7)
    assert torch.equal(xp[:, :, 0], x[:, order, 0])
    rows = tasks.make("mnist", data_dir=str(tmp_path), valid_size=5, pixels_per_step=28)
    assert rows.sample(2, 0)[0].shape == (2, 28, 28)
    assert "label" in perm.render(xp, y, m)


def idx_header(code, shape):
    return bytes([0, 0, code, len(shape)]) + b"".join(struct.pack(">I", n) for n in shape)


def test_dimensions_whose_product_overflows_int64_are_refused():
    # 2^16 * 2^16 * 2^32 wraps to 0 in int64: the header alone looked complete
    with pytest.raises(DataError, match=r"IDX shape \(65536, 65536, 4294967295\) needs"):
        mnist.parse_idx(idx_header(0x08, (65536, 65536, 4294967295)), "f.idx")
    with pytest.raises(DataError, match="needs"):
        mnist.parse_idx(idx_header(0x08, (65536, 65536, 65536, 65536)), "f.idx")


def test_more_dimensions_than_numpy_holds_names_the_file():
    data = idx_header(0x08, (1,) * 255) + b"\x07"
    with pytest.raises(DataError, match="f.idx: its IDX header says 255 dimensions"):
        mnist.parse_idx(data, "f.idx")


@pytest.mark.parametrize(
    "labels, what",
    [
        (idx_header(0x09, (30,)) + np.full(30, -3, np.int8).tobytes(), "label 0 is -3"),
        (idx_header(0x08, (30,)) + bytes([1] * 29 + [200]), "label 29 is 200"),
        (idx_header(0x0D, (30,)) + np.ones(30, ">f4").tobytes(), "expected \\(N,\\) integer labels"),
    ],
    ids=["negative-int8", "200", "float"],
)
def test_labels_must_be_digits(tmp_path, labels, what):
    write_mnist(tmp_path)
    (tmp_path / "mnist" / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels))
    with pytest.raises(DataError, match=f"train-labels-idx1-ubyte.gz: .*{what}"):
        mnist.load_mnist("train", str(tmp_path))
    with pytest.raises(DataError, match=what):  # no IndexError from the task's one-hot targets
        tasks.make("mnist", data_dir=str(tmp_path), valid_size=5)


def test_images_must_be_28_by_28_bytes(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(np.zeros((30, 5, 5), np.uint8)))
    )
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: expected \(N, 28, 28\) unsigned bytes"):
        mnist.load_mnist("train", str(tmp_path))
