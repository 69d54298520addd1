"""The reliability suite at a chosen size, outside the test suite (which runs it small).

    python reliability/run_suite.py                       # 1,000 cases per fuzz target
    python reliability/run_suite.py --examples 5000 --bounds-check --seed 3

- the data-file fuzz corpus (tests/reliability/test_fuzz_data.py), the run-level corpus of configs,
  command lines, damaged run directories and model inputs (tests/reliability/test_fuzz_run.py), the
  constructor-argument corpus (tests/reliability/test_fuzz_constructors.py) and the damaged-state
  corpus (tests/models/test_state_validation.py) with MANNLAB_FUZZ_EXAMPLES cases per target;
- the special-file sweep (fuzz_files.py) and the tampered-file sweep (fuzz_tampered.py) with
  --examples cases each and the sweep of two commands on one run directory
  (fuzz_concurrency.py) with a tenth of them (each case trains a run), all drawn from --seed;
- with --bounds-check, the same plus the models' kernel-equality tests run with numba's
  bounds checking on (NUMBA_BOUNDSCHECK=1, a fresh kernel cache so nothing compiled without
  it is reused): an out-of-bounds access in a compiled kernel is then an IndexError that
  fails a test instead of silent memory corruption.

Prints pytest's summary of each part, the fuzz counts and the sweeps' tables; exits non-zero
if any part fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = [
    "tests/reliability/test_fuzz_data.py",
    "tests/reliability/test_fuzz_run.py",
    "tests/reliability/test_fuzz_constructors.py",
    "tests/models/test_state_validation.py",
]
KERNELS = [
    "tests/models/test_model_contract.py",
    "tests/models/test_ntm.py",
    "tests/models/test_dnc.py",
    "tests/models/test_dntm.py",
    "tests/models/test_tardis.py",
    "tests/models/test_armin.py",
    "tests/ops/test_ntm_sequence_kernel.py",
    "tests/ops/test_dnc_sequence.py",
    "tests/ops/test_fused_ntm_step.py",
    "tests/ops/test_fused_dnc_step.py",
    "tests/ops/test_kernel_threads.py",
]


def run(tests: list[str], env: dict[str, str]) -> int:
    print(f"$ pytest {' '.join(tests)}", flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-s", *tests], cwd=ROOT, env=env)


def sweep(script: str, cases: int, seed: int) -> int:
    command = [sys.executable, str(ROOT / "reliability" / script), "--cases", str(cases), "--seed", str(seed)]
    print(f"$ python reliability/{script} --cases {cases} --seed {seed}", flush=True)
    return subprocess.call(command, cwd=ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="fuzz cases per target")
    parser.add_argument(
        "--bounds-check",
        action="store_true",
        help="also run with numba's bounds checking on (recompiles every kernel)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of the sweeps' cases (default 0)")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error("--examples must be at least 1")
    env = {**os.environ, "MANNLAB_FUZZ_EXAMPLES": str(args.examples)}
    status = run(FUZZ, env)
    status = sweep("fuzz_files.py", args.examples, args.seed) or status
    status = sweep("fuzz_tampered.py", args.examples, args.seed) or status
    status = sweep("fuzz_concurrency.py", max(1, args.examples // 10), args.seed) or status
    if args.bounds_check:
        with tempfile.TemporaryDirectory() as cache:
            checked = {**env, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": cache}
            status = run(FUZZ + KERNELS, checked) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
