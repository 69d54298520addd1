"""Data files: download from the canonical address, verify a checksum, cache, or take
them from a local directory or archive (.tar.gz, .tgz, .tar, .zip).

    path = fetch(RemoteFile(url, "ptb.train.txt", md5="f26c..."))      # cached download
    paths = local_files(["ptb.train.txt"], "/data/ptb.tar.gz")         # a local copy

The cache directory is ``$MANNLAB_DATA`` if set, else ``~/.cache/mannlab``. Downloads
go to a temporary file that is renamed only after the checksum matched, so a cache
never holds a partial or wrong file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from mannlab.errors import DataError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


@dataclass(frozen=True)
class RemoteFile:
    """A file at its canonical address, with the MD5 it must have (None: not pinned)."""
    url: str
    name: str
    md5: Optional[str] = None


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """``override``, else $MANNLAB_DATA, else ~/.cache/mannlab (created if missing)."""
    path = Path(override or os.environ.get("MANNLAB_DATA") or Path.home() / ".cache" / "mannlab")
    path.mkdir(parents=True, exist_ok=True)
    return path


def md5sum(path: str | os.PathLike) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, md5: Optional[str]) -> None:
    """Raise DataError naming the file and both checksums if ``path`` does not match."""
    if md5 is not None:
        actual = md5sum(path)
        if actual != md5:
            raise DataError(f"{path}: MD5 {actual} does not match the expected {md5} "
                            f"(a corrupted or different file; delete it to download again)")


def fetch(remote: RemoteFile, directory: str | os.PathLike | None = None) -> Path:
    """The cached copy of ``remote`` (downloaded and verified on first use)."""
    target = cache_dir(directory) / remote.name
    if target.exists():
        verify(target, remote.md5)
        return target
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(remote.url, timeout=60) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise DataError(f"could not download {remote.url}: {exc}; pass a local directory or "
                        f"archive holding {remote.name} instead") from None
    try:
        verify(partial, remote.md5)
    except DataError:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    return target


def is_archive(path: Path) -> bool:
    return path.is_file() and str(path).endswith(ARCHIVE_SUFFIXES)


def local_files(names: Iterable[str], source: str | os.PathLike,
                directory: str | os.PathLike | None = None) -> dict[str, Path]:
    """Find files by base name in a local directory (searched recursively) or archive
    (members extracted into the cache). Raises DataError naming what is missing."""
    names, source = list(names), Path(source)
    if source.is_dir():
        found = {}
        for name in names:
            hits = sorted(source.rglob(name))
            if hits:
                found[name] = hits[0]
    elif is_archive(source):
        found = _extract(names, source, cache_dir(directory) / _stem(source))
    else:
        raise DataError(f"{source} is neither a directory nor an archive "
                        f"({', '.join(ARCHIVE_SUFFIXES)})")
    missing = [n for n in names if n not in found]
    if missing:
        raise DataError(f"{source} does not hold {', '.join(missing)}")
    return found


def _stem(path: Path) -> str:
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def _extract(names: list[str], archive: Path, into: Path) -> dict[str, Path]:
    """Extract the members with these base names (flattened) into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    wanted = set(names)
    if str(archive).endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                base = Path(info.filename).name
                if base in wanted and base not in found:
                    found[base] = _write(into / base, zf.read(info))
    else:
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                base = Path(member.name).name
                if member.isfile() and base in wanted and base not in found:
                    found[base] = _write(into / base, tf.extractfile(member).read())
    return found


def _write(path: Path, data: bytes) -> Path:
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(data)
    partial.replace(path)
    return path
