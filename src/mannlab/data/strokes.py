"""MNIST pen-stroke sequences (de Jong 2016): both published encodings, one decoded form.

Each digit is a sequence of rows ``dx dy eos eod``: pen offsets, end of stroke, end of digit
(set on the last row only). Two encodings are published:

- official text files (``sequences.tar.gz`` or its unpacked directory), one per digit:
  ``trainimg-<i>-inputdata.txt`` (``testimg-...`` for the test split) whose first row holds
  the absolute start ``x y`` instead of offsets, and ``trainimg-<i>-targetdata.txt`` whose
  first 10 columns are the one-hot class;
- numpy (``numpy-encoded/<split>-padded-leading.tar.gz`` holding a .npy (N, 117, 4) float64
  array with zero rows before each digit, ``<split>-padded-trailing`` with zero rows after,
  and ``<split>-labels.tar.gz`` with the (N,) classes).

Both decode to a ``StrokeSet``: the rows of every digit as int8 with the start position set
to (0, 0) (TARDIS 8.2), concatenated, with offsets and labels. In the leading-padded
encoding a digit starts at its first non-zero row (a digit starting exactly at (0, 0) with
eos = eod = 0 cannot be told from padding; MNIST's skeletons never start in the corner).

    digits = load_strokes("train", data_dir)           # numpy encoding if present, else text files
    digits = load_strokes("test", download=True)       # downloads the numpy encoding if missing
"""

from __future__ import annotations

import io
import math
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mannlab.data.download import (
    DOWNLOAD_HINT,
    ENV_VAR,
    MissingData,
    RemoteFile,
    data_root,
    decode_text,
    locate,
    read_file,
    read_members,
)
from mannlab.errors import DataError

REPO = "https://github.com/edwin-de-jong/mnist-digits-stroke-sequence-data/raw/master/"
# No checksums are published for these files: SHA-256s and sizes of verified copies.
_NUMPY_PINS = {
    ("train", "padded-leading"): (
        "7ad3a368e3608d9adf3e7bd6105ff609f760c5d8a60a6cc74bcf79d84db28250",
        3_511_689,
    ),
    ("train", "labels"): ("7f9d2c4c69dcb98ce0cdbc9b7255e8e660ad005ef3fe286efae8315c593e3b61", 34_372),
    ("test", "padded-leading"): ("0beaf9be441f4efa5497f0accd0c0423eaad9f6ad353f991a28ec99f5c71b404", 578_129),
    ("test", "labels"): ("2fe59743940ee6dc3c69c847504d380f603666a621bb81235b900f8c4f4dba86", 5_953),
}
NUMPY_FILES = {
    (split, kind): RemoteFile(f"{REPO}numpy-encoded/{split}-{kind}.tar.gz", sha256=sha256, size=size)
    for (split, kind), (sha256, size) in _NUMPY_PINS.items()
}
# the per-digit text files: no verified copy was at hand, so the download prints its SHA-256
SEQUENCES = RemoteFile(REPO + "sequences.tar.gz")
#: size limits: one .npy array (the largest published, train-padded-leading.npy, has
#: 224,640,080 bytes), one digit's text file (a few hundred bytes), all text files at once
MAX_NPY_BYTES = 256 << 20
MAX_TEXT_BYTES = 1 << 20
MAX_TEXT_TOTAL_BYTES = 512 << 20
_NPY_EXPECTED = "a stroke array of at most 224,640,080 bytes (the published train-padded-leading.npy)"
_TEXT_EXPECTED = "one digit's stroke rows, a few hundred bytes per file"
_TEXT_NAME = re.compile(r"(^|.*/)(train|test)img-(\d{1,9})-(inputdata|targetdata)\.txt$")
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


@dataclass(frozen=True)
class StrokeSet:
    """Digits as stroke rows: digit i is ``points[offsets[i]:offsets[i + 1]]`` (int8, columns
    dx, dy, eos, eod; first row's dx, dy = 0), its class ``labels[i]``."""

    points: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.points[self.offsets[i] : self.offsets[i + 1]]

    def subset(self, indices: np.ndarray) -> "StrokeSet":
        """The digits at ``indices``, in that order."""
        return from_sequences([self[i] for i in indices], self.labels[indices])


def from_sequences(sequences: list[np.ndarray], labels) -> StrokeSet:
    """A StrokeSet from per-digit (T_i, 4) arrays (start positions set to (0, 0) here)."""
    rows = []
    for seq in sequences:
        seq = np.array(seq, np.int8, copy=True)
        seq[0, :2] = 0
        rows.append(seq)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    points = np.concatenate(rows) if rows else np.zeros((0, 4), np.int8)
    return StrokeSet(points, offsets, np.asarray(labels, np.int64))


def _as_int8(values: np.ndarray, where: str) -> np.ndarray:
    if values.ndim != 2 or values.shape[1] != 4:
        raise DataError(f"{where}: expected rows of 4 values (dx dy eos eod), got shape {values.shape}")
    if not np.array_equal(values, np.round(values)) or np.abs(values).max(initial=0) > 127:
        raise DataError(f"{where}: stroke values must be small integers")
    return values.astype(np.int8)


# ------------------------------------------------------------- numpy encoding


def decode_padded(array: np.ndarray, leading: bool, where: str = "<array>") -> list[np.ndarray]:
    """Per-digit rows of a (N, T, 4) padded array (zero rows before or after each digit)."""
    if array.ndim != 3 or array.shape[2] != 4:
        raise DataError(f"{where}: expected an (N, T, 4) array, got shape {array.shape}")
    out = []
    for n, seq in enumerate(array):
        if leading:
            nonzero = np.flatnonzero((seq != 0).any(1))
            if nonzero.size == 0:
                raise DataError(f"{where}: sequence {n} is all padding")
            seq = seq[nonzero[0] :]
        else:
            ends = np.flatnonzero(seq[:, 3] > 0)
            if ends.size == 0:
                raise DataError(f"{where}: sequence {n} has no end-of-digit row")
            seq = seq[: ends[0] + 1]
        out.append(_as_int8(seq, f"{where}, sequence {n}"))
    return out


def parse_npy(data: bytes, where: str) -> np.ndarray:
    """The numeric array in .npy bytes. The header is checked before anything is allocated:
    DataError for a bad header, a non-numeric dtype or a shape the bytes do not hold."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version not in _NPY_HEADERS:
            raise ValueError(f"unsupported version {version}")
        shape, _, dtype = _NPY_HEADERS[version](stream)
    # a garbled header fails in numpy's literal parser or in its Python 2 fallback (tokenize)
    except (ValueError, SyntaxError, RecursionError, tokenize.TokenError) as exc:
        raise DataError(f"{where}: not a valid .npy file ({type(exc).__name__}: {exc})") from None
    if dtype.kind not in "iuf":
        raise DataError(f"{where}: expected an integer or float array, got dtype {dtype}")
    size = len(data) - stream.tell()
    if min(shape, default=0) < 0 or math.prod(shape) * dtype.itemsize != size:
        raise DataError(
            f"{where}: shape {shape} of {dtype} does not fit the file's {size} data bytes "
            f"(truncated or corrupt)"
        )
    return np.load(io.BytesIO(data))


def _load_npy(source: Path, stem: str) -> tuple[np.ndarray, str]:
    """The .npy named ``stem`` from a .tar.gz holding it, a bare .npy, or a directory, and
    its name for errors."""
    if source.is_file() and source.name.endswith(".npy"):
        return parse_npy(read_file(source, MAX_NPY_BYTES, _NPY_EXPECTED), str(source)), str(source)
    members = read_members(
        source, lambda name: Path(name).name == f"{stem}.npy", MAX_NPY_BYTES, _NPY_EXPECTED
    )
    if not members:
        raise DataError(f"{'the directory ' if source.is_dir() else ''}{source} holds no {stem}.npy")
    name, data = next(iter(members.items()))
    return parse_npy(data, f"{source}/{name}"), f"{source}/{name}"


def load_numpy(split: str, data_dir: str | None = None, fetch=None, download: bool = False) -> StrokeSet:
    """The numpy encoding of ``split`` ("train" or "test"; leading padding)."""
    arrays, names = {}, {}
    for kind in ("padded-leading", "labels"):
        stem = f"{split}-{kind}"
        remote = NUMPY_FILES[split, kind]
        path = locate("strokes", remote, data_dir, (f"{stem}.npy",), fetch, download)
        arrays[kind], names[kind] = _load_npy(path, stem)
    labels = arrays["labels"].reshape(-1)
    if len(labels) != len(arrays["padded-leading"]):
        raise DataError(
            f"strokes {split}: {len(arrays['padded-leading'])} sequences in "
            f"{names['padded-leading']} but {len(labels)} labels in {names['labels']}"
        )
    bad = np.flatnonzero(~np.isin(labels, np.arange(10)))
    if bad.size:
        raise DataError(f"{names['labels']}: labels must be digits 0-9, label {bad[0]} is {labels[bad[0]]}")
    return from_sequences(decode_padded(arrays["padded-leading"], True, names["padded-leading"]), labels)


# ---------------------------------------------------------- official text files


def parse_rows(text: str, where: str, columns: int = 4) -> np.ndarray:
    """Rows of whitespace-separated integers; DataError naming file and line otherwise."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            values = [int(float(v)) for v in parts][:columns]
        except (ValueError, OverflowError):  # not a number, NaN, infinity
            values = []
        if len(values) < columns:
            raise DataError(
                f"{where}, line {lineno}: expected {columns} integers (dx dy eos eod), got {line!r}"
            )
        if max(abs(v) for v in values) > 127:
            raise DataError(
                f"{where}, line {lineno}: stroke values must be small integers (-127 to 127), got {line!r}"
            )
        rows.append(values)
    if not rows:
        raise DataError(f"{where}: no rows")
    return np.array(rows)


def decode_text_files(files: dict[str, bytes], split: str, where: str) -> StrokeSet:
    """A StrokeSet from ``{member name: bytes}`` of ``<split>img-<i>-{input,target}data.txt``
    files, ordered by i."""
    inputs: dict[int, np.ndarray] = {}
    labels: dict[int, int] = {}
    for name, data in files.items():
        match = _TEXT_NAME.match(name)
        if not match or match.group(2) != split:
            continue
        index, kind = int(match.group(3)), match.group(4)
        text = decode_text(data, f"{where}/{name}", "ascii")
        if kind == "inputdata":
            inputs[index] = _as_int8(parse_rows(text, f"{where}/{name}"), f"{where}/{name}")
        else:
            first = parse_rows(text, f"{where}/{name}", columns=10)[0, :10]
            if sorted(first.tolist()) != [0] * 9 + [1]:
                raise DataError(f"{where}/{name}, line 1: the first 10 columns must be a one-hot class")
            labels[index] = int(first.argmax())
    if not inputs:
        raise DataError(f"{where} holds no {split}img-<i>-inputdata.txt files")
    missing = sorted(set(inputs) - set(labels))
    if missing:
        raise DataError(
            f"{where}: no {split}img-{missing[0]}-targetdata.txt (the class of digit {missing[0]})"
        )
    order = sorted(inputs)
    return from_sequences([inputs[i] for i in order], [labels[i] for i in order])


def load_text(split: str, data_dir: str | None = None, fetch=None, download: bool = False) -> StrokeSet:
    """The official one-text-file-per-digit encoding of ``split``."""
    source = locate("strokes", SEQUENCES, data_dir, extracted=("sequences",), fetch=fetch, download=download)
    files = read_members(
        source,
        lambda name: bool(_TEXT_NAME.match(name)) and f"/{split}img-" in f"/{name}",
        MAX_TEXT_BYTES,
        _TEXT_EXPECTED,
        MAX_TEXT_TOTAL_BYTES,
    )
    return decode_text_files(files, split, str(source))


def load_strokes(split: str, data_dir: str | None = None, fetch=None, download: bool = False) -> StrokeSet:
    """``split`` from the numpy encoding if a copy is found (or, with ``download``, can be
    downloaded), else from the official text files (``sequences.tar.gz`` or a ``sequences``
    directory). MissingData, naming both encodings' files, when neither is found."""
    if split not in ("train", "test"):
        raise DataError(f"strokes split must be 'train' or 'test', got {split!r}")
    try:
        return load_numpy(split, data_dir, fetch, download)
    except DataError as numpy_error:
        try:
            return load_text(split, data_dir, fetch, download)
        except MissingData:
            if isinstance(numpy_error, MissingData):
                raise missing_strokes(split, data_dir) from None
            raise numpy_error from None
        except DataError as text_error:
            raise DataError(
                f"no pen-stroke data for {split}: numpy encoding: {numpy_error}; text files: {text_error}"
            ) from None


def missing_strokes(split: str, data_dir: str | None) -> MissingData:
    """The MissingData of ``split`` when neither encoding is found: the files of each."""
    root = data_root(data_dir)
    numpy_files = [NUMPY_FILES[split, kind] for kind in ("padded-leading", "labels")]
    urls = "".join(f"\n  {r.url}" for r in numpy_files)
    return MissingData(
        f"the strokes data set ({split}) is missing: neither the numpy encoding "
        f"({', '.join(r.name for r in numpy_files)}) nor the text files ({SEQUENCES.name}, or its "
        f"unpacked sequences directory) are in {root / 'strokes'} or {root}. To download it, "
        f"{DOWNLOAD_HINT}. Or download the numpy files yourself and put them in {root / 'strokes'} "
        f"(or in a directory given by --data-dir DIR, task.data_dir or ${ENV_VAR}):{urls}\n"
        f"or, instead, the text files: {SEQUENCES.url}"
    )
