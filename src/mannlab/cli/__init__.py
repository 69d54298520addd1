"""The `mannlab` command: argument parsing and dispatch, one module per group of commands.

    training   train, run          results   eval, plot, compare, report
    recipes    recipes             analyses  simulate, gradflow

Every command is one function call a user can make from Python as well.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import mannlab
from mannlab.cli import analyses, recipes, results, training
from mannlab.errors import CheckpointError, ConfigError, DataError

USER_ERRORS = (ConfigError, CheckpointError, DataError, FileNotFoundError)
DEBUG_HELP = "on an error, show the Python traceback instead of one line"

MAIN_HELP = """\
Memory-augmented neural networks: train, evaluate and plot.

  mannlab train --model ntm --task copy     train one model on one task
  mannlab run ntm-copy-lstm                      run a recipe over several seeds
  mannlab recipes                                list the recipes, one line each
  mannlab eval runs/ntm-copy-seed0 --lengths 20,40,80
  mannlab plot runs/ntm-copy-seed0
  mannlab simulate wormhole --out runs/wormhole   TARDIS paper figures 3 and 5 (simulated)
  mannlab gradflow lstm ntm --task copy          gradient norm against distance per model

Run `mannlab <command> --help` for the options of each command.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `mannlab` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    from mannlab.training.update import DivergedError  # torch loads with the command, not for --help

    try:
        return args.func(args)
    except USER_ERRORS as exc:
        _fail(exc, 2, args.debug)
    except DivergedError as exc:
        _fail(exc, 1, args.debug)
    except KeyboardInterrupt:
        print(
            "\nmannlab: interrupted; continue a run with --resume (from its last checkpoint)", file=sys.stderr
        )
        raise SystemExit(130) from None
    except Exception as exc:  # noqa: BLE001 - a bug or the system (disk full): one line still
        _fail(exc, 1, args.debug, unexpected=True)


def _fail(exc: BaseException, status: int, debug: bool, unexpected: bool = False) -> None:
    if debug:
        raise exc
    message = str(exc)
    if isinstance(exc, FileNotFoundError) and exc.filename is not None:  # raised by open()
        message = f"file not found: {exc.filename}"
    elif unexpected:
        message = (
            f"{type(exc).__name__}: {message.splitlines()[0] if message else ''} "
            "(rerun with --debug for the traceback)"
        )
    print(f"mannlab: error: {message}", file=sys.stderr)
    raise SystemExit(status) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mannlab", description=MAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"mannlab {mannlab.__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name: str, summary: str, description: str, epilog: str | None = None):
        sub = commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        return sub

    for group in (training, recipes, results, analyses):
        group.add_commands(command)
    return parser
