"""Special files wherever mannlab reads a file: generated cases, each run in a worker with a
time limit, and a summary table.

A case puts one kind of file (KINDS: a FIFO, a device such as /dev/zero, a directory, a
symbolic link to a valid file, a dangling one, one to a directory, a loop of them, an empty
file, a sparse file past the size limit, a file without read permission, a truncated file,
random bytes) in place of one file that mannlab reads (TARGETS: the --config file and a
recipe, the files of each data set as its loader reads them, a run directory's entries and
its checkpoints' files) and runs what reads it: a command (`mannlab train --resume`, `eval`,
`plot`, `report`, with --debug so that only the library's own errors are turned into a line)
or the function behind it. A case passes when it ends as its target says it must:

- accepted (the command succeeds) where the file is fine: a symbolic link to a valid file;
  a damaged best checkpoint, which `mannlab.load` replaces by the last one; a file the
  command does not need;
- else a clear error: a ConfigError, CheckpointError or DataError (FileNotFoundError for a
  dangling link) whose message names the file and, for a special file, says what it is
  (a FIFO, a device, a directory, a symbolic link loop, larger than the limit, unreadable);
  where the contents may still be valid (a truncated or empty text file), either;

and no case may take longer than its time limit (a FIFO must not be waited on, a device
not read to its end). Cases of a file without read permission are skipped as root.

Where mannlab writes (WRITTEN targets: the run directory's lock, config, metrics, summary,
checkpoints, figures, their temporary names, metrics.csv, mannlab.save's files), a symbolic
link is never written through: a link to a valid file there is refused, and one more kind,
"planted", puts a link to a file or directory outside the case (its "victim") at the name.
A planted case passes when the victim is unchanged afterwards and the act either succeeded
(it removed or replaced the link without following it) or failed with a clear error naming
the entry.

    python reliability/fuzz_files.py --cases 500 --seed 1
    python reliability/fuzz_files.py --case 'run/metrics.jsonl@resume,fifo,7'    # one case again

The test suite runs every file with every kind once, spread over the commands that read it
(``suite_cases``, tests/reliability/test_fuzz_special_files.py).
"""

from __future__ import annotations

import io
import os
import random
import shutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import file_readers
import sweep

KINDS = (
    "fifo",
    "device",
    "directory",
    "symlink",
    "dangling",
    "symlink_dir",
    "symlink_loop",
    "empty",
    "sparse",
    "unreadable",
    "truncated",
    "random",
)
# what a clear error says about each kind (any of the words, ignoring case)
WORDS = {
    "fifo": ("fifo",),
    "device": ("device",),
    "directory": ("directory",),
    "symlink_dir": ("directory",),
    "symlink_loop": ("symbolic link",),
    "dangling": ("not found", "missing", "no such file", "does not exist"),
    "sparse": ("bytes",),
    "unreadable": ("permission",),
}
DEVICES = ("/dev/zero", "/dev/urandom", "/dev/null")
# the kind of the written targets: a link to a file (or directory) outside the case
PLANTED = "planted"
VICTIM = b"a file of the user's outside the run directory, which a planted link points to\n"


@dataclass(frozen=True)
class Target:
    """One file a command reads: ``entry`` (relative to the case directory, laid out by
    ``fixture``) replaced, then ``act`` run. After a kind in ``accepts`` the act must
    succeed; after one in ``tolerates`` it may; after any other it must fail clearly."""

    fixture: str
    entry: str
    act: str
    accepts: frozenset = frozenset({"symlink"})
    tolerates: frozenset = frozenset()
    limit: str = ""  # "module:NAME", the size limit a sparse file passes (else 1 TiB)
    sized: bool = True  # whether a sparse file is refused for its size (not first as corrupt)
    directory: bool = False
    written: bool = False  # the act writes the entry too: a link there is refused, "planted" added
    planted_only: bool = False  # a name only written (nothing there to damage): "planted" alone

    @property
    def name(self) -> str:
        return f"{self.entry}@{self.act}"

    def kinds(self) -> tuple[str, ...]:
        if self.planted_only:
            return (PLANTED,)
        kinds = tuple(k for k in KINDS if not (self.directory and k == "directory"))
        return (*kinds, PLANTED) if self.written else kinds

    def content_kinds(self) -> frozenset:
        """The kinds that damage what a file (or directory) holds, not what it is: their
        errors are the content parsers' (tested by the other fuzz corpora), which need not
        name the entry."""
        if self.directory:  # random bytes and a sparse file stand in its place as a regular file
            return DIRECTORY_CONTENT
        return CONTENT


ALL = frozenset(KINDS)
NONE: frozenset = frozenset()
CONTENT = frozenset({"empty", "truncated", "random"})
# the kinds laid as a symbolic link (a device is a link to /dev/zero and the like)
LINKS = frozenset({"symlink", "dangling", "symlink_dir", "symlink_loop", "device"})
# for a directory: empty, a file missing from it, or a link to an empty one
DIRECTORY_CONTENT = frozenset({"empty", "truncated", "symlink_dir"})
CONFIG_LIMIT = "mannlab.config:MAX_CONFIG_BYTES"
METRICS_LIMIT = "mannlab.rundir.metrics_log:MAX_BYTES"
JSON_LIMIT = "mannlab.rundir.files:MAX_JSON_BYTES"
CHECKPOINT_LIMIT = "mannlab.rundir.sums:MAX_FILE_BYTES"


def _data_targets() -> list[Target]:
    def text(fixture: str, entry: str, act: str, limit: str) -> Target:
        return Target(fixture, entry, act, tolerates=CONTENT, limit=limit)

    return [
        text("ptb", "ptb/ptb.train.txt", "load", "mannlab.tasks.charlm:PTB_MAX_BYTES"),
        text(
            "babi",
            "tasks_1-20_v1-2/en/qa1_single-supporting-fact_train.txt",
            "load",
            "mannlab.data.babi:MAX_FILE_BYTES",
        ),
        # a compressed file of zeros is refused as corrupt, whatever its size
        Target("mnist", "mnist/train-images-idx3-ubyte.gz", "load", sized=False),
        Target("mnist", "mnist/train-labels-idx1-ubyte.gz", "load", sized=False),
        text("strokes", "sequences/trainimg-0-inputdata.txt", "text", "mannlab.data.strokes:MAX_TEXT_BYTES"),
        Target("strokes", "strokes/train-labels.npy", "numpy", limit="mannlab.data.strokes:MAX_NPY_BYTES"),
        text("snli", "snli_1.0/snli_1.0_dev.jsonl", "load", "mannlab.data.snli:MAX_BYTES"),
        Target(
            "enwik8", "enwik8", "load", tolerates=frozenset({"random"}), limit="mannlab.data.enwik8:MAX_BYTES"
        ),
        text(
            "thumos",
            "ann/annotation/Diving_val.txt",
            "annotations",
            "mannlab.data.thumos:MAX_ANNOTATION_BYTES",
        ),
        text("thumos", "info.csv", "video_info", "mannlab.data.thumos:MAX_INFO_BYTES"),
        Target(
            "thumos",
            "feats/video_validation_0000001.npy",
            "features",
            limit="mannlab.data.video_features:MAX_VIDEO_BYTES",
        ),
        Target("thumos", "feats.npz", "features_npz", sized=False),
    ]


def _run_targets() -> list[Target]:
    truncated = frozenset({"truncated"})
    out = [
        Target("config", "config.toml", "train", tolerates=truncated, limit=CONFIG_LIMIT),
        Target("config", "recipe.toml", "run", tolerates=truncated, limit=CONFIG_LIMIT),
        # a resume reads config.toml and writes it again: never through a link
        Target("run", "run/config.toml", "resume", NONE, truncated, CONFIG_LIMIT, written=True),
        *(
            Target("run", "run/config.toml", act, tolerates=truncated, limit=CONFIG_LIMIT)
            for act in ("eval", "load")
        ),
        # metrics.jsonl: a crash can cut its last line, which readers skip
        Target("run", "run/metrics.jsonl", "resume", NONE, CONTENT, METRICS_LIMIT, written=True),
        Target("run", "run/metrics.jsonl", "plot", tolerates=CONTENT, limit=METRICS_LIMIT),
        # a resume rewrites the summary (a directory in its place is refused before training),
        # eval reads it only for a warning, report reads it
        Target(
            "run", "run/summary.json", "resume", NONE, ALL - {"directory"} - LINKS, JSON_LIMIT, written=True
        ),
        Target("run", "run/summary.json", "eval", accepts=ALL, limit=JSON_LIMIT),
        Target("run", "run/summary.json", "report", tolerates=CONTENT, limit=JSON_LIMIT),
        # the lock file's contents are only the holder's process id; it is opened for writing,
        # so a link of any kind is refused
        Target(
            "run",
            "run/.lock",
            "resume",
            accepts=frozenset({"empty", "sparse", "truncated", "random"}),
            written=True,
        ),
        # a file missing from a run directory may be one the command does not need
        Target("run", "run", "resume", tolerates=truncated, directory=True),
        Target("run", "run", "eval", tolerates=truncated, directory=True),
        # no last checkpoint at all (an empty directory, or a link to one): a resume starts the
        # run again
        # (a link to a directory without one is removed as the run starts over, never followed)
        Target("run", "run/checkpoints", "resume", NONE, DIRECTORY_CONTENT, directory=True, written=True),
        Target("run", "run/checkpoints", "load", tolerates=truncated, directory=True),
        # a link at last itself is replaced by the new checkpoint, its target left alone
        Target("run", "run/checkpoints/last", "resume", directory=True, written=True),
        # loading a model needs no training state: without it the last checkpoint still loads
        Target("run", "run/checkpoints/last", "load_last", tolerates=truncated, directory=True),
    ]
    for name in ("weights.safetensors", "meta.json", "train_state.pt", "sha256.json"):
        limit = JSON_LIMIT if name.endswith(".json") else CHECKPOINT_LIMIT
        sized = name != "meta.json"  # a large meta.json fails its checksum before it is read
        for where, act in (("last", "resume"), ("last", "load_last"), ("best", "load")):
            # loading a model reads no training state, and replaces a damaged best
            # checkpoint by the last one
            fine = where == "best" or (act == "load_last" and name == "train_state.pt")
            accepts = ALL if fine else frozenset({"symlink"})
            out.append(
                Target("run", f"run/checkpoints/{where}/{name}", act, accepts, limit=limit, sized=sized)
            )
    return out + _written_targets()


def _written_targets() -> list[Target]:
    """Names mannlab only writes, where nothing stands before: the lock of a new run, the
    temporary names of the atomic writes, the figures, metrics.csv, mannlab.save's files."""

    def planted(fixture: str, entry: str, act: str, directory: bool = False) -> Target:
        return Target(fixture, entry, act, NONE, directory=directory, planted_only=True)

    return [
        planted("config", "out/.lock", "train"),
        *(
            planted("run", f"run/.{name}.tmp", "resume")
            for name in ("config.toml", "metrics.jsonl", "summary.json")
        ),
        planted("run", "run/checkpoints/.last.tmp", "resume", directory=True),
        planted("run", "run/checkpoints/best", "resume", directory=True),  # replaced, not followed
        planted("run", "run/metrics.csv", "resume_csv"),
        planted("run", "run/figures", "plot", directory=True),
        planted("run", "run/figures/learning_curve.png", "plot"),
        planted("run", "saved/model.safetensors", "save"),
        planted("run", "saved/config.json", "save"),
        planted("run", "saved/sha256.json", "save"),
    ]


TARGETS = {target.name: target for target in _data_targets() + _run_targets()}


# ------------------------------------------------------------------ the cases


def cases(n: int, seed: int) -> list[str]:
    """``n`` cases: the (target, kind) pairs in an order shuffled by ``seed``, each with a
    seed of its own (random bytes, the point of a truncation, which device), round after
    round until there are ``n``."""
    rng = random.Random(seed)
    pairs = [(t.name, kind) for t in TARGETS.values() for kind in t.kinds()]
    out: list[str] = []
    while len(out) < n:
        rng.shuffle(pairs)
        out += [f"{target},{kind},{rng.randrange(10**6)}" for target, kind in pairs[: n - len(out)]]
    return out


# acts that train or draw when they succeed: seconds a case, not milliseconds
SLOW_ACTS = ("resume", "plot")


def suite_cases(target: str, seed: int = 0) -> list[str]:
    """What the test suite runs of ``target``: a case of each kind, but of an entry that
    several acts read, each kind with one of them in turn (every act meets several kinds,
    every kind the entry); of a run file, not the kinds that damage its contents (the
    run-level fuzz corpus does); and for an act that trains or draws, only the kinds that
    must fail (they stop before any training) and a symbolic link to a valid file. A link
    planted where an act writes runs with that act always."""
    spec = TARGETS[target]
    acts = [t.act for t in TARGETS.values() if t.entry == spec.entry]
    kinds = [
        kind
        for number, kind in enumerate(spec.kinds())
        if (kind == PLANTED or acts[number % len(acts)] == spec.act)
        and not (spec.fixture == "run" and not spec.directory and kind in CONTENT)
        and (spec.act not in SLOW_ACTS or kind == "symlink" or kind not in spec.accepts | spec.tolerates)
    ]
    return [f"{target},{kind},{seed}" for kind in kinds]


def parse(case: str) -> tuple[Target, str, int]:
    target, kind, seed = case.rsplit(",", 2)
    return TARGETS[target], kind, int(seed)


def judge(case: str, outcome: dict[str, Any]) -> str:
    """Why ``outcome`` is not what ``case`` must end in ("" when it is)."""
    target, kind, _ = parse(case)
    status = outcome["status"]
    if status == "skip":
        return ""
    if kind == PLANTED:
        return _judge_planted(target, outcome)
    if kind in target.accepts:
        return "" if status == "ok" else f"refused a valid file: {_error(outcome)}"
    if status == "ok":
        return "" if kind in target.tolerates else "accepted it without an error"
    if not outcome.get("clear"):
        return f"not one of mannlab's errors: {_error(outcome)}"
    if kind in target.content_kinds():
        return ""
    message = outcome.get("message", "").lower()
    entry = Path(target.entry).name.lower()
    if entry not in message:
        return f"the message does not name {entry}: {_error(outcome)}"
    words = expected_words(target, kind)
    if words and not any(word in message for word in words):
        return f"the message does not say {' or '.join(repr(w) for w in words)}: {_error(outcome)}"
    return ""


def _judge_planted(target: Target, outcome: dict[str, Any]) -> str:
    """A planted link: the victim untouched, and success or a clear error naming the entry."""
    if outcome.get("victim") != "intact":
        return f"wrote through the planted link: the file outside {outcome.get('victim')}"
    if outcome["status"] == "ok":
        return ""
    if not outcome.get("clear"):
        return f"not one of mannlab's errors: {_error(outcome)}"
    if Path(target.entry).name.lower() not in outcome.get("message", "").lower():
        return f"the message does not name {Path(target.entry).name}: {_error(outcome)}"
    return ""


def expected_words(target: Target, kind: str) -> tuple[str, ...]:
    """What a clear error about ``kind`` in the place of ``target`` says (any of them)."""
    if target.directory and kind in ("sparse", "random"):  # a regular file where a directory is
        return ("not a directory", "is a file")
    if kind == "sparse" and not target.sized:
        return ()
    if target.written and kind in LINKS:  # refused as a link (or, read first, as what it leads to)
        return (*WORDS.get(kind, ()), "symbolic link")
    return WORDS.get(kind, ())


def _error(outcome: dict[str, Any]) -> str:
    if outcome["status"] == "ok":
        return "it succeeded"
    return f"{outcome.get('error', outcome['status'])}: {outcome.get('message', '')[:300]}"


# ------------------------------------------------------------------ laying out a case


def lay(kind: str, path: Path, rng: random.Random, limit: int, directory: bool) -> None:
    """Put a file of ``kind`` at ``path`` (which holds the fixture's valid entry)."""
    real = path.with_name(path.name + ".real") if path.name.startswith(".") else path.with_suffix(".real")
    if kind == "symlink":
        path.rename(real)
        path.symlink_to(real.name)
        return
    if kind == "unreadable":
        path.chmod(0)
        return
    if kind == "truncated":
        if directory:
            victims = sorted(p for p in path.rglob("*") if p.is_file())
            rng.choice(victims).unlink()
        else:
            data = path.read_bytes()
            path.write_bytes(data[: rng.randrange(len(data))])
        return
    if directory:
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to(rng.choice(DEVICES))
    elif kind == "directory":
        path.mkdir()
        (path / "file").write_text("a file inside a directory\n")
    elif kind == "dangling":
        path.symlink_to(f"missing-{path.name}")
    elif kind == "symlink_dir":
        real.mkdir()
        path.symlink_to(real.name)
    elif kind == "symlink_loop":
        if rng.random() < 0.5:
            path.symlink_to(path.name)
        else:
            path.symlink_to(real.name)
            real.symlink_to(path.name)
    elif kind == "empty":
        path.mkdir() if directory else path.write_bytes(b"")
    elif kind == "sparse":
        with path.open("wb") as fh:
            fh.truncate(limit + 1)
    elif kind == "random":
        path.write_bytes(rng.randbytes(rng.choice([1, 7, 100, 4096])))
    else:
        raise ValueError(f"unknown kind {kind!r}")


def limit_of(target: Target) -> int:
    if not target.limit:
        return 1 << 40
    module, name = target.limit.split(":")
    return int(getattr(__import__(module, fromlist=[name]), name))


# ------------------------------------------------------------------ in the worker

FIXTURES: dict[str, Path] = {}


def setup(base: Path) -> None:
    """Build every fixture once, quietly and offline; draw no figures."""
    import torch

    from mannlab.data import download
    from mannlab.training import loop

    torch.set_num_threads(1)
    download.urlretrieve = _offline
    loop._Trainer._figures = lambda self: {}
    os.environ["MANNLAB_DATA"] = str(base / "no-data-here")
    for name, build in file_readers.BUILDERS.items():
        folder = base.parent / "fixtures" / name
        if not folder.exists():
            folder.mkdir(parents=True)
            build(folder)
        FIXTURES[name] = folder


def _offline(url: str, path: Path) -> None:
    raise ConnectionError(f"the fuzz cases are offline ({url})")


def run(case: str, folder: Path) -> dict[str, Any]:
    """Lay out ``case`` in ``folder`` and run its act there."""
    target, kind, seed = parse(case)
    if kind == "unreadable" and os.geteuid() == 0:
        return {"status": "skip", "message": "root reads a file without read permission"}
    shutil.copytree(FIXTURES[target.fixture], folder, dirs_exist_ok=True, symlinks=True)
    os.chdir(folder)
    limit = limit_of(target) if kind == "sparse" else 0
    if kind == PLANTED:
        victim = folder.parent / f"{folder.name}-victim"
        plant(folder / target.entry, victim, target.directory)
        result = outcome(lambda: file_readers.ACTS[target.fixture, target.act](folder))
        return {**result, "victim": victim_state(victim)}
    lay(kind, folder / target.entry, random.Random(seed), limit, target.directory)
    return outcome(lambda: file_readers.ACTS[target.fixture, target.act](folder))


def plant(path: Path, victim: Path, directory: bool) -> None:
    """A link at ``path`` (whatever stood there removed) to ``victim``, outside the case: a
    file, or a directory holding one file."""
    if directory:
        victim.mkdir()
        (victim / "keep").write_bytes(VICTIM)
    else:
        victim.write_bytes(VICTIM)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(victim)


def victim_state(victim: Path) -> str:
    """ "intact", or what changed in the file (or directory) a planted link pointed to."""
    if victim.is_dir():
        names = sorted(p.name for p in victim.iterdir())
        if names != ["keep"]:
            return f"{victim} now holds {names[:5]}"
        victim = victim / "keep"
    if not victim.is_file() or victim.read_bytes() != VICTIM:
        return f"{victim} was overwritten or removed"
    return "intact"


def outcome(act: Callable[[], Any]) -> dict[str, Any]:
    """What ``act()`` ended in: success, or its error, clear if of mannlab's own kinds."""
    from mannlab.cli import USER_ERRORS

    err = io.StringIO()
    stderr, sys.stderr = sys.stderr, err
    try:
        result = act()
        if isinstance(result, int) and result != 0:
            return {"status": "error", "error": f"exit status {result}", "clear": False, "message": ""}
        return {"status": "ok"}
    except SystemExit as exc:  # argparse: a usage error
        clear = exc.code == 2
        return {
            "status": "error",
            "error": f"SystemExit({exc.code})",
            "clear": clear,
            "message": err.getvalue(),
        }
    except Exception as exc:  # noqa: BLE001 - every error is the case's outcome
        return {
            "status": "error",
            "error": type(exc).__name__,
            "clear": isinstance(exc, USER_ERRORS),
            "message": str(exc),
            "where": "".join(traceback.format_exc().splitlines(keepends=True)[-8:]),
        }
    finally:
        sys.stderr = stderr


if __name__ == "__main__":
    sys.exit(sweep.main("fuzz_files", "fuzz_files.py", __doc__))
