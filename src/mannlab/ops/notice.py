"""The two lines the compiled kernels say about themselves, each at most once per process:
that they are unavailable (and how to get them), and that they are about to compile.

Both go to the "mannlab" logger at WARNING level, so they show on stderr without any
logging set up and ``logging.getLogger("mannlab").setLevel(logging.ERROR)`` silences them.
"""

from __future__ import annotations

import logging
from types import ModuleType

log = logging.getLogger("mannlab")

NAMES = {"ntm": "NTM", "dnc": "DNC", "dntm": "D-NTM", "tardis": "TARDIS", "armin": "ARMIN"}

# One-off compile time of each ops package's kernels (forward and backward of the default
# model on copy at batch 16, float32, into an empty cache; CPU seconds rounded up; how they
# were taken: docs/DECISIONS.md); numba's disk cache makes later processes start at once.
COMPILE_SECONDS = {"ntm": 25, "dnc": 35, "dntm": 25, "tardis": 15, "armin": 12}

_missing_said = False
_triton_said = False


def triton_missing(error: ImportError) -> None:
    """Say once per process that the GPU kernels cannot load and how to get them."""
    global _triton_said
    if _triton_said:
        return
    _triton_said = True
    log.warning(
        "mannlab: Triton unavailable (%s): the GPU runs the memory models' tensor paths, "
        'launch-bound and many times slower; for the GPU kernels: pip install "mannlab[gpu]"',
        error,
    )


def kernels_missing(error: ImportError) -> None:
    """Say once per process that the kernels cannot load and how to get them."""
    global _missing_said
    if _missing_said:
        return
    _missing_said = True
    log.warning(
        "mannlab: compiled CPU kernels unavailable (%s), using the tensor paths, "
        'several times slower on CPU; for the speed: pip install "mannlab[fast]"',
        error,
    )


def before_compile(name: str, kernels: ModuleType) -> None:
    """Say that the kernels of ops/<name> are about to compile, if none of them is in
    numba's disk cache yet (first use, or their source changed)."""
    if _cached(kernels):
        return
    log.warning(
        "mannlab: compiling the %s kernels, about %d s, once (cached on disk after)",
        NAMES.get(name, name),
        COMPILE_SECONDS.get(name, 30),
    )


def _cached(kernels: ModuleType) -> bool:
    """Whether any compiled function defined in the module has a valid entry in the disk
    cache. Only its own: the helpers it imports from ops/numba_math are shared by every
    family and cached by the first, which must not silence the next family's notice.
    Reads numba's cache index (stamped with the sources, so an edit counts as uncached);
    if numba's internals change, assume cached and stay quiet rather than guess."""
    try:
        from numba.core.registry import CPUDispatcher

        dispatchers = [
            f
            for f in vars(kernels).values()
            if isinstance(f, CPUDispatcher) and f.py_func.__module__ == kernels.__name__
        ]
        if not dispatchers:
            return True  # nothing of its own to compile
        # numba sets _cache at run time (Dispatcher.enable_caching; ops.numba_cache.njit)
        return any(f._cache._cache_file._load_index() for f in dispatchers)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 -- a notice must never break a model call
        return True
