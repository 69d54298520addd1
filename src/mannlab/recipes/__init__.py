"""The recipes shipped with mannlab: the papers' experiments as run configs (TOML).

They are package data (this folder), so `mannlab run ntm-copy-lstm` finds one by name
from anywhere; in a checkout, recipes/ at the repository root is a link to this folder.

    names()                    every recipe name: "ntm-copy-lstm", "table1/ntm-copy", ...
    path("ntm-copy-lstm")      its file
    describe(path)             the one-line description (the recipe's first comment sentence)
    resolve("recipes/x.toml")  a file that exists, else the packaged recipe it names
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from mannlab.errors import ConfigError

FOLDER = Path(__file__).resolve().parent
# a full stop that ends a sentence: at the end, or before a capital ("eq. 17" goes on)
_SENTENCE_END = re.compile(r"\.(?:$|\s+(?=[A-Z]))")


def names() -> list[str]:
    """Every packaged recipe, as its path under this folder without ".toml", sorted with
    the top-level recipes first."""
    files = sorted(FOLDER.rglob("*.toml"), key=lambda p: (len(p.relative_to(FOLDER).parts), p))
    return [p.relative_to(FOLDER).with_suffix("").as_posix() for p in files]


def path(name: str) -> Path:
    """The file of the packaged recipe ``name`` ("ntm-copy-lstm", "table1/ntm-copy"; a
    ".toml" suffix or a leading "recipes/" is accepted)."""
    key = name.removeprefix("recipes/").removesuffix(".toml")
    candidate = FOLDER / f"{key}.toml"
    if key and ".." not in Path(key).parts and candidate.is_file():
        return candidate
    close = difflib.get_close_matches(key, names(), n=5, cutoff=0.6)
    raise ConfigError(
        f"no packaged recipe named {name!r}; "
        + (f"similar recipes: {', '.join(close)}; " if close else "")
        + "`mannlab recipes` lists them all"
    )


def resolve(name_or_path: str | Path) -> Path:
    """The recipe file a command line names: an existing file as it is, else the packaged
    recipe of that name (so `recipes/ntm-copy-lstm.toml` works outside a checkout too). A
    .toml path where something other than a file is (a FIFO, a directory, a link to nowhere)
    is returned too, for the config reader to say what it is."""
    given = Path(name_or_path)
    if given.is_file() or (given.suffix == ".toml" and os.path.lexists(given)):
        return given
    try:
        return path(given.as_posix())
    except ConfigError as exc:
        if given.suffix != ".toml":
            raise
        raise FileNotFoundError(f"config file not found: {given}, and {exc}") from None


def describe(recipe: Path, width: int = 100) -> str:
    """The first sentence of the recipe's leading comment, on one line of at most ``width``
    characters."""
    words: list[str] = []
    for line in recipe.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        # a word broken at the line end ("Memory-" / "Augmented") is joined back
        if words and words[-1].endswith("-") and text:
            words[-1] += text.split()[0]
            text = " ".join(text.split()[1:])
        words.extend(text.split())
        if _SENTENCE_END.search(" ".join(words)):
            break
    sentence = _SENTENCE_END.split(" ".join(words), maxsplit=1)[0]
    sentence += "." if _SENTENCE_END.search(" ".join(words)) else ""
    return sentence if len(sentence) <= width else sentence[: width - 3].rstrip() + "..."
