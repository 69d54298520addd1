"""Argument types and options shared by several commands."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_override(
    parser: argparse.ArgumentParser,
    help_text: str = "change the run's config before loading its weights, e.g. "
    "model.addressing=argmax (repeatable)",
) -> None:
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help_text
    )


def add_set(parser: argparse.ArgumentParser) -> None:
    add_override(parser, "override a config value, e.g. train.lr=3e-4 or model.controller=fnn (repeatable)")
    parser.add_argument(
        "--data-dir",
        dest="overrides",
        action=DataDir,
        type=path,
        metavar="DIR",
        help="where data-set tasks (babi, mnist, strokes, ...) find their files: "
        "same as --set task.data_dir=DIR (default $MANNLAB_DATA, else mannlab in "
        "$XDG_CACHE_HOME or ~/.cache)",
    )
    add_download(parser)


def add_download(parser: argparse.ArgumentParser) -> None:
    """--download appends the override task.download=true."""
    parser.add_argument(
        "--download",
        dest="overrides",
        action="append_const",
        const="task.download=true",
        help="data-set and char-LM tasks: download the data set into the data directory when "
        "it is missing (without it, a missing data set is an error that says where to put "
        "the files); same as --set task.download=true",
    )


class DataDir(argparse.Action):
    """--data-dir DIR appends the override task.data_dir="DIR"."""

    def __call__(self, parser, namespace, value, option_string=None):
        overrides = list(getattr(namespace, self.dest) or [])  # never mutate the shared default
        setattr(namespace, self.dest, overrides + [f"task.data_dir={json.dumps(value)}"])


def add_logger(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--logger",
        dest="overrides",
        action=LoggerNames,
        metavar="NAME[,NAME]",
        help="also log the metrics to tensorboard, csv (metrics.csv) and/or wandb "
        "(repeatable or comma-separated; same as --set train.logger=NAMES)",
    )


class LoggerNames(argparse.Action):
    """--logger csv --logger wandb (or --logger csv,wandb) appends train.logger="csv,wandb"."""

    def __call__(self, parser, namespace, value, option_string=None):
        names = [*getattr(namespace, "logger_names", []), *name_list(value)]
        namespace.logger_names = names
        overrides = list(getattr(namespace, self.dest) or [])
        setattr(namespace, self.dest, overrides + [f"train.logger={json.dumps(','.join(names))}"])


def path(text: str) -> str:
    """A file or directory path: any text the file system can hold (no NUL byte)."""
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"a path cannot contain a NUL byte, got {text!r}")
    return text


def positive_int(text: str) -> int:
    """An integer >= 1 (counts, lengths, sizes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def seed(text: str) -> int:
    """A seed: an integer in [0, MAX_SEED]."""
    from mannlab.config import MAX_SEED

    return _bounded_integer(text, 0, MAX_SEED, f"an integer in [0, {MAX_SEED}]")


def int_list(text: str, low: int = 0) -> list[int]:
    """Comma-separated integers >= ``low`` (seeds; lengths with positive_int_list)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    if min(values) < low:
        raise argparse.ArgumentTypeError(f"expected integers >= {low}, got {text!r}")
    return values


def positive_int_list(text: str) -> list[int]:
    return int_list(text, low=1)


def name_list(text: str) -> list[str]:
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated names")
    return names


def add_device(parser: argparse.ArgumentParser) -> None:
    """--device and --precision, the shortcuts of train.device and train.precision."""
    parser.add_argument(
        "--device",
        metavar="auto|cpu|cuda|mps",
        help="where to train (train.device; default auto: the fastest path here for the "
        "model, said in one line: a GPU for the plain RNNs and for memory models with GPU "
        "kernels, else the CPU; cuda:N picks a GPU)",
    )
    parser.add_argument(
        "--precision",
        choices=("32", "bf16-mixed", "16-mixed"),
        help="train.precision: 32 (default), or mixed precision under "
        "torch.autocast with the loss in float32 (16-mixed: CUDA only)",
    )


def add_compute(parser: argparse.ArgumentParser) -> None:
    """--threads and --max-minutes, the shortcuts of train.threads and train.max_minutes."""
    parser.add_argument(
        "--threads",
        type=non_negative_int,
        metavar="N",
        help="torch CPU threads for the run (train.threads; default 1, the fastest for these "
        "small recurrent models; 0 keeps torch's default)",
    )
    parser.add_argument(
        "--max-minutes",
        type=non_negative_float,
        metavar="M",
        help="also stop after M minutes (train.max_minutes; train.budget_clock=cpu counts CPU "
        "time); the run ends at train.steps or M minutes, whichever comes first",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved run config (TOML) and exit without training",
    )


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _bounded_integer(text, 0, float("inf"), "an integer >= 0")


def _bounded_integer(text: str, low: int, high: float, expected: str) -> int:
    """An integer in [low, high], else an argparse error saying it ``expected`` that."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def shortcut_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The train.* values --device, --precision, --threads and --max-minutes set."""
    given = {
        "device": args.device,
        "precision": args.precision,
        "threads": args.threads,
        "max_minutes": args.max_minutes,
    }
    return {k: v for k, v in given.items() if v is not None}
