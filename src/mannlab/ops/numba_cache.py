"""``njit``: numba.njit with an on-disk cache that also knows the shared helpers.

numba stamps a cached function with its own source file only, so a kernel compiled
against a helper of numba_math.py would be loaded unchanged from the cache after that
helper is edited. Every function compiled through this ``njit`` stamps its cache
entries with its own file *and* numba_math.py, the one module kernels may import
helpers from (tests/ops/test_numba_cache.py enforces that rule, edits a helper in a copy of
the package and sees the new behaviour). The cache stays where numba puts it
(NUMBA_CACHE_DIR, else __pycache__ beside the source, else the user cache).

``compile_lock``: an OS lock on a file beside a kernel module's cache, for processes that
would compile the same kernels at once. numba writes each cache file atomically, but adds an
entry to a function's index by reading, extending and rewriting it, so two processes that
compile the same functions at once each pay the whole compile and may drop each other's
entries; under the lock the second one waits and then loads from the disk cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import numba
from filelock import lock_descriptor, unlock_descriptor
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    InTreeCacheLocator,
    UserProvidedCacheLocator,
    UserWideCacheLocator,
)

from mannlab.errors import ConfigError
from mannlab.safe_writes import open_descriptor

#: The sources every kernel may depend on besides its own file.
SHARED_SOURCES = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "numba_math.py"),)


@functools.lru_cache(maxsize=None)
def _file_hash(path: str, mtime: float, size: int) -> str:
    # mtime and size in the key: an edit while the process runs is hashed again
    with open(path, "rb") as source:
        return hashlib.sha256(source.read()).hexdigest()


def shared_sources_stamp() -> tuple[str, ...]:
    """The content hashes of SHARED_SOURCES."""
    stamps = []
    for path in SHARED_SOURCES:
        status = os.stat(path)
        stamps.append(_file_hash(path, status.st_mtime, status.st_size))
    return tuple(stamps)


class _StampsSharedSources:
    """Locator mixin: the function's own stamp plus that of the shared sources."""

    def get_source_stamp(self):
        return super().get_source_stamp(), shared_sources_stamp()


class _UserProvidedLocator(_StampsSharedSources, UserProvidedCacheLocator):
    pass


class _InTreeLocator(_StampsSharedSources, InTreeCacheLocator):
    pass


class _UserWideLocator(_StampsSharedSources, UserWideCacheLocator):
    pass


class _KernelCacheImpl(CompileResultCacheImpl):
    _locator_classes = [_UserProvidedLocator, _InTreeLocator, _UserWideLocator]


class _KernelCache(FunctionCache):
    _impl_class = _KernelCacheImpl


def njit(function=None, **options):
    """``numba.njit(**options)``, always cached on disk, under the stamp described above.
    Use as ``@njit`` or ``@njit(fastmath=...)``."""
    if "cache" in options:
        raise TypeError("ops.numba_cache.njit always caches; leave out cache=")

    def compile_cached(py_function):
        dispatcher = numba.njit(**options)(py_function)
        dispatcher._cache = _KernelCache(dispatcher.py_func)  # as Dispatcher.enable_caching
        return dispatcher

    return compile_cached if function is None else compile_cached(function)


def cache_directory(kernels: ModuleType) -> str:
    """The directory numba caches the compiled functions of a kernel module in."""
    for value in vars(kernels).values():
        cache = getattr(value, "_cache", None)
        if isinstance(cache, _KernelCache) and value.py_func.__module__ == kernels.__name__:
            return cache._cache_path
    raise ValueError(f"{kernels.__name__} defines no function compiled through ops.numba_cache.njit")


@contextmanager
def compile_lock(kernels: ModuleType, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive OS lock (filelock's: flock on Unix, LockFileEx on Windows) on a file
    beside the kernel module's cache while the block compiles its kernels. Yields True once
    held; with ``blocking=False`` it yields False at once where another process holds it.
    Where the lock file cannot be made (a read-only cache directory) or the system has no
    lock, nothing is locked and it yields True. The lock file is never opened through a
    symbolic link: one planted there is refused with a ConfigError naming it."""
    path = os.path.join(cache_directory(kernels), f"{kernels.__name__}.lock")
    try:
        fd = open_descriptor(path, os.O_RDWR | os.O_CREAT)
    except ConfigError:
        if os.path.islink(path):
            raise
        yield True  # read-only or unusable: compile without sharing the work
        return
    try:
        try:
            held = lock_descriptor(fd, blocking=blocking)
        except OSError:  # no lock on this system or file system
            held = None
        if held is False:
            yield False
            return
        try:
            yield True
        finally:
            if held:
                unlock_descriptor(fd)
    finally:
        os.close(fd)
