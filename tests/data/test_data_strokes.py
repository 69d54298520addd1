"""Pen strokes: the official text files and the numpy encoding (leading and trailing padding)
decode to the same sequences; malformed files name file and line; the multi-digit task's
layout and the fed-back decoding (fixtures generated here; never the network or a real data set)."""

import io
import tarfile

import numpy as np
import pytest
import torch

from mannlab import tasks
from mannlab.data import download, strokes
from mannlab.errors import DataError
from mannlab.models import build_model
from mannlab.tasks.strokes import decode_feedback, evaluate_feedback


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


def make_digits(n, seed=0):
    """n random digits: (absolute start, then offsets) rows with eos/eod, and labels."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n):
        t = int(rng.integers(3, 9))
        rows = np.zeros((t, 4), np.int64)
        rows[:, :2] = rng.integers(-1, 2, size=(t, 2))
        rows[0, :2] = rng.integers(3, 25, size=2)  # absolute start, as published
        rows[t // 2, 2] = 1
        rows[-1, 2:] = 1
        seqs.append(rows)
    return seqs, rng.integers(0, 10, size=n)


def add(tf, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def npy_bytes(array):
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def write_numpy(folder, split, seqs, labels, width=12):
    folder.mkdir(parents=True, exist_ok=True)
    lead = np.zeros((len(seqs), width, 4))
    trail = np.zeros((len(seqs), width, 4))
    for i, s in enumerate(seqs):
        lead[i, width - len(s) :] = s
        trail[i, : len(s)] = s
    for stem, array in (
        (f"{split}-padded-leading", lead),
        (f"{split}-padded-trailing", trail),
        (f"{split}-labels", labels.astype(np.int32)),
    ):
        with tarfile.open(folder / f"{stem}.tar.gz", "w:gz") as tf:
            add(tf, f"{stem}.npy", npy_bytes(array))
    return lead, trail


def write_text(path, split, seqs, labels):
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "a:" if path.exists() else "w:") as tf:
        for i, (s, label) in enumerate(zip(seqs, labels)):
            add(
                tf,
                f"sequences/{split}img-{i}-inputdata.txt",
                "".join(" ".join(map(str, r)) + "\n" for r in s).encode(),
            )
            onehot = np.eye(10, dtype=int)[label]
            target = "".join(" ".join(map(str, list(onehot) + list(r))) + "\n" for r in s[1:])
            add(tf, f"sequences/{split}img-{i}-targetdata.txt", target.encode())


@pytest.fixture
def data(tmp_path):
    out = {}
    for split, n, seed in (("train", 40, 0), ("test", 12, 1)):
        seqs, labels = make_digits(n, seed)
        write_numpy(tmp_path / "numpy" / "strokes", split, seqs, labels)
        write_text(tmp_path / "text" / "sequences.tar", split, seqs, labels)
        out[split] = seqs, labels
    return tmp_path, out


def test_both_formats_decode_to_the_same_sequences(data):
    root, generated = data
    for split, (seqs, labels) in generated.items():
        from_numpy = strokes.load_numpy(split, str(root / "numpy"))
        from_text = strokes.load_text(split, str(root / "text" / "sequences.tar"))
        assert len(from_numpy) == len(seqs)
        for a, b in ((from_numpy, from_text),):
            assert np.array_equal(a.points, b.points) and np.array_equal(a.offsets, b.offsets)
            assert np.array_equal(a.labels, b.labels) and np.array_equal(a.labels, labels)
        first = from_numpy[0]
        assert first[0, :2].tolist() == [0, 0] and np.array_equal(first[1:], seqs[0][1:])
        with tarfile.open(root / "numpy" / "strokes" / f"{split}-padded-trailing.tar.gz") as tf:
            trail = np.load(io.BytesIO(tf.extractfile(f"{split}-padded-trailing.npy").read()))
        decoded = strokes.from_sequences(strokes.decode_padded(trail, leading=False), labels)
        assert np.array_equal(decoded.points, from_numpy.points)
    # load_strokes finds whichever encoding the data directory holds
    assert np.array_equal(
        strokes.load_strokes("test", str(root / "text" / "sequences.tar")).points,
        strokes.load_strokes("test", str(root / "numpy")).points,
    )


def test_malformed_text_names_file_and_line():
    files = {
        "sequences/trainimg-0-inputdata.txt": b"3 4 0 0\n1 x 0 0\n",
        "sequences/trainimg-0-targetdata.txt": b"0 1 0 0 0 0 0 0 0 0 1 0 0 0\n",
    }
    with pytest.raises(
        DataError, match=r"src/sequences/trainimg-0-inputdata.txt, line 2: expected 4 integers"
    ):
        strokes.decode_text_files(files, "train", "src")
    files["sequences/trainimg-0-inputdata.txt"] = b"3 4 0 0\n1 0 0 1\n"
    del files["sequences/trainimg-0-targetdata.txt"]
    with pytest.raises(DataError, match="no trainimg-0-targetdata.txt"):
        strokes.decode_text_files(files, "train", "src")


def test_offline_without_data(tmp_path):
    with pytest.raises(download.MissingData, match="(?s)--download.*train-labels.tar.gz.*sequences.tar.gz"):
        strokes.load_strokes("train", str(tmp_path))
    with pytest.raises(DataError, match="no pen-stroke data for train.*offline"):
        strokes.load_strokes("train", str(tmp_path), download=True)


def test_task_layout(data):
    root, generated = data
    task = tasks.make(
        "strokes", digits=3, data_dir=str(root / "numpy"), valid_size=8, train_sequences=50, eval_sequences=6
    )
    assert {s: task.split_size(s) for s in task.splits} == {"train": 50, "valid": 6, "test": 6}
    chosen = task.digit_indices("test", 2)
    assert np.array_equal(chosen, task.digit_indices("test", 2))
    x, y, m = task._pad(task.encode("test", np.array([2]), None))
    seqs, labels = generated["test"]
    n = sum(len(seqs[i]) for i in chosen)
    assert x.shape[1] == n + 3 and m[0].tolist() == [0] * n + [1, 1, 1]
    assert x[0, n, 4] == 1 and x[0, :n, 4:].sum() == 0 and x[0, n:, :4].sum() == 0
    assert x[0, n + 1, 5 + labels[chosen[0]]] == 1 and x[0, n + 2, 5 + labels[chosen[1]]] == 1
    assert y[0, n:].argmax(-1).tolist() == labels[chosen].tolist()
    assert x[0, 0, :2].tolist() == [0, 0]  # start position set to (0, 0)
    xb, yb, mb = task.sample(4, 0)
    assert xb.shape[0] == 4 and (mb.sum(1) == 3).all()


def test_feedback_decoding_matches_a_full_run_on_its_own_predictions(data):
    root, _ = data
    task = tasks.make("strokes", digits=3, data_dir=str(root / "numpy"), valid_size=8, eval_sequences=4)
    torch.manual_seed(0)
    model = build_model("lstm", task.input_size, task.output_size, hidden_size=8)
    x, y, m = task._pad(task.encode("test", np.array([0]), None))
    predicted = decode_feedback(model, task, x, m)
    n = int(m[0].nonzero()[0])
    fed = x.clone()
    fed[0, n + 1 :, 5:] = 0
    fed[0, n + 1 + torch.arange(2), 5 + predicted[0, :2]] = 1
    assert torch.equal(model(fed)[0][0, n:].argmax(-1), predicted[0])
    result = evaluate_feedback(model, task, "test")
    assert result["sequences"] == 4 and 0 <= result["digit_error"] <= 1
    # batches of sequences with equal stroke rows give what one sequence at a time gives
    single = tasks.make(
        "strokes", digits=1, data_dir=str(root / "numpy"), valid_size=8, eval_sequences=12
    )  # 12 digits of 3-8 rows: some lengths repeat
    rows = [len(single._example("test", single.digit_indices("test", i))[0]) for i in range(12)]
    assert len(set(rows)) < 12
    model = build_model("lstm", single.input_size, single.output_size, hidden_size=8)
    batched = evaluate_feedback(model, single, "test")
    assert evaluate_feedback(model, single, "test", batch_size=1) == batched
    assert batched["sequences"] == 12


def npy_header(shape, descr="<f8"):
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


@pytest.mark.parametrize(
    "data, what",
    [
        (
            npy_header((1 << 40, 117, 4)),
            r"shape \(1099511627776, 117, 4\) of float64 does not fit the file's 0",
        ),
        (npy_header((3, 12, 4))[:-5], "not a valid .npy file"),
        (npy_bytes(np.array(["a", "b"])), "expected an integer or float array, got dtype <U1"),
        (npy_header((2,), "|O") + b"\x80\x04N.", "expected an integer or float array, got dtype object"),
        (b"\x93NUMPY\x03\x00" + bytes(8), "not a valid .npy file"),
    ],
    ids=["absurd-shape", "truncated-header", "strings", "objects", "version-3"],
)
def test_malformed_npy_is_a_data_error(tmp_path, data, what):
    path = tmp_path / "train-padded-leading.npy"
    path.write_bytes(data)
    with pytest.raises(DataError, match=f"train-padded-leading.npy: {what}"):
        strokes._load_npy(path, "train-padded-leading")


def test_numpy_labels_must_be_digits(data):
    root, generated = data
    seqs, labels = generated["test"]
    write_numpy(root / "bad" / "strokes", "test", seqs, np.where(np.arange(len(labels)) == 4, 12, labels))
    with pytest.raises(DataError, match="test-labels.npy: labels must be digits 0-9, label 4 is 12"):
        strokes.load_numpy("test", str(root / "bad"))


@pytest.mark.parametrize(
    "inputs, targets, what",
    [
        (b"3 4 0 0\n1 inf 0 0\n", None, "inputdata.txt, line 2: expected 4 integers"),
        (b"3 4 0 0\n1 1e999 0 0\n", None, "inputdata.txt, line 2: expected 4 integers"),
        (b"3 4 0 0\n1 300 0 1\n", None, "inputdata.txt, line 2: stroke values must be small integers"),
        (b"3 4 0 0\n1 0 0 1\xff\n", None, "inputdata.txt, line 2: expected ASCII text"),
        (b"3 4 0 0\n1 0 0 1\n", b"0 1 0 0 0 0 0 0 0 0 1 0 0 0\n0 1 0 0 0 0 0 0 0 0 1 0 0 0 5\n", None),
    ],
    ids=["inf", "overflow", "large", "non-ascii", "ragged-targets"],
)
def test_text_values(inputs, targets, what):
    files = {
        "s/trainimg-0-inputdata.txt": inputs,
        "s/trainimg-0-targetdata.txt": targets or b"0 1 0 0 0 0 0 0 0 0 1 0 0 0\n",
    }
    if what is None:
        assert strokes.decode_text_files(files, "train", "src").labels.tolist() == [1]
    else:
        with pytest.raises(DataError, match=f"src/s/trainimg-0-{what}"):
            strokes.decode_text_files(files, "train", "src")
