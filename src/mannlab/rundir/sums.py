"""SHA-256 sums of a saved model's files, kept beside them in sha256.json and checked on
load: a file damaged after it was written (a flipped bit changes a weight without making the
file unreadable) is an error, never a silently different model."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mannlab.errors import CheckpointError, DataError
from mannlab.file_kinds import open_regular
from mannlab.rundir.files import read_json, write_atomic

SUMS = "sha256.json"
# past this a file is not one of a checkpoint's (its weights or optimizer state), and is not
# read to be hashed
MAX_FILE_BYTES = 64 << 30


def sha256(path: Path, remedy: str = "") -> str:
    """The file's SHA-256, read in blocks; CheckpointError (ending in ``remedy``) if it is not
    a regular file of at most MAX_FILE_BYTES."""
    digest = hashlib.sha256()
    with open_regular(path, CheckpointError, MAX_FILE_BYTES, remedy) as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def is_hex_sum(value: object) -> bool:
    """Whether ``value`` is a SHA-256 written in hexadecimal, in either case."""
    return isinstance(value, str) and len(value) == 64 and all(c in HEX for c in value)


HEX = frozenset("0123456789abcdefABCDEF")


def write_sums(directory: Path, names: tuple[str, ...]) -> None:
    """Write sha256.json for the files ``names`` of ``directory`` (after them: a crash in
    between leaves sums that fail to match, not files that pass unchecked)."""
    write_atomic(directory / SUMS, json.dumps({name: sha256(directory / name) for name in names}, indent=2))


def check_sums(directory: Path, names: tuple[str, ...], remedy: str, required: bool = False) -> None:
    """Check the files ``names`` against ``directory``'s sha256.json; ``remedy`` ends the
    error (what the reader can do). Without the file: an error if ``required``, else no check
    (checkpoints written before the sums existed)."""
    if not os.path.lexists(directory / SUMS):
        if required:
            raise CheckpointError(f"{directory / SUMS} is missing, so its files cannot be checked. {remedy}")
        return
    try:
        sums = read_json(directory / SUMS)
    except (DataError, FileNotFoundError) as exc:  # FileNotFoundError: removed as we read
        raise CheckpointError(f"{exc}. {remedy}") from None
    for name in names:
        expected = sums.get(name) if isinstance(sums, dict) else None
        if required and expected is None:
            raise CheckpointError(f"{directory / SUMS} has no sum for {name}. {remedy}")
        if expected is not None and not is_hex_sum(expected):
            raise CheckpointError(
                f"{directory / SUMS}: the sum of {name} is not a SHA-256 (64 hexadecimal digits), "
                f"got {str(expected)[:80]!r}. {remedy}"
            )
        if expected is not None and expected.lower() != sha256(directory / name, remedy):
            raise CheckpointError(
                f"{directory / name} does not match its SHA-256 in {SUMS}: the file was damaged "
                f"after it was written. {remedy}"
            )
