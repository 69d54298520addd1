"""Finding data files: a local copy, else the cache, else a verified download.

Every data set names its files as ``RemoteFile``s (canonical address, published
checksum) and calls ``locate``::

    MNIST = RemoteFile("https://.../train-images-idx3-ubyte.gz", sha256=None, md5="f68b...")
    path = locate("mnist", MNIST, data_dir=None)           # a Path to a file or directory
    texts = read_members(path, lambda name: name.endswith(".txt"))   # archive or directory

Where ``locate`` looks, in order (``root`` is ``data_dir``, else ``$MANNLAB_DATA``,
else ``mannlab`` in the user's cache directory: ``$XDG_CACHE_HOME``, else ``~/.cache``):

1. ``data_dir`` itself, if it is a file (the archive or file to use);
2. ``root/<dataset>/<name>`` and ``root/<name>``, then the same for each of the
   ``extracted`` directory names the data set gives (an unpacked archive);
3. otherwise, with ``download=True`` (``--download`` on the command line), it downloads
   ``remote.url`` into ``root/<dataset>/<name>``; without it, it raises ``MissingData``,
   which names the files, their canonical addresses and where to put them. Nothing is
   downloaded unless asked for, as in torchvision's data sets.

A download says in one line what it fetches, from where, how big and into which directory,
shows a progress bar on a terminal (``mannlab.data.http_fetch``: retries that resume, a total
deadline and a minimum rate, so a stalled server ends the download with a message), goes to
a temporary file in the same directory, is checked against the size and the SHA-256 pinned
in the loader's table (and the MD5 where one is published) and only then renamed into
place, so a failed, interrupted or corrupt download leaves no file behind. Files that are
found are used as they are, not re-hashed: re-compressed or partial copies of the public
archives are common (a bAbI copy without one of its files, MNIST re-gzipped), and the
parsers check the formats and name the file and line that is wrong.

Everything found is kept inside the data directory: a file, or a member of an unpacked
directory, that resolves (through symlinks) outside it is refused, so a crafted directory
cannot make a loader read, say, a key file. The data directory itself may be a symlink.

Reading is bounded: every file, archive member and decompressed stream is read in
blocks and refused (DataError) once it passes the size limit the data set gives
(``limit``, e.g. 128 MiB for the 100 MB enwik8), so a crafted archive of a few KB that
decompresses to gigabytes (a decompression bomb) costs at most the limit in memory. A file
that cannot be read (permissions) is a DataError naming it.

Errors are ``DataError`` and say what to do (offline: where to put a copy).

Not pooch: pooch verifies hashes and retries as this module does, but its downloads have only
a per-read timeout (a server sending a byte every 20 s never ends them) and it extracts
archives to disk without size limits; what the loaders need besides (local copies in the
user's own layout, archives read in place under size limits, nothing read from outside the
data directory) is this module's, and the download itself is the small part.
"""

from __future__ import annotations

import hashlib
import http.client
import lzma
import os
import stat
import sys
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from mannlab.data.http_fetch import FetchError, fetch_url, human_bytes
from mannlab.errors import DataError
from mannlab.file_kinds import file_problem, is_broken_link, kind_of, kind_of_mode

ENV_VAR = "MANNLAB_DATA"
#: what the user passes to download a missing data set, for the errors that say so
DOWNLOAD_HINT = "pass --download (download=True in Python)"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
CHUNK = 1 << 20
#: what reading a corrupt archive raises: zipfile alone gives ValueError, NotImplementedError
#: (an unknown compression method) and RuntimeError (an encrypted member) besides BadZipFile
CORRUPT_ARCHIVE = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)
#: default size limits of ``read_members`` (loaders pass their data set's own): one
#: member, and all wanted members together
MAX_MEMBER_BYTES = 1 << 30
MAX_TOTAL_BYTES = 2 << 30


@dataclass(frozen=True)
class RemoteFile:
    """A file at its canonical address with its pinned SHA-256 and size in bytes (None: not
    known), and the MD5 its publisher gives, if any.

    ``name`` defaults to the last part of the URL.
    """

    url: str
    sha256: Optional[str] = None
    md5: Optional[str] = None
    name: str = ""
    size: Optional[int] = None

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.url.rstrip("/").rsplit("/", 1)[-1])


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """``data_dir``, else ``$MANNLAB_DATA``, else ``default_root()`` (not created here)."""
    if data_dir is not None and "\x00" in str(data_dir):
        raise DataError(f"data directory {str(data_dir)!r} is not a valid path (it contains a NUL byte)")
    return Path(data_dir or os.environ.get(ENV_VAR) or default_root()).expanduser()


def default_root() -> Path:
    """``mannlab`` in the user's cache directory: ``$XDG_CACHE_HOME``, else ``~/.cache``
    (the XDG base directory rules: a relative ``$XDG_CACHE_HOME`` is ignored)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / "mannlab"


class MissingData(DataError):
    """A data set's files are not in the data directory and downloading was not asked for."""


def locate(
    dataset: str,
    remote: RemoteFile,
    data_dir: str | os.PathLike | None = None,
    extracted: Iterable[str] = (),
    fetch: Callable[[str, Path], None] | None = None,
    download: bool = False,
) -> Path:
    """The local path of ``remote`` (a file, or one of the ``extracted`` directories).

    Missing, it is downloaded when ``download`` is true (``fetch(url, path)`` writes the
    bytes at ``url`` to ``path``; default: urllib; tests replace it), else MissingData
    names it. Raises DataError when the download fails.
    """
    if data_dir is not None and Path(data_dir).is_file():
        return Path(data_dir)
    root = data_root(data_dir)
    for base in (root / dataset, root):
        for name in (remote.name, *extracted):
            candidate = base / name
            if candidate.exists():
                return check_inside(candidate, root)
            if is_broken_link(candidate):
                raise DataError(
                    f"{candidate} is {kind_of(candidate)}; replace it with the file (or remove it "
                    f"to {'download it' if download else 'be told where to get it'})"
                )
    if not download:
        raise missing(dataset, [remote], root, extracted)
    target = root / dataset / remote.name
    check_inside(target.parent, root)  # a symlinked dataset folder would take the download elsewhere
    return download_file(remote, target, fetch)


def locate_all(
    dataset: str,
    remotes: Iterable[RemoteFile],
    data_dir: str | os.PathLike | None = None,
    fetch: Callable[[str, Path], None] | None = None,
    download: bool = False,
) -> list[Path]:
    """``locate`` of each of a data set's files; without ``download``, one MissingData names
    every file that is missing, not only the first."""
    remotes = list(remotes)
    if download:
        return [locate(dataset, r, data_dir, fetch=fetch, download=True) for r in remotes]
    paths, absent = [], []
    for remote in remotes:
        try:
            paths.append(locate(dataset, remote, data_dir))
        except MissingData:
            absent.append(remote)
    if absent:
        raise missing(dataset, absent, data_root(data_dir))
    return paths


def missing(
    dataset: str, remotes: list[RemoteFile], root: Path, extracted: Iterable[str] = ()
) -> MissingData:
    """The MissingData for ``remotes`` not found under ``root``: the two ways to get them."""
    names = ", ".join(r.name for r in remotes)
    unpacked = list(extracted)
    also = f" (or, unpacked, {' / '.join(unpacked)})" if unpacked else ""
    urls = "".join(f"\n  {r.url}" for r in remotes)
    return MissingData(
        f"the {dataset} data set is missing: no {names}{also} in {root / dataset} or {root}. "
        f"To download it, {DOWNLOAD_HINT}. Or download {'it' if len(remotes) == 1 else 'them'} "
        f"yourself and put {'it' if len(remotes) == 1 else 'them'} in {root / dataset} (or in a "
        f"directory given by --data-dir DIR, task.data_dir or ${ENV_VAR}):{urls}"
    )


def check_inside(path: Path, root: Path) -> Path:
    """``path`` unchanged if it resolves inside ``root``; DataError naming both otherwise."""
    try:
        real, real_root = Path(path).resolve(), Path(root).resolve()
    except (RuntimeError, OSError):  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise DataError(f"{path} is a symbolic link loop (or lies under one)") from None
    if not real.is_relative_to(real_root):
        kind = kind_of(real)
        what = "" if kind in ("a file", "a directory", "missing") else f" ({kind})"
        raise DataError(
            f"{path} resolves to {real}{what}, outside the data directory {root}; data is "
            f"read only from inside it (copy it there, or use its own directory)"
        )
    return path


def decode_text(data: bytes, source: str, encoding: str = "utf-8") -> str:
    """``data`` as ``encoding`` text; DataError naming ``source`` and the first bad byte."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(
            f"{source}, line {line}: expected {encoding.upper()} text, got byte "
            f"{data[exc.start : exc.start + 1]!r} at offset {exc.start}"
        ) from None


def download_file(remote: RemoteFile, target: Path, fetch: Callable[[str, Path], None] | None = None) -> Path:
    """Download ``remote`` to ``target`` atomically and verify it; return ``target``."""
    fetch = fetch or urlretrieve
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        os.close(handle)
    except OSError as exc:
        raise DataError(
            f"cannot write {target} ({exc}); set {ENV_VAR} or data_dir to a writable "
            f"directory, or put a copy of {remote.url} there"
        ) from None
    temp = Path(temp_name)
    size = f" ({human_bytes(remote.size)})" if remote.size else ""
    print(f"mannlab: downloading {remote.name}{size} from {remote.url} into {target.parent}", file=sys.stderr)
    try:
        try:
            fetch(remote.url, temp)
        # URLError, timeouts, refused connections are OSErrors; a connection cut mid-file is not
        except (OSError, http.client.HTTPException, FetchError) as exc:
            raise DataError(
                f"could not download {remote.url} ({exc}). If this machine is offline, download "
                f"the file elsewhere and put it at {target}, or point data_dir (--data-dir, "
                f"`--set task.data_dir=...`) or ${ENV_VAR} at a directory holding "
                f"{remote.name} (or its unpacked contents)"
            ) from None
        verify(temp, remote, shown_as=remote.url)
        temp.replace(target)
    finally:
        temp.unlink(missing_ok=True)
    return target


def urlretrieve(url: str, path: Path) -> None:
    """Write the bytes at ``url`` to ``path``: ``http_fetch.fetch_url`` with its default limits."""
    fetch_url(url, path)


def file_hash(path: Path, algorithm: str) -> str:
    """Hex digest of the file at ``path`` ("sha256" or "md5")."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, remote: RemoteFile, shown_as: str | None = None) -> None:
    """Raise DataError if ``path`` does not have the size and checksums pinned for ``remote``;
    with no SHA-256 pinned, say so and print the file's, so that it can be checked by hand."""
    shown = shown_as or str(path)
    remedy = (
        f"(a corrupt or changed file; it was not kept). Try again, or put a good copy of "
        f"{remote.name} in the data directory"
    )
    actual_size = path.stat().st_size
    if remote.size is not None and actual_size != remote.size:
        raise DataError(f"{shown}: {actual_size:,} bytes, expected {remote.size:,} {remedy}")
    for algorithm in ("sha256", "md5"):
        expected = getattr(remote, algorithm)
        if expected:
            actual = file_hash(path, algorithm)
            if actual != expected.lower():
                raise DataError(
                    f"{shown}: {algorithm.upper()} {actual} does not match the expected {expected} {remedy}"
                )
    if not remote.sha256:
        print(
            f"mannlab: {remote.name} is not verified: no SHA-256 is pinned for it (this copy's is "
            f"{file_hash(path, 'sha256')})",
            file=sys.stderr,
        )


# ------------------------------------------------------------ reading archives


def open_data(path: Path):
    """``path`` opened for binary reading; DataError naming it when it cannot be read or is
    not a regular file (a FIFO would block the read forever, a device never ends)."""
    remedy = "not a regular file; give a file holding the data"
    if is_broken_link(path):  # os.stat would call it missing
        raise DataError(f"{path} is {kind_of(path)}, {remedy}")
    try:
        mode = os.stat(path).st_mode  # never blocks, unlike opening a FIFO
        if not stat.S_ISREG(mode):
            raise DataError(f"{path} is {kind_of_mode(mode)}, {remedy}")
        return open(path, "rb")
    except OSError as exc:
        raise unreadable(path, exc) from None


def unreadable(path: Path | str, exc: OSError) -> DataError:
    """The DataError for a data file the operating system refuses to read."""
    if isinstance(exc, PermissionError):
        return DataError(
            f"{path}: permission denied (the file cannot be read by this user); make it "
            f"readable (chmod u+r) or point the data directory at a readable copy"
        )
    return DataError(f"{path}: cannot be read ({exc.strerror or exc})")


def corrupt(source: Path | str, exc: Exception, kind: str = "", remedy: str = "replace it") -> DataError:
    """The DataError for a file whose reader failed the way damaged files make it fail
    (``kind``: what it was read as, e.g. "an .npz file")."""
    reason = " ".join(str(exc).split())
    as_kind = f" as {kind}" if kind else ""
    return DataError(
        f"{source} cannot be read{as_kind} ({type(exc).__name__}: {reason}); it looks corrupt or "
        f"truncated: {remedy}"
    )


def too_large(source: str, limit: int, expected: str, decompressed: bool = True) -> DataError:
    """The DataError for a file or member larger than its data set's limit."""
    how, what = (" when decompressed", "a corrupt or crafted archive (a decompression bomb?)")
    if not decompressed:
        how, what = "", "not the data set's file, or a damaged one"
    return DataError(
        f"{source}: more than {limit:,} bytes{how}; expected {expected}. Refused: {what}; "
        f"replace it with a good copy"
    )


def read_capped(stream, limit: int, source: str, expected: str, decompressed: bool = True) -> bytes:
    """The rest of ``stream`` (a file or decompressing reader), read in blocks; DataError
    from ``too_large`` as soon as it passes ``limit`` bytes, so at most ``limit`` + 1 bytes
    are ever held."""
    chunks: list[bytes] = []
    total = 0
    while True:
        block = stream.read(min(CHUNK, limit + 1 - total))
        if not block:
            return b"".join(chunks)
        total += len(block)
        if total > limit:
            raise too_large(source, limit, expected, decompressed)
        chunks.append(block)


def read_file(path: Path, limit: int, expected: str) -> bytes:
    """The bytes of the (uncompressed) file ``path``, refused unread when larger than
    ``limit``; DataError naming it when it cannot be read."""
    with open_data(path) as fh:
        try:
            if os.fstat(fh.fileno()).st_size > limit:
                raise too_large(str(path), limit, expected, decompressed=False)
            return read_capped(fh, limit, str(path), expected, decompressed=False)
        except OSError as exc:  # EIO, or a directory on some systems
            raise unreadable(path, exc) from None


def _holds_wanted(path: Path, source: Path, wanted: Callable[[str], bool]) -> bool:
    """Whether ``path`` is a directory holding names that ``wanted`` accepts: a folder on the
    way to wanted files (skipped, as before; a linked one is not read), not a directory
    standing where a wanted file should be."""
    if not path.is_dir():
        return False
    return any(wanted(p.relative_to(source).as_posix()) for p in path.rglob("*") if not p.is_dir())


def is_archive(path: Path) -> bool:
    """True for a .tar.gz, .tgz, .tar or .zip file."""
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def read_members(
    source: Path,
    wanted: Callable[[str], bool],
    limit: int | None = None,
    expected: str = "a file of a supported data set",
    total_limit: int | None = None,
) -> dict[str, bytes]:
    """The bytes of every file in ``source`` (archive or directory) whose relative path
    (with "/" separators) ``wanted`` accepts, read in one pass without extracting.

    A wanted member larger than ``limit`` bytes (default ``MAX_MEMBER_BYTES``), or wanted
    members together larger than ``total_limit`` (default ``MAX_TOTAL_BYTES``), are a
    DataError that names it and says ``expected``; a member that declares such a size is
    refused before it is read, and one that does not is read in blocks and stopped at the
    limit. In a directory, a wanted file that resolves outside it (a symlink) is refused
    with a DataError, as is a wanted name that is not a regular file (a FIFO, a device, a
    directory, a link to nowhere); symlinked subdirectories are not descended into.
    """
    limit = MAX_MEMBER_BYTES if limit is None else limit
    total_limit = MAX_TOTAL_BYTES if total_limit is None else total_limit
    budget = [total_limit]  # bytes the remaining wanted members may still take

    def take(stream, name: str, declared: int | None, decompressed: bool = True) -> bytes:
        """A wanted member's bytes within ``limit`` and what is left of ``total_limit``."""
        cap = min(limit, budget[0])
        try:
            if declared is not None and declared > cap:
                raise too_large(name, cap, expected, decompressed)
            data = read_capped(stream, cap, name, expected, decompressed)
        except DataError:
            if cap == limit:
                raise
            raise DataError(
                f"{source}: the wanted files pass {total_limit:,} bytes together at {name}; "
                f"expected {expected}. Refused: a corrupt or crafted archive; replace it"
            ) from None
        budget[0] -= len(data)
        return data

    out: dict[str, bytes] = {}
    try:
        if source.is_dir():
            for path in sorted(source.rglob("*")):
                rel = path.relative_to(source).as_posix()
                if not wanted(rel) or _holds_wanted(path, source, wanted):
                    continue
                if not path.is_file():  # a FIFO, a device, a directory, a link to nowhere by that name
                    raise DataError(f"{file_problem(path)}; give a file holding the data")
                with open_data(check_inside(path, source)) as fh:
                    size = os.fstat(fh.fileno()).st_size
                    out[rel] = take(fh, str(path), size, decompressed=False)
        elif source.name.endswith(".zip"):
            with open_data(source) as fh, zipfile.ZipFile(fh) as archive:
                for info in archive.infolist():
                    if not info.is_dir() and wanted(info.filename):
                        with archive.open(info) as member:
                            out[info.filename] = take(member, f"{source}/{info.filename}", info.file_size)
        else:
            with open_data(source) as fh, tarfile.open(fileobj=fh) as tar:
                for entry in tar:
                    if entry.isfile() and wanted(entry.name):
                        name = f"{source}/{entry.name}"
                        out[entry.name] = take(tar.extractfile(entry), name, entry.size)
    except DataError:
        raise
    except PermissionError as exc:
        raise unreadable(exc.filename or source, exc) from None
    except CORRUPT_ARCHIVE as exc:
        raise corrupt(source, exc, remedy="delete it to download it again, or replace it") from None
    return out
