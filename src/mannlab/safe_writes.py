"""Writing a file, or making a directory, without following a symbolic link planted at its name.

A run directory may sit where others can write (``/tmp``, a shared scratch disk): a link
``run/.lock -> ~/precious`` would otherwise make a training overwrite ``~/precious``. Every
file mannlab writes is opened here, with ``O_NOFOLLOW`` where the system has it (and an
``lstat`` first where it does not), and every directory mannlab names itself inside a
directory the user named (``checkpoints/``, ``figures/``) is refused when it is a link.
A directory the user names (``--run-dir``, ``--out``) may itself be a link: that is the
user's choice, not a planted one.

Shared by every layer; imports nothing of mannlab but errors and file_kinds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

from mannlab.errors import ConfigError
from mannlab.file_kinds import file_problem, kind_of, kind_of_mode

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# how open() modes map to flags; only the modes mannlab writes with
FLAGS = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
}


def link_refused(path: str | os.PathLike, error: type[Exception] = ConfigError) -> Exception:
    """The error for a symbolic link where mannlab writes: one line naming the link and where it
    points."""
    try:
        target = f" to {os.readlink(os.fspath(path))}"
    except OSError:
        target = ""
    kind = kind_of(path)  # what it leads to: "a file", "a device", "a symbolic link loop", ...
    what = "which does not exist" if kind.startswith("a symbolic link to") else kind
    return error(
        f"refusing to write through {path}: it is a symbolic link{target} ({what}), and mannlab never "
        "follows a link at a name it writes (someone may have planted it to redirect the write). "
        "Remove the link, or choose another directory"
    )


def refuse_link(path: str | os.PathLike, error: type[Exception] = ConfigError) -> None:
    """``error`` if a symbolic link stands at ``path`` (the final name; the directories above
    it are not looked at)."""
    if os.path.islink(path):
        raise link_refused(path, error)


def open_descriptor(
    path: str | os.PathLike, flags: int, mode: int = 0o666, error: type[Exception] = ConfigError
) -> int:
    """``os.open(path, flags)`` of a regular file, never through a symbolic link at ``path``:
    ``error`` naming the link, or what else is there (a FIFO, a directory, a device). Opened
    without blocking (a FIFO would wait for a reader), then made blocking."""
    if not NOFOLLOW:  # Windows: no O_NOFOLLOW; look first
        refuse_link(path, error)
    try:
        fd = os.open(path, flags | NOFOLLOW | getattr(os, "O_NONBLOCK", 0), mode)
    except OSError as exc:  # ELOOP (EMLINK on some BSDs) for a link; ENXIO for a FIFO
        refuse_link(path, error)
        problem = file_problem(path) or f"{path} cannot be written ({(exc.strerror or str(exc)).lower()})"
        raise error(problem) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise error(f"{path} is {kind_of_mode(info.st_mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def open_for_writing(
    path: str | os.PathLike, mode: str = "w", error: type[Exception] = ConfigError, **open_args: Any
) -> IO:
    """``open(path, mode)`` for writing ("w", "x" or "a", text or with "b"), never through a
    symbolic link at ``path`` (``open_descriptor``)."""
    fd = open_descriptor(path, FLAGS[mode.replace("b", "")], error=error)
    if "b" not in mode:
        open_args.setdefault("encoding", "utf-8")
    try:
        return os.fdopen(fd, mode.replace("x", "w"), **open_args)
    except BaseException:
        os.close(fd)
        raise


def make_directory(path: str | os.PathLike, error: type[Exception] = ConfigError) -> Path:
    """Create the directory ``path`` (and its missing parents) and return it; ``error`` if a
    symbolic link stands at ``path`` itself: a directory mannlab names inside one the user
    named, which a planted link would move elsewhere."""
    path = Path(path)
    refuse_link(path, error)
    path.mkdir(parents=True, exist_ok=True)
    refuse_link(path, error)  # planted between the look and the mkdir
    return path
