"""Two commands on one run directory: generated interleavings, each run in a worker with a
time limit, and a summary table.

A case trains a tiny run (the holder, a forked process) and stops it at a chosen point: the
k-th checkpoint rename, metrics line or atomic file replace (before it happens). There a
second command acts on the same directory: `train --resume`, `train --force`, a plain
`train`, `eval` or `mannlab.load`. Then the holder goes on, or is killed with SIGKILL (and
its command with --resume must then finish the run, since the OS lock dies with its holder;
if it was killed before it wrote anything of the run, that resume says there is no run, and
the command without --resume trains it). When the holder ends before its k-th call, the
second command meets a finished run instead. In a "race" the holder is not stopped: the
second command starts k times 20 ms after it, and whichever takes the lock first trains.

A case passes when
- a second writer meets a holder that is alive with a ConfigError saying the directory is
  in use, and the directory is left exactly as it was (no file added, removed or changed);
  after the holder it succeeds, as for a run that is not held (a plain `train` of a
  finished run is refused as "already holds a run");
- a reader (`eval`, `mannlab.load`) succeeds whenever a complete checkpoint exists, even
  in the middle of a checkpoint swap, and fails clearly (CheckpointError or a missing file)
  only before the first one, and changes nothing;
- the holder (or the resume after its kill) finishes the run, and the run is consistent:
  metrics.jsonl has no row twice (same step, split and length) and its steps increase, the
  last and best checkpoints pass their SHA-256 sums, the last one and summary.json are at
  the run's final step, and no temporary file of an interrupted write is left.

    python reliability/fuzz_concurrency.py --cases 200 --seed 1
    python reliability/fuzz_concurrency.py --case 'eval,rename,3,kill'     # one case again

The test suite runs a few cases that cover every command, stop point and ending
(tests/reliability/test_fuzz_concurrency.py).
"""

from __future__ import annotations

import os
import random
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import file_readers
import sweep

ACTIONS = ("resume", "force", "train", "eval", "load")
WRITERS = ("resume", "force", "train")
# stopped before a checkpoint swap's rename, a metrics line, an atomic write; or "race": not
# stopped, the second command started k times 20 ms after the holder
POINTS = ("rename", "metrics", "replace", "race")
ENDS = ("go", "kill")
MOST_CALLS = 12  # k is drawn up to this; a holder that makes fewer calls finishes unstopped
STEPS = 4
CONFIG = file_readers.tiny_run_config(STEPS)
WAIT = 60  # seconds the worker waits for the holder to stop or end
COLUMNS = ("cases", "passed", "failed")  # of the summary table: a case passes or not


def cases(n: int, seed: int) -> list[str]:
    """``n`` cases drawn from ``seed``: a command, a stop point, its k and an ending each."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(ACTIONS)},{rng.choice(POINTS)},{rng.randint(1, MOST_CALLS)},{rng.choice(ENDS)}"
        for _ in range(n)
    ]


# every command, stop point and ending at least once: stopped before anything of the run was
# written, in a checkpoint swap, mid-run, after the end, and a race
SUITE = [
    "force,replace,1,kill",
    "resume,rename,3,kill",
    "eval,rename,4,go",
    "load,metrics,1,kill",
    "force,metrics,5,go",
    "train,replace,40,go",
    "resume,race,4,go",
    "eval,race,2,kill",
]


def parse(case: str) -> tuple[str, str, int, str]:
    action, point, k, end = case.split(",")
    if action not in ACTIONS or point not in POINTS or end not in ENDS:
        raise ValueError(f"not a case: {case!r}")
    return action, point, int(k), end


def judge(case: str, outcome: dict[str, Any]) -> str:
    """The worker's run of a case has already checked it: its problems, if any."""
    if outcome["status"] == "ok":
        return ""
    return f"{outcome.get('error', outcome['status'])}: {outcome.get('message', '')}"


# ------------------------------------------------------------------ in the worker


def setup(base: Path) -> None:
    import torch

    from mannlab.training import loop

    torch.set_num_threads(1)
    loop._Trainer._figures = lambda self: {}  # matplotlib is most of a tiny run's time


def run(case: str, folder: Path) -> dict[str, Any]:
    """Play ``case`` in ``folder``; {"status": "ok"} or the problems found."""
    action, point, k, end = parse(case)
    os.chdir(folder)
    (folder / "config.toml").write_text(CONFIG)
    holder = Holder(folder / "run", point, k)
    try:
        problems = race(action, k, end, holder) if point == "race" else stop(action, end, holder)
        problems += check_run(folder / "run")
    finally:
        holder.kill()
    if problems:
        return {"status": "error", "error": "inconsistent", "message": "; ".join(problems)}
    return {"status": "ok"}


def stop(action: str, end: str, holder: "Holder") -> list[str]:
    """The second command while the holder is stopped at its point (or after it ended)."""
    run_dir = holder.run_dir
    stopped = holder.start()
    had_checkpoint, before = complete_checkpoint(run_dir), listing(run_dir)
    result = act(action)
    problems = check_action(action, result, stopped, had_checkpoint)
    if stopped and listing(run_dir) != before:
        problems.append(f"{action} changed the run directory of a running training")
    if stopped and end == "kill":
        holder.kill()
        return problems + resumed()
    status = holder.finish(stopped)
    if status != 0:
        problems.append(f"the holder's training failed (exit status {status}; its traceback is in the log)")
    return problems


def race(action: str, k: int, end: str, holder: "Holder") -> list[str]:
    """The second command k times 20 ms after the holder started, unstopped: whichever takes
    the lock first trains, the other is refused (or meets the finished run); then the run is
    resumed to its end, which must succeed."""
    holder.start(stop=False)
    time.sleep(0.02 * k)
    had_checkpoint = complete_checkpoint(holder.run_dir)
    result = act(action)
    if end == "kill":
        holder.kill()
        status = None
    else:
        status = holder.finish(False)
    problems = []
    if result["status"] == "error" and not result["clear"]:
        problems.append(f"{action} ended in {result['error']}: {result['message'][:300]} (not a clear error)")
    if action not in WRITERS and result["status"] == "error" and had_checkpoint:
        problems.append(f"{action} failed though a complete checkpoint was there: {result['message'][:300]}")
    if status not in (None, 0, IN_USE):
        problems.append(f"the holder's training failed (exit status {status}; its traceback is in the log)")
    held = result["status"] == "error" and "is in use" in result["message"]
    if status == IN_USE and (action not in WRITERS or held):
        problems.append(f"the holder was refused as in use, and {action} ended in {result['status']}")
    return problems + resumed()


def resumed() -> list[str]:
    """The run finished by its command with --resume (nothing to do if it is finished). A
    run killed before it wrote its config.toml left nothing to resume: the resume says so,
    and the command without --resume then trains (the lock died with its holder)."""
    result = act("resume_config")
    if (
        result["status"] == "error"
        and "holds no run" in result["message"]
        and not Path("run/config.toml").exists()
    ):
        result = act("train")
    return [] if result["status"] == "ok" else [f"the resume failed: {result['message']}"]


IN_USE = 3  # the holder's exit status when it found the directory in use


class Holder:
    """The first training, in a forked child, stopped before its k-th call of ``point``."""

    def __init__(self, run_dir: Path, point: str, k: int):
        self.run_dir, self.point, self.k = run_dir, point, k
        self.pid: int | None = None
        self.stopped_r = self.go_w = -1

    def start(self, stop: bool = True) -> bool:
        """Fork the holder; True once it stopped at its point, False if it ended first (or,
        not to ``stop``, at once)."""
        stopped_r, stopped_w = os.pipe()
        go_r, go_w = os.pipe()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the holder
            os.close(stopped_r)
            os.close(go_w)
            os._exit(self._run(stopped_w, go_r) if stop else self._run(None, None))
        os.close(stopped_w)
        os.close(go_r)
        self.pid, self.stopped_r, self.go_w = pid, stopped_r, go_w
        if not stop:
            return False
        ready, _, _ = select.select([stopped_r], [], [], WAIT)
        if not ready:
            raise TimeoutError(f"the holder neither stopped nor ended in {WAIT} s")
        return os.read(stopped_r, 1) == b"S"  # b"": it ended, closing the pipe

    def _run(self, stopped_w: int | None, go_r: int | None) -> int:
        """The holder's training: its exit status (IN_USE if the directory was)."""
        from mannlab.errors import ConfigError

        try:
            self._train(stopped_w, go_r)
            return 0
        except ConfigError as exc:
            if "is in use" in str(exc):
                return IN_USE
            traceback.print_exc()
        except BaseException:  # noqa: BLE001 - the parent reads the status, the log says why
            traceback.print_exc()
        return 1

    def _train(self, stopped_w: int | None, go_r: int | None) -> None:
        import tomllib

        from mannlab.config import RunConfig
        from mannlab.rundir.metrics_log import MetricsLog
        from mannlab.training import train

        if stopped_w is not None:
            hooks = {"rename": (os, "rename"), "replace": (os, "replace"), "metrics": (MetricsLog, "log")}
            owner, name = hooks[self.point]
            real, calls = getattr(owner, name), [0]

            def stopping(*args: Any, **kwargs: Any) -> Any:
                calls[0] += 1
                if calls[0] == self.k:
                    os.write(stopped_w, b"S")
                    os.read(go_r, 1)  # until the parent says go (or kills this process)
                return real(*args, **kwargs)

            setattr(owner, name, stopping)
        config = RunConfig.from_dict(tomllib.loads(CONFIG)).replace(run_dir=str(self.run_dir))
        train(config)

    def finish(self, stopped: bool) -> int:
        """Let the holder go on if it is stopped; its exit status."""
        if stopped:
            os.write(self.go_w, b"g")
        return self._wait()

    def kill(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            self._wait()

    def _wait(self) -> int:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.pid = None
                for fd in (self.stopped_r, self.go_w):
                    os.close(fd)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        raise TimeoutError(f"the holder did not end in {WAIT} s")


def act(action: str) -> dict[str, Any]:
    """Run the second command in this process: its outcome."""
    from mannlab.cli import USER_ERRORS, main

    commands: dict[str, Callable[[], Any]] = {
        "resume": lambda: main(["--debug", "train", "--run-dir", "run", "--resume", "--no-progress"]),
        # the command that started the run, with --resume: a kill before the run wrote its
        # config.toml leaves a directory that does not say what it trains
        "resume_config": lambda: main(
            ["--debug", "train", "--config", "config.toml", "--run-dir", "run", "--resume", "--no-progress"]
        ),
        "force": lambda: main(["--debug", "train", "--config", "config.toml", "--run-dir", "run", "--force"]),
        "train": lambda: main(["--debug", "train", "--config", "config.toml", "--run-dir", "run"]),
        "eval": lambda: main(["--debug", "eval", "run", "--batches", "1", "--lengths", "2"]),
        "load": lambda: _load(),
    }
    try:
        status = commands[action]()
    except USER_ERRORS as exc:
        return {"status": "error", "clear": True, "error": type(exc).__name__, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any other error is a finding
        where = "".join(traceback.format_exc().splitlines(keepends=True)[-6:])
        return {"status": "error", "clear": False, "error": type(exc).__name__, "message": f"{exc}\n{where}"}
    if isinstance(status, int) and status != 0:
        return {"status": "error", "clear": False, "error": "exit status", "message": str(status)}
    return {"status": "ok"}


def _load() -> None:
    import mannlab

    mannlab.load("run")


def check_action(action: str, result: dict[str, Any], stopped: bool, had_checkpoint: bool) -> list[str]:
    """What is wrong with the second command's outcome."""
    said = f"{action} ended in {result.get('error', 'success')}: {result.get('message', '')[:300]}"
    if result["status"] == "error" and not result["clear"]:
        return [f"{said} (not a clear error)"]
    if action in WRITERS:
        if stopped:
            held = result["status"] == "error" and "is in use" in result["message"]
            return [] if held else [f"{said}; expected a refusal: the directory is in use"]
        if action == "train":
            refused = result["status"] == "error" and "already holds a run" in result["message"]
            return [] if refused else [f"{said}; expected a refusal: the directory holds a run"]
        return [] if result["status"] == "ok" else [said]
    if result["status"] == "ok" or not had_checkpoint:
        return []
    return [f"{said}, though a complete checkpoint was there"]


def complete_checkpoint(run_dir: Path) -> bool:
    """Whether a complete checkpoint (or the complete copy a swap keeps) is there."""
    names = ("last", ".last.old", "best", ".best.old")
    return any((run_dir / "checkpoints" / name / "sha256.json").is_file() for name in names)


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Each file under ``folder`` with its size and modification time."""
    out = {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file():
            info = path.stat()
            out[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns)
    return out


def check_run(run_dir: Path) -> list[str]:
    """What is inconsistent in the finished run ``run_dir``."""
    from mannlab.errors import CheckpointError, DataError
    from mannlab.rundir import load_checkpoint, read_metrics
    from mannlab.rundir.files import read_json

    problems = []
    try:
        rows = read_metrics(run_dir / "metrics.jsonl")
        summary = read_json(run_dir / "summary.json")
        metas = {kind: load_checkpoint(run_dir / "checkpoints" / kind) for kind in ("last", "best")}
    except (CheckpointError, DataError, OSError) as exc:
        return [f"the finished run cannot be read: {type(exc).__name__}: {exc}"]
    keys = [(row.get("step"), row.get("split"), row.get("length"), row.get("multiple")) for row in rows]
    twice = sorted({key for key in keys if keys.count(key) > 1}, key=str)
    if twice:
        problems.append(f"metrics.jsonl has rows twice: {twice[:3]}")
    for split in ("train", "val"):
        steps = [row["step"] for row in rows if row.get("split") == split]
        if steps != sorted(steps):
            problems.append(f"metrics.jsonl: the {split} steps do not increase: {steps}")
    last_step = metas["last"][1].get("step")
    if last_step != STEPS or summary.get("steps") != STEPS:
        problems.append(f"the run ended at step {last_step} (summary: {summary.get('steps')}), not {STEPS}")
    recorded = metas["last"][1].get("metrics_rows")
    if isinstance(recorded, int) and recorded > len(rows):
        problems.append(f"the last checkpoint covers {recorded} metrics rows, the file has {len(rows)}")
    left = [p.name for p in run_dir.rglob(".*") if p.name.endswith((".tmp", ".old"))]
    if left:
        problems.append(f"temporary files left behind: {left}")
    return problems


if __name__ == "__main__":
    sys.exit(sweep.main("fuzz_concurrency", "fuzz_concurrency.py", __doc__))
