"""The character-LM embedding: symbol indices -> an embedding -> any registered model whose
head gives logits over the symbols (ARMIN section 4.2, TARDIS section 8.1).

The task (mannlab.tasks.charlm) feeds symbol indices; ``CharLM`` adapts a model to them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mannlab.wrappers.front_end import FrontEnd


class CharLM(FrontEnd):
    """Embedding -> a registered sequence model (``mannlab.models.build_model``) whose
    output head gives logits over the symbols. ``logits, state = lm(tokens (B, T), state)``.

    ``input_dropout`` drops embedding units, ``output_dropout`` the model's output features
    before its head (both off in eval mode): the "dropout to the input and output layers"
    of ARMIN appendix C, for any model (the head is the model's own, so TARDIS's fusion
    layer and auxiliary predictor stay where they are)."""

    OPTIONS = ("embedding_size", "input_dropout", "output_dropout")
    LABEL = "the char-LM"
    embedding: nn.Embedding  # the front layer (FrontEnd.build)

    def __init__(
        self,
        vocab_size: int,
        model: str = "armin",
        embedding_size: int = 128,
        input_dropout: float = 0.0,
        output_dropout: float = 0.0,
        **model_kwargs: Any,
    ):
        super().__init__()
        self.build(
            "embedding",
            lambda: nn.Embedding(vocab_size, embedding_size),
            embedding_size,
            model,
            vocab_size,
            input_dropout,
            output_dropout,
            model_kwargs,
        )
        self.vocab_size = vocab_size

    def forward(self, tokens: torch.Tensor, state: Any = None, return_trace: bool = False):
        if (
            tokens.dim() != 2
            or tokens.is_floating_point()
            or tokens.is_complex()
            or tokens.dtype == torch.bool
        ):
            raise ValueError(
                f"CharLM expects (batch, time) symbol indices (integers), got "
                f"{tuple(tokens.shape)} {tokens.dtype}"
            )
        return self.core(self.input_dropout(self.embedding(tokens.long())), state, return_trace=return_trace)
