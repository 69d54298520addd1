"""`mannlab recipes`: the packaged recipes, one line each, or one recipe's file."""

from __future__ import annotations

import argparse
import re
import shutil
import textwrap
import tomllib

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


#: the longest description shown; a longer first sentence is cut at a clause, never inside
#: parentheses or quotes
DESCRIPTION_LIMIT = 150


def cmd_recipes(args: argparse.Namespace) -> int:
    if args.name:
        print(recipes.path(args.name).read_text(), end="")
        return 0
    names = recipes.names()
    width = max(map(len, names))
    texts = distinguished({name: short(recipes.describe(recipes.path(name), width=10_000)) for name in names})
    columns = max(shutil.get_terminal_size((100, 24)).columns, width + 40)
    for name in names:
        line = f"{name:<{width}}  {texts[name]}"
        print(textwrap.fill(line, columns - 1, subsequent_indent=" " * (width + 2), break_on_hyphens=False))
    print(f"\n{len(names)} recipes; run one with `mannlab run NAME`, print one with `mannlab recipes NAME`")
    return 0


def short(sentence: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """``sentence`` whole when it fits ``limit``; else without its quoted titles, then without
    its parenthesised asides, and if still too long cut after its last clause (a ":", ";" or
    "," outside parentheses and quotes) or word that fits, never inside parentheses."""
    for shorter in (_QUOTED.sub("", sentence), _ASIDE.sub("", _QUOTED.sub("", sentence))):
        if len(sentence) <= limit:
            return sentence
        sentence = _tidy(shorter)
    if len(sentence) <= limit:
        return sentence
    depth, quoted, clause, word = 0, False, 0, 0
    for i, char in enumerate(sentence[:limit]):
        depth += {"(": 1, ")": -1}.get(char, 0)
        quoted ^= char == '"'
        if depth == 0 and not quoted:
            if char in ":;,":
                clause = i
            elif char == " ":
                word = i
    cut = clause or word or limit
    return sentence[:cut].rstrip(" :;,") + " ..."


_QUOTED = re.compile(r'\s*"[^"]*"')
_ASIDE = re.compile(r"\s*\([^()]*\)")


def _tidy(text: str) -> str:
    """``text`` with what a removed part leaves behind closed up ("A, (b)" -> "A (b)")."""
    text = re.sub(r"\s+([,:;])", r"\1", " ".join(text.split()))
    text = re.sub(r",(?= \()", "", text)
    return text[:-2] + "." if text.endswith(" .") else text


def distinguished(texts: dict[str, str]) -> dict[str, str]:
    """``texts`` with recipes that share a description told apart by the settings in which
    their files differ (e.g. a batched variant's train.batch_size), as few as tell them apart."""
    groups: dict[str, list[str]] = {}
    for name, text in texts.items():
        groups.setdefault(text, []).append(name)
    out = dict(texts)
    for group in (g for g in groups.values() if len(g) > 1):
        settings = {name: _flat(recipes.path(name)) for name in group}
        keys = sorted({k for s in settings.values() for k in s} - {"run_dir"}, key=_key_order)
        chosen: list[str] = []
        for key in keys:
            split = {tuple(repr(settings[n].get(k)) for k in chosen + [key]) for n in group}
            if len(split) > len({tuple(repr(settings[n].get(k)) for k in chosen) for n in group}):
                chosen.append(key)
            if len(split) == len(group):
                break
        for name in group:
            shown = ", ".join(f"{k} = {settings[name][k]}" for k in chosen if k in settings[name])
            out[name] = f"{texts[name]} [{shown}]" if shown else texts[name]
    return out


def _flat(path) -> dict[str, object]:
    """The recipe's settings as dotted keys ("train.batch_size")."""
    values = tomllib.loads(path.read_text())
    flat: dict[str, object] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _key_order(key: str) -> tuple[int, str]:
    """The model, then batch size and steps: what tells two variants of an experiment apart."""
    first = ("model.name", "task.name", "train.batch_size", "train.steps")
    return (first.index(key) if key in first else len(first), key)
