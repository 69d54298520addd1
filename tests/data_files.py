"""Tiny data sets in each loader's on-disk format, written by the tests (never the network or
a real data set): bAbI's archive, MNIST's IDX files, PTB's word-level text, THUMOS'14's
annotations and features. The data, task, training and recipe tests share them."""

import gzip
import io
import struct
import tarfile

import numpy as np

# --------------------------------------------------------------------------------- bAbI v1.2

QA1 = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4
1 Sandra travelled to the office.
2 Where is Sandra? \toffice\t1
"""
QA19 = """1 The office is east of the hallway.
2 The kitchen is north of the office.
3 How do you go from the hallway to the kitchen?\te,n\t1 2
"""


def write_archive(path, language="en-10k", tasks_text=None, copies=10):
    tasks_text = tasks_text or {1: ("single-supporting-fact", QA1), 19: ("path-finding", QA19)}
    with tarfile.open(path, "w:gz") as tf:
        for task, (slug, text) in tasks_text.items():
            for split, reps in (("train", copies), ("test", 1)):
                data = (text * reps).encode()
                info = tarfile.TarInfo(f"tasks_1-20_v1-2/{language}/qa{task}_{slug}_{split}.txt")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


# ------------------------------------------------------------------------------------ MNIST


def idx_bytes(array):
    codes = {np.uint8: 0x08, np.int32: 0x0C}
    header = bytes([0, 0, codes[array.dtype.type], array.ndim]) + b"".join(
        struct.pack(">I", n) for n in array.shape
    )
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_mnist(root, n_train=30, n_test=10):
    rng = np.random.default_rng(0)
    folder = root / "mnist"
    folder.mkdir(parents=True)
    data = {}
    for split, n, prefix in (("train", n_train, "train"), ("test", n_test, "t10k")):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images)))
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels)))
        data[split] = images, labels
    return data


# ------------------------------------------------------------------------- PTB, word level

WORDS = {"train": " the cat sat \n on the mat \n", "valid": " a cat \n", "test": " the mat sat \n"}


def write_ptb_words(directory):
    directory.mkdir(parents=True, exist_ok=True)
    for split, text in WORDS.items():
        (directory / f"ptb.{split}.txt").write_text(text)
    return directory


# ------------------------------------------------------------------------------ THUMOS'14


def write_thumos(root, videos=6, test_videos=2, steps=60, dim=5):
    """A miniature of THUMOS'14's layout: annotation directories and one features.npz."""
    base = root / "thumos14"
    rng = np.random.default_rng(0)
    arrays = {}
    for split, folder, suffix, count in (
        ("validation", "TH14_Temporal_annotations_validation/annotation", "val", videos),
        ("test", "TH14_Temporal_annotations_test/annotations", "test", test_videos),
    ):
        lines = []
        for i in range(count):
            name = f"video_{split}_{i:07d}"
            arrays[name] = rng.standard_normal((steps, dim)).astype(np.float32)
            lines += [f"{name} 2.0 5.2", f"{name} 12.1 14.0"]  # seconds: steps x 16 / 30
        (base / folder).mkdir(parents=True)
        (base / folder / f"Diving_{suffix}.txt").write_text("\n".join(lines) + "\n")
    np.savez(base / "features.npz", **arrays)
    return root
