"""The `mannlab` command: argument parsing and dispatch, one module per group of commands.

    training   train, run          results   eval, plot, compare, report
    recipes    recipes             analyses  simulate, gradflow

Every command is one function call a user can make from Python as well.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import sys
from typing import NoReturn, Sequence

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
    # torch loads with the command, not for --help
    from mannlab.training.interrupts import caused_by_interrupt
    from mannlab.training.update import DivergedError

    try:
        return args.func(args)
    except BrokenPipeError:
        _reader_gone()
    except USER_ERRORS as exc:
        _fail(exc, 2, args.debug)
    except DivergedError as exc:
        _fail(exc, 1, args.debug)
    except KeyboardInterrupt:
        _interrupted(args, argv)
    except Exception as exc:  # noqa: BLE001 - a bug or the system (disk full): one line still
        if caused_by_interrupt(exc):  # Ctrl-C inside a compiled kernel (eval, gradflow, ...)
            _interrupted(args, argv)
        _fail(exc, 1, args.debug, unexpected=True)


def _interrupted(args: argparse.Namespace, argv: Sequence[str] | None) -> NoReturn:
    """Ctrl-C: say how to go on. A training interrupted before its first checkpoint has
    nothing to resume, so the command that starts it again is said too."""
    message = "interrupted; continue a run with --resume (from its last checkpoint)"
    if getattr(args, "command", None) in ("train", "run") and not getattr(args, "resume", False):
        again = shlex.join(["mannlab", *(sys.argv[1:] if argv is None else argv)])
        message += f", or, if it stopped before its first checkpoint, start it again: {again}"
    print(f"\nmannlab: {message}", file=sys.stderr)
    raise SystemExit(130) from None


def _reader_gone() -> NoReturn:
    """The reader of stdout closed it (``mannlab recipes | head -1``): stop quietly, as Unix
    tools do, with 128 + SIGPIPE; stdout goes to devnull so that Python's flush at exit does
    not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(141)


class Parser(argparse.ArgumentParser):
    """argparse with close matches suggested for a mistyped command or option."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        command = getattr(parsed, "command", None)
        if extras and command is not None and self._subparsers is not None:
            # the top-level parser reports what a command left over: suggest that command's options
            sub = next(
                a for a in self._subparsers._group_actions if isinstance(a, argparse._SubParsersAction)
            )
            hints = _option_hints(extras, sub.choices[command])
            if hints:
                self.error(f"unrecognized arguments: {' '.join(extras)}{hints}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '?([^',)]+)'?", message)
        if choice:
            valid = [c for action in self._actions if action.choices for c in action.choices]
            close = difflib.get_close_matches(choice.group(1), [str(c) for c in valid], n=3)
            if close:
                message += f"; did you mean {' or '.join(close)}?"
        super().error(message)


def _option_hints(extras: list[str], parser: argparse.ArgumentParser) -> str:
    options = list(parser._option_string_actions)
    hints = []
    for extra in extras:
        if extra.startswith("--"):
            close = difflib.get_close_matches(extra.split("=")[0], options, n=2)
            if close:
                hints.append(f"{extra.split('=')[0]}: did you mean {' or '.join(close)}?")
    return f" ({'; '.join(hints)})" if hints else ""


def _fail(exc: BaseException, status: int, debug: bool, unexpected: bool = False) -> NoReturn:
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
    print(f"mannlab: error: {shortened(message)}", file=sys.stderr)
    raise SystemExit(status) from None


#: the longest error message printed whole; longer ones (a pasted file as a model name) are cut
MESSAGE_LIMIT = 2000


def shortened(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` whole up to ``limit`` characters, else its start and end around a note of
    how much was cut."""
    if len(message) <= limit:
        return message
    head, tail = message[: limit * 3 // 4], message[-limit // 4 :]
    return f"{head} ... [{len(message) - len(head) - len(tail)} characters cut] ... {tail}"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mannlab", description=MAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"mannlab {mannlab.__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")

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
