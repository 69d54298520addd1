"""Atomic checkpoints: weights.safetensors, meta.json and train_state.pt in one directory.

A save writes a complete sibling directory ``.<name>.tmp`` (every file fsynced),
moves the current checkpoint aside to ``.<name>.old``, renames the new one into
place and only then deletes the old one. A crash at any point leaves either the
old or the new checkpoint complete; if it happens between the two renames,
`load_checkpoint` finds the old copy.

``train_state.pt`` holds only tensors and plain containers and is read with
``torch.load(weights_only=True)``, so loading a checkpoint never runs pickled code.

``sha256.json`` holds the SHA-256 of the three files, checked at every load: a file damaged
after it was written (a flipped bit changes a weight without making the file unreadable) is
a CheckpointError, not a silently different model. A checkpoint without it (or without a sum
for one of its files) is an error too, or deleting the file would turn the check off; one
written before mannlab kept sums, and trusted, gets them from ``seal_checkpoint``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as safetensors_bytes

from mannlab.errors import CheckpointError, DataError
from mannlab.file_kinds import directory_problem, file_problem
from mannlab.rundir.files import fsync, read_json
from mannlab.rundir.meta_fields import check_meta
from mannlab.rundir.safetensors_file import read_safetensors
from mannlab.rundir.sums import MAX_FILE_BYTES, SUMS, check_sums, sha256, write_sums
from mannlab.rundir.torch_files import load_problem
from mannlab.rundir.weights_check import weight_problems
from mannlab.safe_writes import make_directory, open_for_writing, refuse_link

WEIGHTS = "weights.safetensors"
META = "meta.json"
TRAIN_STATE = "train_state.pt"
FILES = (WEIGHTS, META, TRAIN_STATE)


def save_checkpoint(
    directory: str | Path, model: torch.nn.Module, meta: dict[str, Any], train_state: dict[str, Any]
) -> None:
    """Write the checkpoint into ``directory``, replacing any previous one atomically. It is
    never written through a symbolic link: one at its parent (``checkpoints/``) or at its
    temporary sibling is a CheckpointError naming it; one at ``directory`` itself (a user's
    ``last -> elsewhere``) is replaced by the new checkpoint, its target left as it is."""
    directory = Path(directory)
    make_directory(directory.parent, CheckpointError)
    tmp, old = _sibling(directory, "tmp"), _sibling(directory, "old")
    refuse_link(tmp, CheckpointError)
    if os.path.lexists(tmp):  # left by a save that crashed: never complete, safe to drop
        remove_tree(tmp)
    tmp.mkdir()
    try:
        # clones: safetensors refuses tensors that share storage (tied weights, views)
        weights = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
        _write_new(tmp / WEIGHTS, safetensors_bytes(weights))
        _write_new(tmp / META, json.dumps(meta, indent=2, sort_keys=True).encode())
        with open_for_writing(tmp / TRAIN_STATE, "xb", CheckpointError) as handle:
            torch.save(train_state, handle)
        sums = json.dumps({name: sha256(tmp / name) for name in FILES}, indent=2)
        _write_new(tmp / SUMS, sums.encode())
        for name in (*FILES, SUMS):
            fsync(tmp / name)
        fsync(tmp)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if disk_full(exc, directory.parent):
            free = shutil.disk_usage(directory.parent).free
            raise CheckpointError(
                f"cannot write checkpoint {directory}: no space left on the device (ENOSPC, "
                f"{free} bytes free); free some space, then resume the run"
            ) from exc
        raise
    if directory.exists() or directory.is_symlink():
        if old.exists() or old.is_symlink():
            remove_tree(old)
        os.rename(directory, old)
    # else: a previous swap may have crashed here; `old` (if any) stays until the new one is in
    os.rename(tmp, directory)
    fsync(directory.parent)
    if old.exists() or old.is_symlink():
        remove_tree(old)


def _write_new(path: Path, content: bytes) -> None:
    """Create ``path`` (never through a link: it must not exist) holding ``content``."""
    with open_for_writing(path, "xb", CheckpointError) as handle:
        handle.write(content)


def remove_tree(path: Path) -> None:
    """Delete a checkpoint directory; a symbolic link in its place (a user's) is unlinked, its
    target left as it is."""
    path.unlink() if path.is_symlink() else shutil.rmtree(path)


def disk_full(exc: BaseException, where: Path) -> bool:
    """Whether a failed write ran out of space: ENOSPC, or torch.save's writer failing (its
    RuntimeError names no errno) on a device with less than 1 MiB free."""
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    if not (isinstance(exc, RuntimeError) and "write" in str(exc).lower()):
        return False
    try:
        return shutil.disk_usage(where).free < 2**20
    except OSError:
        return False


def load_checkpoint(
    directory: str | Path, model: torch.nn.Module | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (meta, train_state); if ``model`` is given, load the weights into it."""
    directory = _existing(Path(directory))
    check_files(directory, FILES, ". Restore the file or start the run again without --resume.")
    verify(directory, FILES)
    meta = _read_meta(directory / META)
    train_state = _read_train_state(directory / TRAIN_STATE)
    if model is not None:
        load_weights(directory / WEIGHTS, model)
    return meta, train_state


def check_files(directory: Path, names: tuple[str, ...], remedy: str = "") -> None:
    """CheckpointError naming the first of the files ``names`` of a checkpoint that is
    missing, not a regular file (a FIFO, a device, a directory, a link to nowhere) or larger
    than MAX_FILE_BYTES; ``remedy`` ends the message."""
    for name in names:
        if not os.path.lexists(directory / name):
            raise CheckpointError(f"checkpoint {directory} is incomplete: {name} is missing{remedy}")
        problem = file_problem(directory / name, MAX_FILE_BYTES)
        if problem:
            raise CheckpointError(f"checkpoint {directory} is damaged: {problem}{remedy}")


def verify(directory: Path, names: tuple[str, ...]) -> None:
    """Check the files ``names`` of a checkpoint against its sha256.json, which must exist
    and hold a sum for each."""
    check_sums(directory, names, remedy(directory), required=True)


def remedy(directory: Path) -> str:
    """What to do about a checkpoint whose files fail their sums (or have none)."""
    return (
        "Restore it from a copy or start the run again without --resume; a checkpoint written "
        "before mannlab kept sums, whose files you trust, gets them from "
        f"mannlab.rundir.seal_checkpoint({str(directory)!r})"
    )


def seal_checkpoint(directory: str | Path) -> None:
    """Write the sha256.json of a checkpoint that has none (one written before mannlab kept
    sums): its files are taken as they are, so seal only a checkpoint you trust."""
    directory = Path(directory)
    missing = [name for name in FILES if not (directory / name).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {directory} is incomplete: {', '.join(missing)} missing")
    if (directory / SUMS).exists():
        raise CheckpointError(f"{directory / SUMS} exists already; a checkpoint is sealed only once")
    write_sums(directory, FILES)


def load_weights(path: str | Path, model: torch.nn.Module) -> None:
    """Load a weights.safetensors file into ``model``; any mismatch (a name, shape or dtype
    that is not the model's) raises CheckpointError."""
    path = Path(path)
    weights = read_safetensors(path, "Restore it from a copy or retrain.")
    problems = weight_problems(model.state_dict(), weights)
    if problems:
        raise CheckpointError(
            f"{path} does not match the model ({'; '.join(problems)}). "
            "Build the model with the config saved in the run (config.toml / meta.json)."
        )
    model.load_state_dict(weights)


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = read_json(path)
    except DataError as exc:
        raise CheckpointError(f"{exc}. Restore it from a copy or start the run again.") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path} should hold a JSON object, found {type(meta).__name__}")
    return check_meta(meta, path)


def _read_train_state(path: Path) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise CheckpointError(
            f"{path} {load_problem(exc)}. Restore it from a copy or start the run again without --resume."
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} should hold a dict, found {type(state).__name__}")
    return state


def _existing(directory: Path) -> Path:
    if directory.is_dir():
        return directory
    old = _sibling(directory, "old")
    if old.is_dir() and all((old / name).is_file() for name in FILES):
        return old  # a save crashed between its two renames; the old copy is complete
    if os.path.lexists(directory):  # something else is there: say what
        raise CheckpointError(
            f"{directory_problem(directory)}; expected a checkpoint. Restore it from a copy, "
            "or train without --resume to start a new run."
        )
    raise CheckpointError(
        f"no checkpoint at {directory}. Check the run directory, "
        "or train without --resume to start a new run."
    )


def _sibling(directory: Path, kind: str) -> Path:
    return directory.parent / f".{directory.name}.{kind}"
