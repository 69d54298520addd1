"""Running generated cases in a worker process, with a time limit, and the summary of a sweep.

A fuzz module (fuzz_files.py, fuzz_concurrency.py) names its cases by strings and gives:

    cases(n, seed) -> list[str]      n cases drawn from the seed (the same for the same seed)
    setup(base)                      once per worker, before its first case (fixtures)
    run(case, folder) -> dict        the case, run in the empty directory ``folder``: its
                                     outcome, {"status": "ok"} or {"status": "error",
                                     "error": type name, "clear": bool, "message": str}
    judge(case, outcome) -> str      "" if the outcome is what the case must end in, else why not
    COLUMNS (optional)               which columns of the summary table it shows

``Worker`` runs the cases one after the other in a child process (`python sweep.py --worker
MODULE BASE`), so that a case that hangs (a read that never returns), fills memory (an
endless read: the worker's address space is limited to ``MEMORY`` bytes) or kills the
process (a crash in native code) is a failure of that case, not of the sweep: the worker is
then killed and a fresh one takes the next case. Inside the worker an alarm stops a case
after ``timeout`` seconds and reports where it was; the parent waits ``timeout`` + ``GRACE``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from importlib import import_module
from pathlib import Path
from typing import Any

MEMORY = 4 << 30  # the worker's address space: an endless read fails at this size
GRACE = 30  # seconds the parent waits past a case's time limit before it kills the worker
HERE = Path(__file__).resolve().parent


class Hang(BaseException):
    """Not an Exception: no ``except Exception`` in the code under test can swallow it."""


# ------------------------------------------------------------------ the parent's side


class Worker:
    """A worker process running the cases of ``module`` (a module name in reliability/)."""

    def __init__(self, module: str, timeout: float = 60):
        self.module, self.timeout = module, timeout
        self.base = Path(tempfile.mkdtemp(prefix=f"{module}-"))
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, case: str) -> dict[str, Any]:
        """The outcome of ``case``; status "hang" or "crash" when the worker gave none."""
        if self.process is None:
            self._start()
        assert self.process is not None and self.process.stdin and self.process.stdout
        started = time.monotonic()
        self.process.stdin.write(json.dumps({"case": case, "timeout": self.timeout}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout + GRACE)
        line = self.process.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        seconds = round(time.monotonic() - started, 1)
        if not ready:
            outcome = {"status": "hang", "message": f"no outcome after {seconds} s; the worker was killed"}
        else:
            self.process.wait()
            outcome = {
                "status": "crash",
                "message": f"the worker died (exit status {self.process.returncode})",
            }
        outcome["log"] = self._log_tail()
        self._stop()
        return outcome

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def _start(self) -> None:
        log = (self.base / "worker.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "sweep.py"), "--worker", self.module, str(self.base / "cases")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,  # a kill takes the case's own child processes too
        )
        log.close()

    def _stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            for pipe in (self.process.stdin, self.process.stdout):
                pipe.close()
            self.process = None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.base / "worker.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def failure(module: str, case: str, outcome: dict[str, Any]) -> str:
    """Why ``outcome`` fails ``case`` ("" if it passes): a hang or crash always does."""
    if outcome["status"] in ("hang", "crash"):
        return f"{outcome['status']}: {outcome['message']}"
    return import_module(module).judge(case, outcome)


def run_cases(module: str, cases: list[str], timeout: float = 60, echo: bool = False) -> list[dict]:
    """Each case's outcome and verdict: dicts of case, status, failure ("" if it passed), ..."""
    results = []
    with Worker(module, timeout) as worker:
        for case in cases:
            outcome = worker.run(case)
            why = failure(module, case, outcome)
            results.append({"case": case, **outcome, "failure": why})
            if echo:
                print(f"{'FAIL' if why else 'ok  '} {case} ({outcome['status']}) {why}", flush=True)
    return results


def summary(results: list[dict], script: str, seed: int | None = None, columns: tuple = ()) -> str:
    """A table of the cases by target (a case's name up to its first comma), then each
    failure with the command line that runs it again. ``columns``: which of COLUMNS to show
    (all)."""
    shown = columns or COLUMNS
    groups: dict[str, dict[str, int]] = {}
    for result in results:
        group = groups.setdefault(result["case"].split(",")[0], dict.fromkeys(COLUMNS, 0))
        group["cases"] += 1
        if result["failure"]:
            group["failed"] += 1
        elif result["status"] == "skip":
            group["skipped"] += 1
        else:
            group["passed"] += 1
            group["accepted" if result["status"] == "ok" else "clear errors"] += 1
    total = {column: sum(g[column] for g in groups.values()) for column in COLUMNS}
    width = max(len(name) for name in [*groups, "total"])
    lines = [f"{'':<{width}}  " + "  ".join(f"{c:>12}" for c in shown)]
    for name, counts in sorted(groups.items()) + [("total", total)]:
        lines.append(f"{name:<{width}}  " + "  ".join(f"{counts[c]:>12}" for c in shown))
    failures = [r for r in results if r["failure"]]
    if failures:
        lines.append(f"\n{len(failures)} failure(s); each runs again with the command below it:")
    for result in failures:
        lines.append(f"- {result['case']}: {result['failure']}")
        for key in ("where", "log"):
            if result.get(key):
                lines.append("  " + result[key].strip().replace("\n", "\n  "))
        lines.append(f"  python reliability/{script} --case '{result['case']}'")
    if seed is not None:
        lines.append(f"\nseed {seed}")
    return "\n".join(lines)


COLUMNS = ("cases", "passed", "accepted", "clear errors", "skipped", "failed")


def main(module: str, script: str, doc: str, argv: list[str] | None = None) -> int:
    """The command line of a fuzz script: --cases N --seed S, or --case NAME (one case again)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="how many cases to draw (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="the seed the cases are drawn from (default 0)")
    parser.add_argument("--case", action="append", default=[], help="run this case (as a summary names it)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds a case may take (default 60)")
    parser.add_argument("--verbose", action="store_true", help="a line per case as it ends")
    parser.add_argument("--json", metavar="FILE", help="also write every case's outcome to FILE")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    fuzz = import_module(module)
    cases = args.case or fuzz.cases(args.cases, args.seed)
    started = time.monotonic()
    results = run_cases(module, cases, args.timeout, echo=args.verbose or bool(args.case))
    columns = getattr(fuzz, "COLUMNS", ())
    print(summary(results, script, None if args.case else args.seed, columns))
    print(f"{len(results)} cases in {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any(r["failure"] for r in results) else 0


# ------------------------------------------------------------------ the worker's side


def _alarm(signum: int, frame: Any) -> None:
    raise Hang("the time limit passed")


def worker(module: str, base: Path) -> None:
    """Read cases from stdin, one JSON line each, and answer each with its outcome on stdout;
    everything the cases print goes to stderr (the parent's log)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the code under test prints must not mix with the replies
    sys.stdout = sys.stderr
    fuzz = import_module(module)
    base.mkdir(parents=True, exist_ok=True)
    fuzz.setup(base)
    signal.signal(signal.SIGALRM, _alarm)
    cwd = os.getcwd()
    for line in sys.stdin:
        request = json.loads(line)
        folder = Path(tempfile.mkdtemp(dir=base))
        started = time.monotonic()
        signal.alarm(int(request["timeout"]))
        try:
            outcome = fuzz.run(request["case"], folder)
        except Hang:
            outcome = {"status": "hang", "message": f"stopped after {request['timeout']} s"}
            outcome["where"] = "".join(traceback.format_exc().splitlines(keepends=True)[-12:])
        except Exception as exc:  # noqa: BLE001 - the case itself is broken: say so, go on
            outcome = {
                "status": "crash",
                "message": f"the case could not be run ({type(exc).__name__}: {exc})",
            }
            outcome["where"] = "".join(traceback.format_exc().splitlines(keepends=True)[-12:])
        finally:
            signal.alarm(0)
            os.chdir(cwd)
        outcome["seconds"] = round(time.monotonic() - started, 3)
        remove(folder)
        replies.write(json.dumps(outcome) + "\n")
        replies.flush()


def remove(folder: Path) -> None:
    """Delete a case's directory, whatever it holds (directories without permissions too)."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit("usage: the fuzz scripts run this as their worker (sweep.py --worker MODULE BASE)")
