"""Run configuration: what to train (model, task, seed) and how (TrainConfig).

A run is described by a plain nested dict, the same shape as its TOML file::

    seed = 0
    run_dir = "runs/ntm-copy-seed0"   # optional
    seeds = [0, 1, 2]                 # optional, for `mannlab run` recipes

    [model]
    name = "ntm"                      # the rest are keyword arguments of the model
    controller_size = 100

    [task]
    name = "copy"                     # the rest are the task's parameters
    max_length = 20

    [train]                           # fields of TrainConfig
    lr = 1e-4

Layers are merged in this order: TrainConfig's defaults, then (only for
`mannlab train` without --config) the tuned ``DEFAULTS`` below, then the TOML
file, then ``--set key=value`` overrides. Unknown keys fail naming the valid
ones; model and task arguments are checked by building them (mannlab.building).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import tomli_w

from mannlab.errors import ConfigError

# ARMIN's training (appendices C.2 and C.3): Adam 2e-3, clip 1.0, here at 32 sequences per
# step, the base of the char-LM and proposal defaults below.
_ARMIN_ADAM = {"optimizer": "adam", "lr": 2e-3, "clip_grad_norm": 1.0, "batch_size": 32, "steps": 2000}

# What `mannlab train --model M --task T` uses when no --config is given, so the
# bare command trains something sensible in a few minutes on a laptop CPU.
# Keys are (model, task); "*" matches any. Entries are merged from the least to
# the most specific: ("*", "*"), (model, "*"), ("*", task), (model, task).
# Recipes (--config / `mannlab run`) do not use this table, so retuning it
# never changes a published result.
DEFAULTS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    # RMSprop (momentum 0.9) as in the NTM paper, at batch 16 with lr 3e-4: on a CPU it
    # solves copy several times faster than batch 1 at lr 1e-4 (docs/RESULTS.md).
    ("*", "*"): {
        "train": {"steps": 2000, "batch_size": 16, "optimizer": "rmsprop", "lr": 3e-4},
    },
    # The Quick start job: stop 200 steps after solving (val BCE < 0.02 at length 20).
    # Clip at 0.1, about the typical gradient norm of this loss (a mean per bit: median 0.07
    # on the plateau, 0.2 after it). Rare single-sequence spikes of 5-30 through the memory and
    # the heads, which a clip of 10 left (nearly) whole, moved every weight by several lr steps
    # (RMSprop normalises each weight, momentum carries the step on) and threw nearly solved
    # runs back to chance: with 10, seed 1 did not solve in 2,000 steps; with 0.1 seeds 0-2
    # solved in 550-850 on earlier code, seed 0 at 500 today (docs/RESULTS.md, Quick start).
    ("ntm", "copy"): {
        "train": {"val_every": 50, "stop_after_solve": 200, "lr_after_solve": 3e-5, "clip_grad_norm": 0.1}
    },
    # Char-level LM (trained with truncated BPTT): Adam 2e-3 and clip 1.0 as in ARMIN C.2, 32
    # streams of 150 symbols per step; recipes/ptb-char-*.toml hold the compared setups.
    **{
        ("*", name): {"train": {**_ARMIN_ADAM, "val_every": 200, "checkpoint_every": 200}}
        for name in ("ptb-char", "text8", "enwik8-char")
    },
    # Temporal action proposals (SST): Adam 2e-3 (ARMIN C.3) at 32 windows of 128 steps, clip
    # 1.0 as in ARMIN's other experiments; the weighted loss starts near 2 p (1 - p) ln 2 per
    # anchor (about 0.2), so a "solve" threshold means nothing here: solve_bce 0 turns it off.
    # The recipes proposals-synthetic-* and thumos14-* hold the compared setups.
    **{
        ("*", name): {
            "train": {
                **_ARMIN_ADAM,
                "val_every": 250,
                "val_batch_size": 64,
                "val_batches": 4,
                "checkpoint_every": 500,
                "solve_bce": 0.0,
            }
        }
        for name in ("proposals-synthetic", "thumos14-proposals")
    },
}

OPTIMIZERS = ("rmsprop", "adam")
LOGGERS = ("tensorboard", "csv", "wandb")  # rundir/loggers.py writes them

MAX_SEED = 2**63 - 1  # seeds are TOML integers (int64); the data seeds want them >= 0

# The valid range of each number of TrainConfig: (low, high, low included, high included).
INF = math.inf
# The largest learning rate accepted: the recipes use 1e-4 to 3e-3, and a step of more
# than 10 (Adam moves each weight by about lr per step) only diverges; larger values are
# typos (1e3 for 1e-3) that would otherwise cost a run before the divergence check stops it.
MAX_LR = 10.0
# No machine has more cores; a larger train.threads is a typo (torch crashes creating the threads).
MAX_THREADS = 4096
RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "lr": (0, MAX_LR, False, True),
    "lr_after_solve": (0, MAX_LR, True, True),
    "momentum": (0, 1, True, False),
    "alpha": (0, 1, True, False),
    "eps": (0, INF, False, False),
    "weight_decay": (0, INF, True, False),
    "clip_grad_norm": (0, INF, True, False),
    "solve_bce": (0, INF, True, False),
    "max_minutes": (0, INF, True, False),
    "diverge_factor": (1, INF, False, False),
    "steps": (1, INF, True, False),  # a run of 0 steps would only write an untrained model
    "threads": (0, MAX_THREADS, True, True),
    "diverge_patience": (0, INF, True, False),
    "stop_after_solve": (0, INF, True, False),
    "epochs": (0, INF, True, False),
    "lr_decay_factor": (0, 1, False, True),
    **{
        name: (1, INF, True, False)
        for name in (
            "batch_size",
            "samples_per_input",
            "val_every",
            "val_batch_size",
            "val_batches",
            "checkpoint_every",
        )
    },
}
_LR_HINT = f"a learning rate is finite and at most {MAX_LR:g}; the recipes use 1e-4 to 3e-3"
RANGE_HINTS = {"lr": _LR_HINT, "lr_after_solve": _LR_HINT}
TOP_LEVEL_KEYS = ("seed", "seeds", "run_dir", "model", "task", "train")
SECTIONS = ("model", "task", "train")


@dataclass(frozen=True)
class TrainConfig:
    """How to train: optimizer, budget, validation, checkpoints and stopping."""

    optimizer: str = "rmsprop"  # "rmsprop" | "adam"
    lr: float = 1e-4
    # lr from the first solve on (0: keep lr). A solved NTM at full lr tends to collapse and
    # relearn over and over (docs/RESULTS.md); a smaller step once solved keeps it solved.
    lr_after_solve: float = 0.0
    momentum: float = 0.9  # rmsprop only
    alpha: float = 0.95  # rmsprop smoothing, as in the NTM implementations
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip_grad_norm: float | None = 10.0  # global norm; 0 (or None, stored as 0) turns clipping off
    batch_size: int = 1
    # each drawn sequence appears this many times in a training minibatch (batch_size /
    # samples_per_input different sequences): the draws of a stochastic model (REINFORCE)
    # on the same input then baseline each other (the D-NTM's reward = "samples")
    samples_per_input: int = 1
    steps: int = 2000  # total optimizer steps of the run
    # N > 0: train at most N epochs of the task as well (tasks that define an epoch,
    # ``task.steps_per_epoch(batch_size)``: the proposal tasks); the run then stops at
    # min(train.steps, N epochs), and the recorded config holds that number as train.steps
    epochs: int = 0
    # step decay of the learning rate: after each step of lr_decay_steps and each epoch of
    # lr_decay_epochs (a task with epochs) the lr (or lr_after_solve) is multiplied by
    # lr_decay_factor; ARMIN C.2-C.3 divide it by 10 for the last 20% of the epochs
    lr_decay_steps: tuple[int, ...] = ()
    lr_decay_epochs: tuple[int, ...] = ()
    lr_decay_factor: float = 0.1
    val_every: int = 200
    val_batch_size: int = 32
    val_batches: int = 2
    val_length_multiples: tuple[int, ...] = (1, 2, 4)  # validate at train_length * m
    # what multiple 1 validates on (and so what "solved" and the best checkpoint mean):
    # "train_lengths", the training distribution of lengths, or "max_length", sequences of
    # exactly the longest training length (the D-NTM and TARDIS papers' success criterion)
    val_lengths: str = "train_lengths"
    # also log where the reads of a memory model land at each validation (the read weight on
    # the cell of the due item, of the items after it, and whether that cell was kept;
    # evaluation/reads.py), for tasks that name their source steps (copy, recall, ...)
    val_reads: bool = False
    checkpoint_every: int = 500
    # solved when the val bce at multiple 1 (minus the task's optimal_bce, if it reports one)
    # drops below this; the first such step and wall time are recorded
    solve_bce: float = 0.02
    stop_after_solve: int | None = None  # None: never stop early; N: stop N steps after solving
    tensorboard: bool = False
    # more destinations of the metrics besides metrics.jsonl, comma-separated: tensorboard, csv
    # (metrics.csv), wandb (rundir/loggers.py); train.tensorboard = true is the same as "tensorboard"
    logger: str = ""
    progress: bool = True
    # torch intra-op threads during the run (0: torch's default). One thread is much faster for
    # these small recurrent models on a busy CPU, and a resume must use the same count to be exact.
    threads: int = 1
    # where to train: "auto" (the fastest path for the model: training/device.py), "cpu",
    # "cuda[:N]", "mps"
    device: str = "auto"
    # "32", or mixed precision under torch.autocast: "bf16-mixed", "16-mixed" (CUDA only)
    precision: str = "32"
    # time budget of the training in minutes over all sessions (0: none): training stops at
    # train.steps or when the budget is spent, whichever comes first. Runs stopped by time are
    # not step-for-step reproducible (their length depends on the machine's speed)
    max_minutes: float = 0.0
    # what max_minutes counts: "wall" seconds, or "cpu" seconds of the training process (fair
    # between runs on a machine shared with other jobs, where wall time depends on their load)
    budget_clock: str = "wall"
    # divergence: a non-finite validation value, or one above diverge_factor times the
    # untrained model's for diverge_patience validations in a row, stops the run (summary.json
    # says "diverged", the command exits 1); diverge_patience = 0 keeps only the first check
    diverge_patience: int = 3
    diverge_factor: float = 10.0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrainConfig":
        """Build from a [train] table, checking names, types and ranges."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"unknown key 'train.{key}'; valid keys: {', '.join(known)}")
            if key == "precision" and value == 32:  # --set train.precision=32 reads as a number
                value = "32"
            kind = known[key].type
            assert isinstance(kind, str)  # the annotation's text (from __future__ import annotations)
            kwargs[key] = _coerce(f"train.{key}", value, kind)
        return cls(**kwargs)

    def __post_init__(self) -> None:
        if self.clip_grad_norm is None:  # one spelling of "off", so the TOML round trip is exact
            object.__setattr__(self, "clip_grad_norm", 0.0)
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"train.optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        if self.val_lengths not in ("train_lengths", "max_length"):
            raise ConfigError(
                f"train.val_lengths must be 'train_lengths' or 'max_length', got {self.val_lengths!r}"
            )
        unknown = [n for n in self.logger.split(",") if n.strip() and n.strip() not in LOGGERS]
        if unknown:
            raise ConfigError(
                f"train.logger: unknown logger(s) {', '.join(unknown)}; valid: "
                f"{', '.join(LOGGERS)} (comma-separated)"
            )
        if self.budget_clock not in ("wall", "cpu"):
            raise ConfigError(f"train.budget_clock must be 'wall' or 'cpu', got {self.budget_clock!r}")
        for name, bounds in RANGES.items():
            if getattr(self, name) is not None:
                check_range(f"train.{name}", getattr(self, name), *bounds, hint=RANGE_HINTS.get(name, ""))
        if self.batch_size % self.samples_per_input:
            raise ConfigError(
                f"train.batch_size ({self.batch_size}) must be a multiple of "
                f"train.samples_per_input ({self.samples_per_input})"
            )
        for name in ("lr_decay_steps", "lr_decay_epochs"):
            if any(m < 1 for m in getattr(self, name)):
                raise ConfigError(
                    f"train.{name} must be positive integers (the lr drops after those), "
                    f"got {list(getattr(self, name))}"
                )
        multiples = self.val_length_multiples
        if not multiples or 1 not in multiples or any(m < 1 for m in multiples):
            raise ConfigError(
                "train.val_length_multiples must be positive integers including 1 "
                f"(the training length, used to pick the best checkpoint), got {list(multiples)}"
            )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in ("val_length_multiples", "lr_decay_steps", "lr_decay_epochs"):
            out[name] = list(getattr(self, name))
        return out


@dataclass(frozen=True)
class RunConfig:
    """What to train: model and task by registry name with their arguments, and the seed."""

    model: str
    task: str
    model_args: dict[str, Any] = field(default_factory=dict)
    task_args: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    train: TrainConfig = field(default_factory=TrainConfig)
    run_dir: str | None = None
    seeds: tuple[int, ...] | None = None  # several seeds for `mannlab run`

    def __post_init__(self) -> None:
        check_range("seed", self.seed, 0, MAX_SEED)
        if self.run_dir is not None:
            check_path("run_dir", self.run_dir)
        for seed in self.seeds or ():
            check_range("seeds[...]", seed, 0, MAX_SEED)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "RunConfig":
        """Build from the TOML-shaped dict; unknown keys raise ConfigError."""
        for key in values:
            if key not in TOP_LEVEL_KEYS:
                raise ConfigError(
                    f"unknown key '{key}' at the top level; valid keys: {', '.join(TOP_LEVEL_KEYS)}"
                )
        model_args, model = _named_section(values, "model")
        task_args, task = _named_section(values, "task")
        train = values.get("train", {})
        if not isinstance(train, Mapping):
            raise ConfigError(f"'train' must be a table ([train]), got {train!r}")
        seeds = values.get("seeds")
        if seeds is not None:
            seeds = _coerce("seeds", seeds, "tuple[int, ...]")
            if not seeds:
                raise ConfigError("'seeds' must list at least one seed")
        return cls(
            model=model,
            task=task,
            model_args=model_args,
            task_args=task_args,
            seed=_coerce("seed", values.get("seed", 0), "int"),
            train=TrainConfig.from_dict(train),
            run_dir=_coerce("run_dir", values.get("run_dir"), "str | None"),
            seeds=seeds,
        )

    def to_dict(self) -> dict[str, Any]:
        """The TOML-shaped dict (None values kept; `config_toml` drops them)."""
        return {
            "seed": self.seed,
            "seeds": list(self.seeds) if self.seeds is not None else None,
            "run_dir": self.run_dir,
            "model": {"name": self.model, **copy.deepcopy(self.model_args)},
            "task": {"name": self.task, **copy.deepcopy(self.task_args)},
            "train": self.train.to_dict(),
        }

    def with_overrides(self, overrides: Iterable[str]) -> "RunConfig":
        """A copy with ``key=value`` overrides applied (see `apply_overrides`)."""
        return RunConfig.from_dict(apply_overrides(self.to_dict(), overrides))

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)


def default_run_dir(config: RunConfig) -> str:
    """runs/<model>-<task>-seed<seed>, relative to the working directory."""
    return str(Path("runs") / f"{config.model}-{config.task}-seed{config.seed}")


def default_config_dict(model: str, task: str) -> dict[str, Any]:
    """The TOML-shaped dict `mannlab train --model M --task T` starts from."""
    out: dict[str, Any] = {"model": {"name": model}, "task": {"name": task}}
    for key in (("*", "*"), (model, "*"), ("*", task), (model, task)):
        for section, values in DEFAULTS.get(key, {}).items():
            out.setdefault(section, {}).update(copy.deepcopy(values))
    return out


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a TOML run config and apply ``key=value`` overrides."""
    return RunConfig.from_dict(apply_overrides(read_toml(path), overrides))


def read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML table of a config file: a regular file (a FIFO would block forever, a device
    such as /dev/zero never ends) of at most MAX_CONFIG_BYTES, UTF-8 with or without a BOM."""
    check_path("the config path", path)
    path = Path(path)
    data = _read_regular(path, MAX_CONFIG_BYTES)
    try:
        table = tomllib.loads(data.decode("utf-8").removeprefix("\ufeff"))  # editors may write a BOM
    except RecursionError:  # inline tables or arrays inside each other, thousands deep
        raise ConfigError(too_deep(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path} is not valid TOML in UTF-8 ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if nesting_depth(table) > MAX_NESTING:  # [a.b.c...] headers parse, but copying recurses
        raise ConfigError(too_deep(path))
    return table


# A run config nests two levels ([train] lr = ...; a recipe's table of runs three or four).
MAX_NESTING = 32


def too_deep(path: Path) -> str:
    return (
        f"{path} is too deeply nested (tables or arrays more than {MAX_NESTING} levels inside "
        "each other); a run config has sections such as [model] and [train] holding values"
    )


def nesting_depth(value: Any) -> int:
    """How many tables and arrays ``value`` nests inside each other (without recursion)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_NESTING:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


# A run config is a few hundred bytes; more than this is not one (and is not read further).
MAX_CONFIG_BYTES = 1 << 20


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``; ConfigError for anything else or past ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO: no wait for a writer
    except FileNotFoundError:
        raise FileNotFoundError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{path} is a directory; expected a TOML file")
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device"
        raise ConfigError(f"{path} is {kind}, not a regular file; expected a TOML file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(f"{path} is larger than {limit:,} bytes; a run config is a small TOML file")
    return data


def config_toml(config: RunConfig) -> str:
    """The config as TOML text (TOML has no null, so None values are left out)."""
    return tomli_w.dumps(_drop_none(config.to_dict()))


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"train.lr=3e-4"`` -> (["train", "lr"], 0.0003). Values are TOML, else strings."""
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key:
        raise ConfigError(f"override must look like key=value (e.g. train.lr=3e-4), got {text!r}")
    path = key.split(".")
    if len(path) > 2 or not all(path):
        raise ConfigError(f"override key must be 'key' or 'section.key', got {key!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # bare words such as model.controller=fnn
    except RecursionError:
        raise ConfigError(f"override {key} is nested too deeply: {raw[:40]}...") from None
    return path, value


def apply_overrides(values: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A deep copy of ``values`` with each ``key=value`` override applied."""
    out = copy.deepcopy(dict(values))
    for text in overrides:
        path, value = parse_override(text)
        if len(path) == 1:
            if path[0] in SECTIONS:
                raise ConfigError(f"'{path[0]}' is a section; set one of its keys, e.g. {path[0]}.name=...")
            if path[0] not in TOP_LEVEL_KEYS:
                raise ConfigError(
                    f"unknown key '{path[0]}' at the top level; valid keys: {', '.join(TOP_LEVEL_KEYS)}"
                )
            out[path[0]] = value
        else:
            section, key = path
            if section not in SECTIONS:
                raise ConfigError(
                    f"unknown section '{section}' in override {text!r}; valid sections: {', '.join(SECTIONS)}"
                )
            out.setdefault(section, {})[key] = value
    return out


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_threads(count: int) -> None:
    """ConfigError unless ``train.threads`` fits this machine: more threads than cores only
    slow a run down, and tens of thousands crash torch while it creates them."""
    cores = usable_cores()
    if count > cores:
        raise ConfigError(
            f"train.threads = {count} but this process may use {cores} CPU core(s); set "
            f"train.threads to at most {cores} (0: torch's default), e.g. --set train.threads=1"
        )


def run_threads(count: int) -> int:
    """The torch thread count to use for a run's ``train.threads`` on this machine: the count,
    at most the cores there are (a run from a larger machine evaluates on this one)."""
    return min(count, usable_cores())


def check_path(name: str, value: str | Path) -> None:
    """A path must be one the file system can hold: open() raises a bare ValueError on a
    NUL byte."""
    if "\x00" in str(value):
        raise ConfigError(f"{name} cannot contain a NUL byte, got {str(value)!r}")


def check_range(
    key: str, value: float, low: float, high: float, low_in: bool = True, high_in: bool = True, hint: str = ""
) -> None:
    """ConfigError naming the valid range (and ``hint``, if given) unless low <= value <= high
    (< where not ``_in``); NaN is never in range."""
    above = value >= low if low_in else value > low
    below = value <= high if high_in else value < high
    if not (above and below):  # NaN fails both
        if high == INF:
            valid = f"{'>=' if low_in else '>'} {low}" + (" and finite" if isinstance(value, float) else "")
        else:
            valid = f"in {'[' if low_in else '('}{low}, {high}{']' if high_in else ')'}"
        raise ConfigError(f"{key} must be {valid}, got {value}" + (f" ({hint})" if hint else ""))


# --- helpers -----------------------------------------------------------------


def _named_section(values: Mapping[str, Any], section: str) -> tuple[dict[str, Any], str]:
    table = values.get(section)
    if not isinstance(table, Mapping) or "name" not in table:
        raise ConfigError(f"[{section}] needs a 'name' key{_valid_names(section)}")
    args = dict(copy.deepcopy(table))
    name = args.pop("name")
    if not isinstance(name, str):
        raise ConfigError(f"{section}.name must be a string, got {name!r}")
    return args, name


def _valid_names(section: str) -> str:
    try:
        if section == "model":
            from mannlab.models import MODELS

            names = list(MODELS)
        else:
            from mannlab.tasks import names as task_names

            names = task_names()
    except ImportError:
        return ""
    return f" (one of: {', '.join(sorted(names))})"


def _coerce(key: str, value: Any, type_name: str) -> Any:
    """Check ``value`` against a field annotation string; ints are accepted as floats."""
    optional = type_name.endswith("| None")
    base = type_name.removesuffix("| None").strip()
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null")):
        if optional:
            return None
        raise ConfigError(f"{key} must not be empty")
    if base == "bool":
        if isinstance(value, bool):
            return value
    elif base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif base == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif base == "str":
        if isinstance(value, str):
            return value
    elif base == "tuple[int, ...]":
        if isinstance(value, (list, tuple)):
            return tuple(_coerce(f"{key}[{i}]", v, "int") for i, v in enumerate(value))
    else:  # a new field type needs a case here
        raise AssertionError(f"no coercion for {type_name}")
    expected = {"tuple[int, ...]": "a list of integers"}.get(base, f"a {base}")
    raise ConfigError(f"{key} must be {expected}{' or absent' if optional else ''}, got {value!r}")


def _drop_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value]
    return value
