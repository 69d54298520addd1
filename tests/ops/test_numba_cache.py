"""numba's disk cache follows edits of the shared helpers: a kernel cached against a helper
of ops/numba_math.py compiles again once that helper changes (ops/numba_cache.py), and
kernels take helpers from numba_math.py only, the one file that stamp covers."""

import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import mannlab

OPS = pathlib.Path(mannlab.__file__).parent / "ops"

# One kernel through mannlab's njit, one through numba's own cache (which misses the edit).
PROBE = """
import numba

from mannlab.ops.numba_cache import njit
from mannlab.ops.numba_math import sigmoid


@njit
def tracked(x):
    return sigmoid(x)


@numba.njit(cache=True)
def untracked(x):
    return sigmoid(x)
"""
RUN = "from mannlab.ops import probe; print(probe.tracked(0.0), probe.untracked(0.0))"


def copy_ops(root: pathlib.Path) -> pathlib.Path:
    """The cache module, the shared helpers, the modules its lock imports and the probe, as a
    package of their own (no torch: each fresh interpreter starts in about a second)."""
    ops = root / "mannlab" / "ops"
    ops.mkdir(parents=True)
    for package in (root / "mannlab", ops):
        (package / "__init__.py").write_text("")
    for name in ("numba_cache.py", "numba_math.py"):
        shutil.copy(OPS / name, ops / name)
    for name in ("errors.py", "file_kinds.py", "safe_writes.py"):  # what the cache's lock imports
        shutil.copy(OPS.parent / name, root / "mannlab" / name)
    (ops / "probe.py").write_text(PROBE)
    return ops


def run(root: pathlib.Path) -> tuple[list[float], str]:
    env = {**os.environ, "PYTHONPATH": str(root), "NUMBA_DEBUG_CACHE": "1"}
    env.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", RUN], env=env, cwd=root, capture_output=True, text=True, check=True
    )
    *log, values = done.stdout.strip().splitlines()
    return [float(v) for v in values.split()], "\n".join(log)


@pytest.mark.compile  # numba into an empty cache, in fresh interpreters
def test_editing_a_shared_helper_recompiles_the_kernels_that_use_it(tmp_path):
    ops = copy_ops(tmp_path)
    assert run(tmp_path)[0] == [0.5, 0.5]
    values, log = run(tmp_path)  # a fresh process: both from the cache
    assert values == [0.5, 0.5]
    assert "data loaded from" in log and "probe.tracked" in log
    math_file = ops / "numba_math.py"
    source = math_file.read_text()
    original = "        return 1.0 / (1.0 + math.exp(-x))"
    assert source.count(original) == 1
    math_file.write_text(source.replace(original, "        return 2.0 / (1.0 + math.exp(-x))"))
    tracked, untracked = run(tmp_path)[0]
    assert tracked == 1.0  # compiled again with the edited helper
    assert untracked == 0.5  # numba's own stamp: the stale machine code


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }


def test_kernels_import_shared_helpers_only_from_numba_math():
    kernel_files = sorted(OPS.glob("*/kernels.py"))
    assert {p.parent.name for p in kernel_files} == {"ntm", "dnc", "dntm", "tardis", "armin"}
    for path in kernel_files:
        ours = {m for m in imported_modules(path) if m.startswith("mannlab")}
        assert ours == {"mannlab.ops.numba_cache", "mannlab.ops.numba_math"}, path
    ours = {m for m in imported_modules(OPS / "numba_math.py") if m.startswith("mannlab")}
    assert ours == {"mannlab.ops.numba_cache"}


def test_every_kernel_goes_through_the_tracked_cache():
    """numba.njit(cache=True) in a kernel file would bring back the stale-cache trap."""
    for path in [OPS / "numba_math.py", *OPS.glob("*/kernels.py")]:
        source = path.read_text()
        assert "cache=True" not in source and "from numba import njit" not in source, path
