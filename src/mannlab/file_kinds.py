"""What stands at a path where mannlab expects a regular file or a directory, in words for an
error message, found without reading it: opening a FIFO for reading waits for a writer and a
device such as /dev/zero never ends, so a reader asks here first (or opens without blocking
and checks what it opened) and refuses anything but a regular file of a sensible size.

Shared by every layer; imports nothing of mannlab but errors.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


def kind_of(path: str | os.PathLike[str]) -> str:
    """What ``path`` is, through symbolic links: "a file" (a regular one), "a directory", "a FIFO",
    "a device", "a socket", "a symbolic link loop", "a symbolic link to X, which does not
    exist", "missing", or "unreadable (the system's reason)"."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"a symbolic link to {os.readlink(path)}, which does not exist"
        return "missing"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        return f"unreadable ({(exc.strerror or str(exc)).lower()})"
    return kind_of_mode(mode)


def kind_of_mode(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def is_broken_link(path: str | os.PathLike) -> bool:
    """A symbolic link that leads nowhere (dangling, or a loop): ``exists()`` is False for it
    but something is there, which a reader should name rather than call missing."""
    return os.path.islink(path) and not os.path.exists(path)


def file_problem(path: str | os.PathLike, limit: int | None = None) -> str | None:
    """None if ``path`` is a regular file (through symbolic links) of at most ``limit``
    bytes; else what is wrong, as a sentence naming it: "P is a FIFO, not a regular file",
    "P is missing", "P is larger than N bytes"."""
    kind = kind_of(path)
    if kind == "missing":
        return f"{path} is missing"
    if kind != "a file":
        return f"{path} is {kind}, not a regular file"
    if limit is not None and (size := os.stat(path).st_size) > limit:
        return f"{path} is larger than {limit:,} bytes ({size:,})"
    return None


def directory_problem(path: str | os.PathLike) -> str | None:
    """None if ``path`` is a directory (through symbolic links), else what it is instead."""
    kind = kind_of(path)
    if kind == "a directory":
        return None
    return f"{path} is missing" if kind == "missing" else f"{path} is {kind}, not a directory"


def open_regular(
    path: str | os.PathLike, error: type[Exception], limit: int | None = None, remedy: str = ""
) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file of at most ``limit`` bytes;
    else ``error`` with ``file_problem``'s sentence and ``remedy``. Opened without blocking
    and checked after opening, so a FIFO put there in between is refused too. A path where
    nothing is raises FileNotFoundError, as open() does."""
    after = f"; {remedy}" if remedy else ""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        if os.path.islink(path):
            raise error(f"{file_problem(path)}{after}") from None
        raise FileNotFoundError(errno.ENOENT, f"{path} is missing", str(path)) from None
    except OSError as exc:  # a loop of links, no permission, ...
        problem = file_problem(path) or f"{path} cannot be read ({(exc.strerror or str(exc)).lower()})"
        raise error(f"{problem}{after}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path} is {kind_of_mode(info.st_mode)}, not a regular file{after}")
        if limit is not None and info.st_size > limit:
            raise error(f"{path} is larger than {limit:,} bytes ({info.st_size:,}){after}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | os.PathLike, error: type[Exception], limit: int, remedy: str = "", block: int = 1 << 20
) -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``), read in blocks and never
    more than ``limit`` of them: a file that grows past it while read is refused too."""
    with open_regular(path, error, limit, remedy) as fh:
        chunks, total = [], 0
        while block_read := fh.read(min(block, limit + 1 - total)):
            total += len(block_read)
            if total > limit:
                raise error(f"{path} is larger than {limit:,} bytes{f'; {remedy}' if remedy else ''}")
            chunks.append(block_read)
    return b"".join(chunks)
