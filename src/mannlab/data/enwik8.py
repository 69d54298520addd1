"""enwik8 (Hutter prize): the first 10^8 bytes of an English Wikipedia dump, as bytes.

The canonical ``enwik8.zip`` holds one member, ``enwik8``. The usual split (Chung et al.
2015; TARDIS, ARMIN) is the first 90M bytes for training, the next 5M for validation and
the last 5M for testing. No offline copy exists on this project's machines: the loader is
tested on a generated file with a smaller split.

    splits = load_enwik8(data_dir)           # {"train": bytes, "valid": bytes, "test": bytes}
    splits = load_enwik8(download=True)      # downloads enwik8.zip when no copy is found
"""

from __future__ import annotations

import os
from pathlib import Path

from mannlab.data.download import RemoteFile, locate, read_file, read_members
from mannlab.errors import DataError

# No checksum is published with the archive and no verified copy was at hand to pin one from:
# its size is checked, and the download prints its SHA-256.
ARCHIVE = RemoteFile("https://mattmahoney.net/dc/enwik8.zip", size=36_445_475)
SPLIT = (90_000_000, 5_000_000, 5_000_000)
#: the largest corpus read (enwik8 and text8 are 100,000,000 bytes); a larger split asks more
MAX_BYTES = 128 << 20


def split_bytes(data: bytes, sizes: tuple[int, int, int] = SPLIT, source: str = "enwik8") -> dict[str, bytes]:
    """Consecutive train / valid / test parts of ``data`` with these ``sizes``."""
    if len(data) < sum(sizes):
        raise DataError(
            f"{source}: {len(data)} bytes, the split needs {sum(sizes)} "
            f"(a truncated file: delete it to download again, or replace it)"
        )
    a, b, c = sizes
    return {"train": data[:a], "valid": data[a : a + b], "test": data[a + b : a + b + c]}


def load_enwik8(
    data_dir: str | os.PathLike | None = None,
    sizes: tuple[int, int, int] = SPLIT,
    fetch=None,
    download: bool = False,
) -> dict[str, bytes]:
    """The three splits, from ``enwik8.zip`` or an unpacked ``enwik8`` file (``download``:
    fetch the archive when no copy is found)."""
    source = locate("enwik8", ARCHIVE, data_dir, extracted=("enwik8",), fetch=fetch, download=download)
    return split_bytes(read_corpus(source, "enwik8", max(MAX_BYTES, sum(sizes))), sizes, str(source))


def read_corpus(source: Path, member: str, limit: int | None = None) -> bytes:
    """The bytes of a one-file corpus (enwik8, text8): ``source`` is the file itself,
    or an archive or directory holding a file named ``member``; DataError past ``limit``
    bytes (default ``MAX_BYTES``), read in blocks, never further."""
    limit = MAX_BYTES if limit is None else limit
    expected = f"the {member} corpus of 100,000,000 bytes (at most {limit:,})"
    if source.is_file() and not source.name.endswith(".zip"):
        return read_file(source, limit, expected)
    members = read_members(source, lambda name: Path(name).name == member, limit, expected)
    if not members:
        where = f"the directory {source}" if source.is_dir() else source
        raise DataError(f"{where} has no {'file' if source.is_dir() else 'member'} named {member}")
    return next(iter(members.values()))
