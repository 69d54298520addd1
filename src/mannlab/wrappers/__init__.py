"""Adapters that fit any registered model to what a task feeds.

A task says what its inputs are (``task.input_kind``):

    "features"   float vectors of task.input_size: the model reads them as they are
    "symbols"    integer symbols (char LM): an embedding in front (``CharLM``)
    "sentences"  word ids of one sentence per step (bAbI with a GRU fact encoder): the
                 encoder in front (``FactEncoded``)

so tasks never import models and models never learn about tasks.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from mannlab.models import build_model
from mannlab.wrappers.embedding import CharLM
from mannlab.wrappers.fact_encoder import FactEncoded, GRUFactEncoder, fact_encoded


def model_for_task(task: Any, name: str, **kwargs: Any) -> nn.Module:
    """The registered model ``name`` with ``kwargs``, sized for ``task`` and behind the
    adapter its ``input_kind`` asks for."""
    kind = getattr(task, "input_kind", "features")
    if kind == "symbols":
        return CharLM(task.input_size, name, **kwargs)
    if kind == "sentences":
        return fact_encoded(task, name, **kwargs)
    return build_model(name, task.input_size, task.output_size, **kwargs)


__all__ = ["model_for_task", "CharLM", "FactEncoded", "GRUFactEncoder", "fact_encoded"]
