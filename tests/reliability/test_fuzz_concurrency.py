"""Two commands on one run directory (reliability/fuzz_concurrency.py): a training stopped
before a checkpoint rename, a metrics line or an atomic write, or not stopped at all, meets a
second `train --resume`, `train --force`, `train`, `eval` or `mannlab.load`, and then goes on
or is killed with SIGKILL and resumed. A second writer is refused while the first lives and
changes nothing, a reader reads any complete checkpoint (a swap's included), and the finished
run is consistent: no metrics row twice, checkpoints that pass their sums, at its last step.

A few cases that cover every command, stop point and ending run here; a larger seeded sweep:

    python reliability/fuzz_concurrency.py --cases 200 --seed 1
"""

import os
import sys
from pathlib import Path

import pytest

# the scripts' folder: reliability/ at the repository root (this file is in tests/reliability/)
RELIABILITY = Path(__file__).resolve().parents[2] / "reliability"
sys.path.insert(0, str(RELIABILITY))

import fuzz_concurrency  # noqa: E402
import sweep  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the holder is a forked process")


@pytest.fixture(scope="module")
def worker():
    with sweep.Worker("fuzz_concurrency", timeout=120) as running:
        yield running


@pytest.mark.parametrize("case", fuzz_concurrency.SUITE)
def test_two_commands_on_one_run_directory(worker, case):
    outcome = worker.run(case)
    why = sweep.failure("fuzz_concurrency", case, outcome)
    assert not why, f"{why}\n{outcome.get('where', '')}{outcome.get('log', '')}"
