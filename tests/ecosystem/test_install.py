"""What an install without the extras gets: the models and a
training step without numba (one line says how to get the kernels), and the line before a
first compile."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_python(code, tmp_path, **env):
    """Run ``code`` in a fresh interpreter with the sources of this checkout first."""
    environ = {
        **os.environ,
        "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


NO_NUMBA = """
import importlib.abc, sys

class NoNumba(importlib.abc.MetaPathFinder):   # `import numba` fails as when not installed
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] == "numba":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoNumba())
"""


def test_models_and_a_training_step_without_numba_say_one_line(tmp_path):
    done = run_python(
        NO_NUMBA
        + textwrap.dedent("""
        import torch, mannlab
        from mannlab.cli import main
        for name in ("ntm", "dnc", "dntm", "tardis", "armin", "lstm"):
            model = mannlab.build_model(name, 5, 4)
            y, _ = model(torch.rand(2, 3, 5))
            y.sum().backward()
        assert main(["train", "--model", "ntm", "--task", "copy", "--steps", "1",
                     "--set", "task.max_length=3", "--set", "train.val_batch_size=2",
                     "--set", "train.val_batches=1", "--no-progress"]) == 0
        print("trained")
    """),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout
    lines = [line for line in done.stderr.splitlines() if "mannlab[fast]" in line]
    assert len(lines) == 1, done.stderr
    assert "No module named 'numba'" in lines[0] and "tensor paths" in lines[0]
    assert "compiling" not in done.stderr


@pytest.mark.compile  # numba into an empty cache, in fresh interpreters
def test_first_compile_is_announced_once(tmp_path):
    # a one-function kernel module compiled through ops.numba_cache.njit into an empty
    # cache: the line comes before the first compile, not once it is in the cache
    pytest.importorskip("numba")
    (tmp_path / "toy_kernels.py").write_text(
        textwrap.dedent("""
        from mannlab.ops.numba_cache import njit

        @njit
        def double(x):
            return 2 * x
    """)
    )
    code = """
        import logging, sys
        logging.basicConfig(format="%(message)s")
        sys.path.insert(0, ".")
        import toy_kernels
        from mannlab.ops import notice
        notice.before_compile("ntm", toy_kernels)
        toy_kernels.double(1.0)
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code, tmp_path, **env)
    assert first.returncode == 0, first.stderr
    lines = first.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        r"mannlab: compiling the NTM kernels, about \d+ s, once \(cached on disk after\)", lines[0]
    )
    again = run_python(code, tmp_path, **env)
    assert again.returncode == 0 and again.stderr == "", again.stderr


@pytest.mark.compile  # numba into an empty cache, in fresh interpreters
def test_each_family_announces_its_compile_though_shared_helpers_are_cached(tmp_path):
    # a helper module every family imports (as ops/numba_math), already in the cache, must
    # not silence the second family's line
    pytest.importorskip("numba")
    (tmp_path / "shared_math.py").write_text(
        "from mannlab.ops.numba_cache import njit\n\n@njit\ndef twice(x):\n    return 2 * x\n"
    )
    for family in ("first_kernels", "second_kernels"):
        (tmp_path / f"{family}.py").write_text(
            "from mannlab.ops.numba_cache import njit\nfrom shared_math import twice\n\n"
            "@njit\ndef run(x):\n    return twice(x) + 1\n"
        )
    code = """
        import logging, sys
        logging.basicConfig(format="%(message)s")
        sys.path.insert(0, ".")
        import {module}
        from mannlab.ops import notice
        notice.before_compile("{name}", {module})
        {module}.run(1.0)
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code.format(module="first_kernels", name="ntm"), tmp_path, **env)
    assert first.returncode == 0 and "compiling the NTM kernels" in first.stderr, first.stderr
    second = run_python(code.format(module="second_kernels", name="dntm"), tmp_path, **env)
    assert second.returncode == 0 and "compiling the D-NTM kernels" in second.stderr, second.stderr


def test_progress_bar_rate_starts_after_the_warm_up_step():
    import io
    import time

    from mannlab.training.bar import WarmupBar

    out = io.StringIO()
    out.isatty = lambda: True  # a terminal: into a file the bar is off
    bar = WarmupBar(total=100, file=out, mininterval=0)
    time.sleep(0.3)  # the warm-up step (a compile) before the first update
    bar.set_postfix({"loss": "0.5"}, refresh=False)
    bar.update(1)
    for _ in range(3):
        bar.update(1)
    meter = bar._bar.format_dict
    bar.close()
    assert meter["n"] == 4 and meter["initial"] == 1
    assert meter["elapsed"] < 0.25  # the warm-up is not in the rate, so not in the ETA
    assert "loss=0.5" in out.getvalue()
