"""SHA-256 sums of a saved model's files, kept beside them in sha256.json and checked on
load: a file damaged after it was written (a flipped bit changes a weight without making the
file unreadable) is an error, never a silently different model."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mannlab.errors import CheckpointError, DataError
from mannlab.rundir.files import read_json, write_atomic

SUMS = "sha256.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_sums(directory: Path, names: tuple[str, ...]) -> None:
    """Write sha256.json for the files ``names`` of ``directory`` (after them: a crash in
    between leaves sums that fail to match, not files that pass unchecked)."""
    write_atomic(directory / SUMS, json.dumps({name: sha256(directory / name) for name in names}, indent=2))


def check_sums(directory: Path, names: tuple[str, ...], remedy: str, required: bool = False) -> None:
    """Check the files ``names`` against ``directory``'s sha256.json; ``remedy`` ends the
    error (what the reader can do). Without the file: an error if ``required``, else no check
    (checkpoints written before the sums existed)."""
    if not (directory / SUMS).is_file():
        if required:
            raise CheckpointError(f"{directory / SUMS} is missing, so its files cannot be checked. {remedy}")
        return
    try:
        sums = read_json(directory / SUMS)
    except DataError as exc:
        raise CheckpointError(f"{exc}. {remedy}") from None
    for name in names:
        expected = sums.get(name) if isinstance(sums, dict) else None
        if required and expected is None:
            raise CheckpointError(f"{directory / SUMS} has no sum for {name}. {remedy}")
        if expected is not None and expected != sha256(directory / name):
            raise CheckpointError(
                f"{directory / name} does not match its SHA-256 in {SUMS}: the file was damaged "
                f"after it was written. {remedy}"
            )
