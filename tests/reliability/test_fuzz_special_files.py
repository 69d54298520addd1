"""Special files wherever mannlab reads a file (reliability/fuzz_files.py): a FIFO, a device,
a directory, symbolic links (valid, dangling, to a directory, a loop), an empty, sparse,
unreadable, truncated or random file in place of the --config file, a recipe, each data
set's files, a run directory's entries and its checkpoints' files. Each case ends as its
target says (accepted, or a clear mannlab error naming the file and what it is) within its
time limit, in a worker process that a hang or crash cannot take down with the suite.

Every file runs here with every kind once, the kinds spread over the commands that read it
(fuzz_files.suite_cases; those that damage a run file's contents are left to
tests/reliability/test_fuzz_run.py); a larger seeded sweep:

    python reliability/fuzz_files.py --cases 2000 --seed 1
"""

import sys
from pathlib import Path

import pytest

# the scripts' folder: reliability/ at the repository root (this file is in tests/reliability/)
RELIABILITY = Path(__file__).resolve().parents[2] / "reliability"
sys.path.insert(0, str(RELIABILITY))

import fuzz_files  # noqa: E402
import sweep  # noqa: E402

TIMEOUT = 60


@pytest.fixture(scope="module")
def worker():
    with sweep.Worker("fuzz_files", TIMEOUT) as running:
        yield running


@pytest.mark.parametrize("target", sorted(fuzz_files.TARGETS))
def test_special_files(worker, target):
    failures = []
    for case in fuzz_files.suite_cases(target):
        outcome = worker.run(case)
        if why := sweep.failure("fuzz_files", case, outcome):
            failures.append(f"{case}: {why}\n{outcome.get('where', '')}{outcome.get('log', '')}")
    assert not failures, "\n".join(failures)
