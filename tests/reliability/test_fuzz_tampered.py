"""Tampered files where mannlab loads a model (reliability/fuzz_tampered.py): a saved model,
a Lightning checkpoint and a run directory, each changed with its checksums recomputed (a
dtype in the header, NaN weights, a tensor of another shape or name, config and meta fields
of the wrong kind, hyperparameters that build nothing, a pickled payload also under torch's
pre-2.6 default, config.toml edited after training, special files). Every case ends as its
mutation says (loaded with the untouched model's outputs, or a clear one-line error) within
its time limit, in a worker that a hang or crash cannot take down with the suite; no payload
runs. Each (target, mutation) runs once here; a larger seeded sweep:

    python reliability/fuzz_tampered.py --cases 1000 --seed 1
"""

import importlib.util
import sys
from pathlib import Path

import pytest

RELIABILITY = Path(__file__).resolve().parents[2] / "reliability"
sys.path.insert(0, str(RELIABILITY))

import fuzz_tampered  # noqa: E402
import sweep  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None, reason="the checkpoint cases need lightning"
)


@pytest.fixture(scope="module")
def worker():
    with sweep.Worker("fuzz_tampered", 60) as running:
        yield running


@pytest.mark.parametrize("target", sorted(fuzz_tampered.TARGETS))
def test_tampered_files(worker, target):
    failures = []
    for case in fuzz_tampered.suite_cases():
        if case.startswith(f"{target},"):
            outcome = worker.run(case)
            if why := sweep.failure("fuzz_tampered", case, outcome):
                failures.append(f"{case}: {why}\n{outcome.get('where', '')}{outcome.get('log', '')}")
    assert not failures, "\n".join(failures)
