"""SNLI 1.0 (Bowman et al. 2015): premise, hypothesis and a 3-way label.

The canonical ``snli_1.0.zip`` holds ``snli_1.0/snli_1.0_{train,dev,test}.jsonl``: one JSON
object per line with ``sentence1`` (premise), ``sentence2`` (hypothesis) and ``gold_label``
("entailment", "neutral", "contradiction", or "-" where the annotators did not agree;
those pairs are dropped, as usual). No offline copy exists on this project's machines:
the loader is tested on generated files in this format.

    pairs = load_snli(["train"], data_dir)      # {"train": [Pair(premise, hypothesis, label), ...]}
    pairs = load_snli(download=True)            # downloads snli_1.0.zip when no copy is found
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from mannlab.data.download import RemoteFile, decode_text, locate, read_members
from mannlab.errors import DataError

# SHA-256 and size as TensorFlow Datasets pins them (the authors publish none).
ARCHIVE = RemoteFile(
    "https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
    sha256="afb3d70a5af5d8de0d9d81e2637e0fb8c22d1235c2749d83125ca43dab0dbd3e",
    size=94_550_081,
)
LABELS = ("entailment", "neutral", "contradiction")
SPLIT_FILES = {"train": "snli_1.0_train.jsonl", "valid": "snli_1.0_dev.jsonl", "test": "snli_1.0_test.jsonl"}
#: the largest split file read (the published train .jsonl is a few hundred MB)
MAX_BYTES = 1 << 30
_WORD = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")


@dataclass(frozen=True)
class Pair:
    """Tokenised premise and hypothesis, label index into ``LABELS``."""

    premise: tuple[str, ...]
    hypothesis: tuple[str, ...]
    label: int


def tokenize(sentence: str) -> tuple[str, ...]:
    """Lower-cased words and punctuation marks."""
    return tuple(_WORD.findall(sentence.lower()))


def parse_jsonl(text: str, source: str) -> list[Pair]:
    """Pairs of a SNLI .jsonl text; DataError naming file and line for a malformed line."""
    pairs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            label, premise, hypothesis = row["gold_label"], row["sentence1"], row["sentence2"]
        # ValueError: bad JSON or an integer of 4,300+ digits; RecursionError: deep nesting
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise DataError(
                f"{source}, line {lineno}: expected a JSON object with gold_label, "
                f"sentence1 and sentence2 ({type(exc).__name__}: {exc})"
            ) from None
        if label == "-":
            continue
        if label not in LABELS:
            raise DataError(
                f"{source}, line {lineno}: gold_label must be one of {', '.join(LABELS)} or '-', "
                f"got {label!r}"
            )
        if not isinstance(premise, str) or not isinstance(hypothesis, str):
            raise DataError(
                f"{source}, line {lineno}: sentence1 and sentence2 must be strings, got "
                f"{type(premise).__name__} and {type(hypothesis).__name__}"
            )
        pairs.append(Pair(tokenize(premise), tokenize(hypothesis), LABELS.index(label)))
    return pairs


def load_snli(
    splits: Iterable[str] = ("train", "valid", "test"),
    data_dir: str | None = None,
    fetch=None,
    download: bool = False,
) -> dict[str, list[Pair]]:
    """Pairs by split ("valid" is SNLI's dev set) from the zip or its unpacked directory."""
    splits = list(splits)
    unknown = [s for s in splits if s not in SPLIT_FILES]
    if unknown:
        raise DataError(f"SNLI splits are {', '.join(SPLIT_FILES)}, got {unknown}")
    source = locate("snli", ARCHIVE, data_dir, extracted=("snli_1.0",), fetch=fetch, download=download)
    names = {SPLIT_FILES[s]: s for s in splits}
    files = read_members(
        source,
        lambda name: name.rsplit("/", 1)[-1] in names,
        MAX_BYTES,
        f"SNLI 1.0 .jsonl split files of at most {MAX_BYTES:,} bytes each (train is a few hundred MB)",
        3 * MAX_BYTES,
    )
    out = {}
    for name, split in names.items():
        found = sorted(n for n in files if n.rsplit("/", 1)[-1] == name)
        if not found:
            raise DataError(f"{source} has no {name}")
        where = f"{source}/{found[0]}"
        out[split] = parse_jsonl(decode_text(files[found[0]], where), where)
    return out


def vocabulary(pairs: Iterable[Pair], size: int) -> list[str]:
    """The ``size`` most frequent words (ties by spelling), most frequent first."""
    counts = Counter(w for p in pairs for w in (*p.premise, *p.hypothesis))
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]
