"""bAbI QA v1.2 (Weston et al. 2015): parsing, task selection, validation split, vocabulary.

File format (one file per task and split, e.g. ``en-10k/qa1_single-supporting-fact_train.txt``)::

    1 Mary moved to the bathroom.
    2 John went to the hallway.
    3 Where is Mary? \\tbathroom\\t1

Lines are numbered from 1 within each story; a line numbered 1 starts a new story. A
question line holds the question, a tab, the answer (one token, or a comma-separated
list as in tasks 8 and 19, kept as one answer class) and a tab, then the line numbers of
its supporting facts. Each question becomes one ``Question`` holding the statements
before it in its story.

    questions = load_babi([1, 4], "en-10k", data_dir="/data")     # {split: [Question, ...]}

The archive is read in place (no extraction) from ``tasks_1-20_v1-2.tar.gz`` or an
unpacked ``tasks_1-20_v1-2`` (or ``en``/``en-10k``) directory, downloaded only with
``download=True``; see ``mannlab.data.download``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from mannlab.data.download import RemoteFile, decode_text, locate, read_members
from mannlab.errors import DataError

# No checksum of the archive is published by its authors and no verified copy of the
# canonical archive was at hand to pin one from: its size is checked, and the download
# prints its SHA-256.
ARCHIVE = RemoteFile("https://dl.fbaipublicfiles.com/babi/tasks_1-20_v1-2.tar.gz", size=11_745_123)
LANGUAGES = ("en", "en-10k")
#: size limits of one task file and of all files read at once (the largest published
#: file, en-10k qa19 train, is 2,475,046 bytes; 20 tasks x 2 splits stay under 40 MB)
MAX_FILE_BYTES = 32 << 20
MAX_TOTAL_BYTES = 256 << 20
TASK_NAMES = {
    1: "single-supporting-fact",
    2: "two-supporting-facts",
    3: "three-supporting-facts",
    4: "two-arg-relations",
    5: "three-arg-relations",
    6: "yes-no-questions",
    7: "counting",
    8: "lists-sets",
    9: "simple-negation",
    10: "indefinite-knowledge",
    11: "basic-coreference",
    12: "conjunction",
    13: "compound-coreference",
    14: "time-reasoning",
    15: "basic-deduction",
    16: "basic-induction",
    17: "positional-reasoning",
    18: "size-reasoning",
    19: "path-finding",
    20: "agents-motivations",
}
_LINE = re.compile(r"(\d{1,9}) (.*)")  # bounded: int() refuses numbers of 4,300+ digits
_WORD = re.compile(r"[a-z0-9']+")


@dataclass(frozen=True)
class Question:
    """One question with its story: ``facts`` are the statements before it (tokenised),
    ``supporting`` indexes into ``facts``; ``task`` is the bAbI task number."""

    facts: tuple[tuple[str, ...], ...]
    question: tuple[str, ...]
    answer: str
    supporting: tuple[int, ...]
    task: int


def tokenize(sentence: str) -> tuple[str, ...]:
    """Lower-cased words; punctuation is dropped ("Where is Mary?" -> where, is, mary)."""
    return tuple(_WORD.findall(sentence.lower()))


def parse(text: str, source: str, task: int) -> list[Question]:
    """The questions of one bAbI file's ``text``; ``source`` names the file in errors.

    Raises DataError naming the file and line for a line without a number, a number that
    does not continue the story, a question without tabs, answer or valid supporting ids.
    """
    questions: list[Question] = []
    facts: list[tuple[str, ...]] = []
    fact_at_line: dict[int, int] = {}  # line number in the story -> index into facts
    previous = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}, line {lineno}"
        if "\x00" in line:  # a damaged copy; the tokenizer would silently drop it
            raise DataError(f"{where}: a NUL byte (\\x00) in the line; a bAbI file is plain text")
        match = _LINE.fullmatch(line.rstrip("\r"))
        if match is None:
            raise DataError(f"{where}: expected '<number> <sentence>', got {line!r}")
        number, body = int(match.group(1)), match.group(2)
        if number == 1:
            facts, fact_at_line = [], {}
        elif number != previous + 1:
            raise DataError(
                f"{where}: line number {number} does not follow {previous} "
                f"(numbers restart at 1 for each story)"
            )
        previous = number
        if "\t" not in body:
            if "?" in body:  # bAbI statements never ask: a question that lost its tabs
                raise DataError(
                    f"{where}: a question must be '<question>\\t<answer>\\t<supporting ids>' "
                    f"(tab-separated), got {body!r}"
                )
            fact_at_line[number] = len(facts)
            facts.append(tokenize(body))
            continue
        parts = body.split("\t")
        if len(parts) != 3 or not parts[1].strip():
            raise DataError(
                f"{where}: a question must be '<question>\\t<answer>\\t<supporting ids>', got {body!r}"
            )
        try:
            ids = [int(i) for i in parts[2].split()]
            supporting = tuple(fact_at_line[i] for i in ids)
        except (ValueError, KeyError):
            raise DataError(
                f"{where}: supporting ids must be numbers of earlier statements of "
                f"the story, got {parts[2]!r}"
            ) from None
        questions.append(
            Question(tuple(facts), tokenize(parts[0]), parts[1].strip().lower(), supporting, task)
        )
    return questions


def task_file_pattern(task: int, language: str, split: str) -> re.Pattern:
    """Matches the archive path of task ``task``'s ``split`` file in ``language``."""
    return re.compile(rf"(^|.*/){re.escape(language)}/qa{task}_[a-z-]+_{split}\.txt$")


def load_babi(
    tasks: Iterable[int],
    language: str = "en-10k",
    data_dir: str | None = None,
    splits: Iterable[str] = ("train", "test"),
    fetch=None,
    download: bool = False,
) -> dict[str, list[Question]]:
    """Questions of the given task numbers, by split ("train", "test"), read in one pass
    (``download``: fetch the archive when no copy is found, else MissingData says how).

    A task whose file is missing from the archive raises DataError naming it (the copy on
    this project's machines lacks en-10k qa3 train).
    """
    tasks, splits = sorted(set(tasks)), list(splits)
    check_tasks(tasks, language)
    if data_dir is not None and Path(data_dir).is_dir() and Path(data_dir).name in LANGUAGES:
        # the en or en-10k directory itself was given (resolved: it may be a symlink)
        data_dir = str(Path(data_dir).resolve().parent)
    source = locate(
        "babi", ARCHIVE, data_dir, extracted=("tasks_1-20_v1-2", *LANGUAGES), fetch=fetch, download=download
    )
    if source.is_dir() and source.name in LANGUAGES:
        source = source.parent
    wanted = {(t, s): task_file_pattern(t, language, s) for t in tasks for s in splits}
    files = read_members(
        source,
        lambda name: any(p.match(name) for p in wanted.values()),
        MAX_FILE_BYTES,
        "bAbI task files of a few MB (the largest published one, en-10k qa19 train, has 2,475,046 bytes)",
        MAX_TOTAL_BYTES,
    )
    out: dict[str, list[Question]] = {s: [] for s in splits}
    for (task, split), pattern in wanted.items():
        names = [n for n in files if pattern.match(n)]
        if not names:
            raise DataError(
                f"{source} has no {language} file for bAbI task {task} "
                f"({TASK_NAMES[task]}), split {split}; leave the task out or use "
                f"a complete copy of {ARCHIVE.name}"
            )
        name = sorted(names)[0]
        where = f"{Path(source) / name}"
        questions = parse(decode_text(files[name], where), where, task)
        if not questions:
            raise DataError(
                f"{where}: no questions (a bAbI file has lines '<number> <question>\\t<answer>\\t"
                f"<supporting ids>' among the facts of each story); restore it from a copy of {ARCHIVE.name}"
            )
        out[split].extend(questions)
    return out


def check_tasks(tasks: list[int], language: str) -> None:
    """DataError unless ``tasks`` are bAbI task numbers and ``language`` is known."""
    if language not in LANGUAGES:
        raise DataError(f"bAbI language must be one of {', '.join(LANGUAGES)}, got {language!r}")
    bad = [t for t in tasks if t not in TASK_NAMES]
    if not tasks or bad:
        raise DataError(f"bAbI tasks are numbers 1-20, got {list(tasks)}")


def validation_split(
    questions: list[Question], fraction: float = 0.1, seed: int = 0
) -> tuple[list[Question], list[Question]]:
    """(train, valid): a seeded random ``fraction`` of each task's questions is held out."""
    rng = np.random.default_rng(seed)
    train: list[Question] = []
    valid: list[Question] = []
    for task in sorted({q.task for q in questions}):
        items = [q for q in questions if q.task == task]
        held = set(rng.permutation(len(items))[: int(round(fraction * len(items)))].tolist())
        for i, q in enumerate(items):
            (valid if i in held else train).append(q)
    return train, valid


def vocabulary(questions: Iterable[Question]) -> tuple[list[str], list[str]]:
    """(words, answers): sorted word vocabulary of facts and questions, sorted answer classes."""
    words: set[str] = set()
    answers: set[str] = set()
    for q in questions:
        for fact in q.facts:
            words.update(fact)
        words.update(q.question)
        answers.add(q.answer)
    return sorted(words), sorted(answers)
