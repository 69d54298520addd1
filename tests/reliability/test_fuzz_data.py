"""Fuzz corpus of the data parsers: small valid fixtures built here (never real data sets)
are corrupted at random (truncated, bits flipped, bytes overwritten, inserted, deleted or
repeated, deep nesting, long digit runs, bad UTF-8) either inside their container (the text,
IDX or .npy bytes, then packed properly) or as the file on disk (the .gz, .tar, .zip).
Every case must load to a sane result or raise DataError: no other exception, no hang,
no file written outside its own directory.

At CI size each target runs MANNLAB_FUZZ_EXAMPLES cases (default 100), derandomized so CI is
reproducible; setting the variable also draws new cases on every run:

    MANNLAB_FUZZ_EXAMPLES=5000 pytest tests/reliability/test_fuzz_data.py -s     # prints the counts
"""

import collections
import gzip
import io
import json
import os
import struct
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import corrupt, files_under, fuzz_settings, no_hang
from mannlab.data import babi, enwik8, mnist, snli, strokes
from mannlab.errors import DataError
from mannlab.tasks import charlm

FUZZ = fuzz_settings(100)
COUNTS = collections.defaultdict(collections.Counter)  # target -> cases, valid, data_errors, other

# ------------------------------------------------------------------ running a case


def refuse(url, path):
    raise ConnectionError(f"the fuzz corpus is offline ({url})")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The directory holding every case's directory; the counts are printed at the end."""
    root = tmp_path_factory.mktemp("fuzz")
    cache = Path.home() / ".cache" / "mannlab"  # where loaders would go without a data_dir
    cwd, cache_before = set(Path.cwd().iterdir()), cache.exists() and files_under(cache)
    yield root
    assert files_under(root) == set(), "a case left files behind"
    assert set(Path.cwd().iterdir()) == cwd and (cache.exists() and files_under(cache)) == cache_before
    total = collections.Counter()
    for target, counts in sorted(COUNTS.items()):
        total.update(counts)
        print(f"\nfuzz {target:<15} {dict(counts)}", end="")
    print(f"\nfuzz {'total':<15} {dict(total)}")
    if os.environ.get("MANNLAB_FUZZ_REPORT"):
        Path(os.environ["MANNLAB_FUZZ_REPORT"]).write_text(json.dumps({**COUNTS, "total": total}, indent=1))


def run_case(target, base, write, load, check=lambda result: None):
    """``write(dir)`` lays out the case's files, ``load(dir)`` parses them: a sane result
    (``check``) or DataError, nothing else, and no file added anywhere."""
    counts = COUNTS[target]
    counts["cases"] += 1
    with tempfile.TemporaryDirectory(dir=base) as folder:
        folder = Path(folder)
        write(folder)
        written = files_under(folder)
        try:
            with no_hang():
                result = load(folder)
            check(result)
            counts["valid"] += 1
        except DataError:
            counts["data_errors"] += 1
        except BaseException:
            counts["other"] += 1
            raise
        assert files_under(folder) == written, "the loader wrote files"
        assert files_under(base) == {folder.relative_to(base) / f for f in written}


def gz(data):
    return gzip.compress(data, mtime=0)


def tar_bytes(members: dict, mode="w:gz") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


def zip_bytes(members: dict) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def write_files(files: dict):
    def write(folder):
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)

    return write


@st.composite
def layout(draw, members: dict, pack, name: str, directory: str | None = None):
    """{path: bytes} of one case: one member corrupted and packed with ``pack`` into
    ``name``, the packed file corrupted, or (``directory``) the members unpacked there."""
    members = dict(members)
    where = draw(st.sampled_from(["inner", "outer"] + (["directory"] if directory else [])))
    if where != "outer":
        victim = draw(st.sampled_from(sorted(members)))
        members[victim] = draw(corrupt(members[victim]))
    if where == "directory":
        return {f"{directory}/{k}": v for k, v in members.items()}
    packed = pack(members)
    return {name: draw(corrupt(packed)) if where == "outer" else packed}


# ------------------------------------------------------------------ MNIST (IDX)


def idx(array, code=0x08):
    return (
        bytes([0, 0, code, array.ndim])
        + b"".join(struct.pack(">I", n) for n in array.shape)
        + array.tobytes()
    )


_rng = np.random.default_rng(0)
MNIST_FILES = {
    "train-images-idx3-ubyte.gz": idx(_rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)),
    "train-labels-idx1-ubyte.gz": idx(np.array([3, 0, 9], np.uint8)),
}


@st.composite
def mnist_case(draw):
    victim = draw(st.sampled_from(sorted(MNIST_FILES)))
    files = {f"mnist/{k}": gz(v) for k, v in MNIST_FILES.items()}
    if draw(st.booleans()):
        files[f"mnist/{victim}"] = gz(draw(corrupt(MNIST_FILES[victim])))
    else:
        files[f"mnist/{victim}"] = draw(corrupt(files[f"mnist/{victim}"]))
    return files


def check_mnist(result):
    images, labels = result
    assert images.dtype == np.uint8 and images.shape[1:] == (28, 28) and len(images) == len(labels)
    assert labels.dtype == np.int64 and ((labels >= 0) & (labels <= 9)).all()


@FUZZ
@given(files=mnist_case())
def test_mnist_idx(base, files):
    run_case(
        "mnist-idx",
        base,
        write_files(files),
        lambda d: mnist.load_mnist("train", str(d), fetch=refuse),
        check_mnist,
    )


@FUZZ
@given(data=corrupt(MNIST_FILES["train-images-idx3-ubyte.gz"]))
def test_idx_bytes(base, data):
    def check(array):
        assert array.size * array.dtype.itemsize <= len(data)

    run_case("idx-bytes", base, write_files({}), lambda d: mnist.parse_idx(data, "f.idx"), check)


# ------------------------------------------------------------------ bAbI

QA = {
    "tasks_1-20_v1-2/en/qa1_single-supporting-fact_train.txt": (
        b"1 Mary moved to the bathroom.\n2 John went to the hallway.\n3 Where is Mary? \tbathroom\t1\n"
        b"1 Sandra travelled to the office.\n2 Where is Sandra? \toffice\t1\n"
    ),
    "tasks_1-20_v1-2/en/qa1_single-supporting-fact_test.txt": (
        b"1 Daniel went back to the hallway.\n2 Where is Daniel? \thallway\t1\n"
    ),
}


def check_babi(result):
    for questions in result.values():
        for q in questions:
            assert q.answer and all(0 <= i < len(q.facts) for i in q.supporting)


@FUZZ
@given(files=layout(QA, tar_bytes, "tasks_1-20_v1-2.tar.gz", directory="."))
def test_babi(base, files):
    run_case(
        "babi",
        base,
        write_files(files),
        lambda d: babi.load_babi([1], "en", str(d), fetch=refuse),
        check_babi,
    )


# ------------------------------------------------------------------ pen strokes

STROKE_TEXT = {
    "sequences/trainimg-0-inputdata.txt": b"5 7 0 0\n1 0 0 0\n0 1 1 0\n-1 1 1 1\n",
    "sequences/trainimg-0-targetdata.txt": b"0 0 0 1 0 0 0 0 0 0 1 0 0 0\n0 0 0 1 0 0 0 0 0 0 0 1 1 0\n",
    "sequences/trainimg-1-inputdata.txt": b"9 3 0 0\n0 -1 1 1\n",
    "sequences/trainimg-1-targetdata.txt": b"0 0 0 0 0 0 0 0 1 0 0 -1 1 1\n",
}


def check_strokes(result):
    assert result.points.dtype == np.int8 and result.points.shape[1:] == (4,)
    assert len(result.offsets) == len(result) + 1 and ((result.labels >= 0) & (result.labels <= 9)).all()


@FUZZ
@given(files=layout(STROKE_TEXT, lambda m: tar_bytes(m, "w"), "sequences.tar", directory="."))
def test_strokes_text(base, files):
    def load(folder):  # the .tar is named as data_dir, an unpacked sequences/ found in it
        source = folder / "sequences.tar" if "sequences.tar" in files else folder
        return strokes.load_text("train", str(source), fetch=refuse)

    run_case("strokes-text", base, write_files(files), load, check_strokes)


def npy(array):
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


_lead = np.zeros((2, 5, 4))
_lead[0, 2:] = [[5, 7, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]]
_lead[1, 3:] = [[9, 3, 0, 0], [0, -1, 1, 1]]
STROKE_NPY = {"train-padded-leading": npy(_lead), "train-labels": npy(np.array([3, 8], np.int32))}


@st.composite
def strokes_numpy_case(draw):
    """Both .npy files, in .tar.gz files or bare; one of them corrupted inside or outside."""
    bare = draw(st.booleans())
    files = {
        f"strokes/{stem}.npy" if bare else f"strokes/{stem}.tar.gz": data
        if bare
        else tar_bytes({f"{stem}.npy": data})
        for stem, data in STROKE_NPY.items()
    }
    victim = draw(st.sampled_from(sorted(STROKE_NPY)))
    if bare:
        files[f"strokes/{victim}.npy"] = draw(corrupt(STROKE_NPY[victim]))
    else:
        files[f"strokes/{victim}.tar.gz"] = draw(
            layout({f"{victim}.npy": STROKE_NPY[victim]}, tar_bytes, "x")
        )["x"]
    return files


@FUZZ
@given(files=strokes_numpy_case())
def test_strokes_numpy(base, files):
    run_case(
        "strokes-numpy",
        base,
        write_files(files),
        lambda d: strokes.load_numpy("train", str(d), fetch=refuse),
        check_strokes,
    )


# ------------------------------------------------------------------ SNLI

SNLI = {
    "snli_1.0/snli_1.0_dev.jsonl": "".join(
        json.dumps({"gold_label": g, "sentence1": p, "sentence2": h, "annotator_labels": [g]}) + "\n"
        for g, p, h in [
            ("entailment", "A man plays.", "A man plays music."),
            ("-", "Kids read.", "Kids."),
            ("contradiction", "A dog runs.", "A cat sleeps."),
        ]
    ).encode()
}


def check_snli(result):
    assert all(0 <= p.label < 3 for p in result["valid"])


@FUZZ
@given(files=layout(SNLI, zip_bytes, "snli_1.0.zip", directory="."))
def test_snli(base, files):
    run_case(
        "snli",
        base,
        write_files(files),
        lambda d: snli.load_snli(["valid"], str(d), fetch=refuse),
        check_snli,
    )


# ------------------------------------------------------------------ enwik8 and PTB text

ENWIK8 = {"enwik8": bytes(range(32, 127)) * 2}


@FUZZ
@given(files=layout(ENWIK8, zip_bytes, "enwik8.zip", directory="."))
def test_enwik8(base, files):
    def check(parts):
        assert [len(parts[s]) for s in ("train", "valid", "test")] == [150, 20, 20]

    run_case(
        "enwik8",
        base,
        write_files(files),
        lambda d: enwik8.load_enwik8(str(d), sizes=(150, 20, 20), fetch=refuse),
        check,
    )


PTB = {f"ptb.{split}.txt": b" the cat sat \n on the <unk> mat N \n" for split in ("train", "valid", "test")}


def load_ptb(folder):
    return charlm.load_corpus("ptb-char", str(folder), fetch=refuse)


@FUZZ
@given(files=layout(PTB, tar_bytes, "ptb.tar.gz", directory="ptb"))
def test_ptb(base, files):
    run_case("ptb", base, write_files(files), load_ptb)


def test_ptb_non_utf8_is_a_data_error(tmp_path):
    write_files({**PTB, "ptb.valid.txt": b" caf\xe9 \n"})(tmp_path)
    with pytest.raises(DataError, match=r"ptb.valid.txt, line 1: expected UTF-8 text"):
        charlm.load_corpus("ptb-char", str(tmp_path), fetch=refuse)
