"""Writing a run's files so that a crash never leaves one half written.

Every file of a run directory but the metrics log (appended line by line) is replaced
whole: written to a temporary sibling, fsynced, then renamed over the old file, so a
reader (or a resume) sees either the old or the new content, never a mix. A symbolic link at
the file's name (or the temporary one's) is refused, never written through or replaced
(mannlab.safe_writes).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Any, Iterator

from mannlab.errors import DataError
from mannlab.file_kinds import read_regular
from mannlab.safe_writes import open_for_writing, refuse_link

# what a damaged or hostile text file raises when read: bytes that are not UTF-8, broken JSON,
# nesting deeper than the parser's recursion
UNREADABLE = (UnicodeDecodeError, ValueError, RecursionError)
# a run's JSON files (summary, checkpoint meta, sums) hold kilobytes; past this, not one of them
MAX_JSON_BYTES = 64 << 20


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "w", **open_args: Any) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on a clean exit it replaces
    ``path`` atomically, on an exception it is removed and ``path`` is left as it was.
    ConfigError naming a symbolic link at ``path`` or at the temporary name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(path)
    tmp = path.with_name(f".{path.name}.tmp")  # one writer per run directory
    if os.path.lexists(tmp) and not os.path.islink(tmp) and not os.path.isdir(tmp):
        os.unlink(tmp)  # left by a crash; a link there is refused below, not removed
    try:
        with open_for_writing(tmp, mode.replace("w", "x"), **open_args) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if not os.path.islink(tmp):  # never ours
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    fsync(path.parent)  # the rename itself survives a power cut


def write_atomic(path: str | os.PathLike, content: str | bytes) -> None:
    """Replace the file ``path`` with ``content`` (text as UTF-8) atomically."""
    with replacing(path, "wb" if isinstance(content, bytes) else "w") as handle:
        handle.write(content)


def read_json(path: str | os.PathLike, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in ``path``; DataError naming the file if it is not UTF-8 JSON, not a
    regular file (a FIFO, a device, a directory) or larger than ``limit`` bytes.
    FileNotFoundError if nothing is there."""
    data = read_regular(path, DataError, limit)
    try:
        return json.loads(data.decode("utf-8"))
    except UNREADABLE as exc:
        raise DataError(
            f"{path} is truncated or not JSON in UTF-8 ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None


def fsync(path: str | os.PathLike) -> None:
    """Flush a file or directory to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
