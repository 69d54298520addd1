"""`mannlab recipes`: the packaged recipes, one line each, or one recipe's file."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap

from mannlab import recipes

RECIPES_HELP = """\
List the recipes shipped with mannlab (the papers' experiments as run configs), one line
each, or print one recipe's TOML to copy and change. Run one by name from anywhere:
  mannlab run ntm-copy-lstm --set train.steps=500
"""


def add_commands(command) -> None:
    parser = command(
        "recipes",
        "list the packaged recipes, or print one",
        RECIPES_HELP,
        "examples:\n  mannlab recipes\n"
        "  mannlab recipes ntm-copy-lstm > my.toml   # then: mannlab run my.toml\n",
    )
    parser.add_argument("name", nargs="?", help="print this recipe's TOML (e.g. table1/ntm-copy)")
    parser.set_defaults(func=cmd_recipes)


def cmd_recipes(args: argparse.Namespace) -> int:
    if args.name:
        print(recipes.path(args.name).read_text(), end="")
        return 0
    names = recipes.names()
    width = max(map(len, names))
    # the whole first sentence: on a terminal wrapped under the name column, else one line each
    columns = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    for name in names:
        line = f"{name:<{width}}  {recipes.describe(recipes.path(name), width=10_000)}"
        if columns and columns > width + 30:
            line = textwrap.fill(line, columns - 1, subsequent_indent=" " * (width + 2))
        print(line)
    print(f"\n{len(names)} recipes; run one with `mannlab run NAME`, print one with `mannlab recipes NAME`")
    return 0
