"""The bAbI fact encoder: a GRU reads each step's sentence (word ids) into one fact vector,
and the registered model reads the fact vectors (the D-NTM paper, appendix A.1.1).

The task (mannlab.tasks.babi with fact_encoder "gru" or "bigru") feeds word ids and flags;
``fact_encoded`` puts any registered model behind the encoder so the two train jointly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from mannlab.models import build_model
from mannlab.models.base import Model
from mannlab.wrappers.wrapped import ModelWrapper


def fact_encoded(task: Any, name: str, **kwargs: Any) -> "FactEncoded":
    """The registered model ``name`` reading ``task``'s sentences through a GRU fact encoder
    sized by ``task.sentence_encoding``."""
    spec = task.sentence_encoding
    model = build_model(name, spec["fact_size"] + spec["flags"], task.output_size, **kwargs)
    encoder = GRUFactEncoder(
        spec["vocabulary_size"], spec["word_size"], spec["fact_size"], bidirectional=spec["bidirectional"]
    )
    return FactEncoded(encoder, model, spec["sentence_length"])


class GRUFactEncoder(nn.Module):
    """A sentence of word ids -> one fact vector: embedding, GRU, the GRU's state after the
    last word (the D-NTM paper, appendix A.1.1). Id 0 is padding; a sentence without words
    (an answer step, padding steps) gives the zero vector.

    ``bidirectional``: two GRUs of fact_size / 2, the fact vector the forward state after the
    last word and the backward state after the first. A one-direction state keeps the last
    words of a bAbI sentence (the location) and loses the first (the person), so no memory
    read can find "where is Mary"'s fact; the backward state keeps the person."""

    def __init__(self, vocabulary_size: int, word_size: int, fact_size: int, bidirectional: bool = False):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary_size + 1, word_size, padding_idx=0)
        directions = 2 if bidirectional else 1
        if fact_size % directions:
            raise ValueError(f"a bidirectional encoder needs an even fact_size, got {fact_size}")
        self.gru = nn.GRU(word_size, fact_size // directions, batch_first=True, bidirectional=bidirectional)
        self.fact_size = fact_size

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (N, L) int64, words first then zeros -> (N, fact_size)."""
        lengths = (ids > 0).sum(1)
        facts = torch.zeros(
            ids.shape[0], self.fact_size, dtype=self.embedding.weight.dtype, device=ids.device
        )
        rows = torch.nonzero(lengths).squeeze(1)
        if rows.numel():
            packed = pack_padded_sequence(
                self.embedding(ids[rows]), lengths[rows].cpu(), batch_first=True, enforce_sorted=False
            )
            _, last = self.gru(packed)  # (directions, n, .): the state after each end word
            facts = facts.index_copy(0, rows, torch.cat(tuple(last), dim=-1))
        return facts


class FactEncoded(ModelWrapper):
    """``model`` reading facts encoded by ``encoder``: inputs ``(B, T, L + F)`` hold the word
    ids of one sentence per step (L channels) and F flag channels; the model sees
    ``[encoder(ids); flags]``. Called like the model (``y, state[, trace] = m(x, state,
    return_trace)``); the trainer's interface (``initial_state``, ``begin_step``, ``aux_loss``,
    ...) is the model's (ModelWrapper)."""

    def __init__(self, encoder: nn.Module, model: Model, sentence_length: int):
        super().__init__()
        self.encoder = encoder
        self.model = model
        self.sentence_length = sentence_length

    @property
    def wrapped(self) -> Model:
        return self.model

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., L + F) word ids and flags -> (..., fact_size + F) fact vectors and flags."""
        length = self.sentence_length
        ids = x[..., :length].round().long()
        facts = self.encoder(ids.reshape(-1, length)).reshape(*x.shape[:-1], -1)
        return torch.cat([facts.to(x.dtype), x[..., length:]], dim=-1)

    def forward(self, x: torch.Tensor, state: Any = None, return_trace: bool = False):
        return self.model(self.encode(x), state, return_trace=return_trace)
