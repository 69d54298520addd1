"""MNIST (LeCun et al. 1998): the four IDX files, gzip-compressed as distributed.

    images, labels = load_mnist("train", data_dir=None)   # (60000, 28, 28) uint8, (60000,) int64
    images, labels = load_mnist("test", download=True)    # downloads the files when missing
    order = permutation(784, seed=0)                      # the fixed pixel order of pMNIST

IDX layout: a big-endian header (two zero bytes, a type code, the number of dimensions,
then one 4-byte size per dimension) followed by the data; MNIST uses unsigned bytes
(type 0x08). Files are found by ``mannlab.data.download.locate`` (``mnist/<name>``).

The IDX parser is here, not a library's: torchvision's reader would tie the install to a
torchvision build matching torch, and the format is a 4-byte header and a numpy buffer;
this one also checks the sizes against the header and names the file that is wrong.
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from mannlab.data.download import MissingData, RemoteFile, locate_all, open_data, read_capped
from mannlab.errors import DataError

MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
# The .gz files' SHA-256s and sizes as torchvision's MNIST pins them, and the MD5s it publishes.
FILES = {
    ("train", "images"): RemoteFile(
        MIRROR + "train-images-idx3-ubyte.gz",
        sha256="440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        md5="f68b3c2dcbeaaa9fbdd348bbdeb94873",
        size=9_912_422,
    ),
    ("train", "labels"): RemoteFile(
        MIRROR + "train-labels-idx1-ubyte.gz",
        sha256="3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        md5="d53e105ee54ea40749a09fcbcd1e9432",
        size=28_881,
    ),
    ("test", "images"): RemoteFile(
        MIRROR + "t10k-images-idx3-ubyte.gz",
        sha256="8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        md5="9fb629c4189551a2d022fa330f9573f3",
        size=1_648_877,
    ),
    ("test", "labels"): RemoteFile(
        MIRROR + "t10k-labels-idx1-ubyte.gz",
        sha256="f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        md5="ec29112dd5afa0611ce80d1b7f02629c",
        size=4_542,
    ),
}
#: the largest IDX file read, decompressed (train images: 47,040,016 bytes)
MAX_BYTES = 64 << 20
_EXPECTED = "an MNIST IDX file of at most 47,040,016 bytes (60,000 images of 28 x 28)"
_TYPES: dict[int, DTypeLike] = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """The array in IDX bytes (uncompressed); DataError naming ``source`` if malformed."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _TYPES:
        raise DataError(
            f"{source}: not an IDX file (expected 0x00 0x00, a type code and the "
            f"number of dimensions, got {data[:4]!r})"
        )
    dtype, ndim = np.dtype(_TYPES[data[2]]), data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{source}: IDX header truncated ({len(data)} bytes, {ndim} dimensions)")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if len(data) != expected:
        raise DataError(
            f"{source}: IDX shape {shape} needs {expected} bytes, the file has {len(data)} "
            f"(truncated or corrupt: delete it to download again, or replace it)"
        )
    try:
        return np.frombuffer(data, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))
    except ValueError as exc:  # numpy holds at most 64 dimensions (32 before numpy 2)
        raise DataError(
            f"{source}: its IDX header says {ndim} dimensions, which cannot be read ({exc}); MNIST's "
            "files have 3 (images) and 1 (labels): the file is corrupt, delete it to download again"
        ) from None


def read_idx(path: Path) -> np.ndarray:
    """An IDX file, gzip-compressed (.gz) or not, of at most ``MAX_BYTES`` (decompressed:
    the stream is read in blocks and refused past the limit)."""
    with open_data(path) as fh:
        compressed = path.name.endswith(".gz")
        try:
            stream = gzip.GzipFile(fileobj=fh) if compressed else fh
            raw = read_capped(stream, MAX_BYTES, str(path), _EXPECTED, decompressed=compressed)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(
                f"{path}: cannot decompress ({exc}); the file is corrupt or truncated: "
                f"delete it to download again, or replace it"
            ) from None
    return parse_idx(raw, str(path))


def load_mnist(
    split: str, data_dir: str | None = None, fetch=None, download: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 28, 28) uint8, labels (N,) int64) of "train" (60k) or "test" (10k)
    (``download``: fetch the files that are missing, checked against their MD5)."""
    if split not in ("train", "test"):
        raise DataError(f"MNIST split must be 'train' or 'test', got {split!r}")
    try:
        image_path, label_path = locate_all(
            "mnist", (FILES[split, "images"], FILES[split, "labels"]), data_dir, fetch, download
        )
    except MissingData:
        locate_all("mnist", FILES.values(), data_dir)  # the error then names the missing files of both splits
        raise
    images, labels = read_idx(image_path), read_idx(label_path)
    if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8:
        raise DataError(
            f"{image_path}: expected (N, 28, 28) unsigned bytes, got shape {images.shape} of {images.dtype}"
        )
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise DataError(
            f"{label_path}: expected (N,) integer labels, got shape {labels.shape} of {labels.dtype}"
        )
    bad = np.flatnonzero((labels < 0) | (labels > 9))
    if bad.size:
        raise DataError(f"{label_path}: labels must be digits 0-9, label {bad[0]} is {labels[bad[0]]}")
    if len(images) != len(labels):
        raise DataError(
            f"MNIST {split}: {len(images)} images in {image_path} but {len(labels)} labels in {label_path}"
        )
    return images, labels.astype(np.int64)


def permutation(size: int, seed: int) -> np.ndarray:
    """The fixed pixel order of permuted MNIST: a permutation of range(size) set by ``seed``."""
    return np.random.default_rng(seed).permutation(size)
