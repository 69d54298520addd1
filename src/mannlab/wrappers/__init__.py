"""Adapters that fit any registered model to what a task feeds.

A task says what its inputs are (``task.input_kind``):

    "features"   float vectors of task.input_size: the model reads them as they are
    "symbols"    integer symbols (char LM): an embedding in front (``CharLM``)
    "sentences"  word ids of one sentence per step (bAbI with a GRU fact encoder): the
                 encoder in front (``FactEncoded``)
    "snippets"   a video's snippet features, scored by K proposal anchors per step (temporal
                 action proposals): SST's input projection in front (``SST``)

so tasks never import models and models never learn about tasks. Each adapter forwards the
trainer's interface of its model by name (wrapped.py: ``ModelWrapper``).
"""

from __future__ import annotations

from typing import Any

from mannlab.models import build_model
from mannlab.models.base import Model
from mannlab.wrappers.embedding import CharLM
from mannlab.wrappers.fact_encoder import FactEncoded, GRUFactEncoder, fact_encoded
from mannlab.wrappers.sst import SST
from mannlab.wrappers.wrapped import ModelWrapper


def model_for_task(task: Any, name: str, **kwargs: Any) -> Model:
    """The registered model ``name`` with ``kwargs``, sized for ``task`` and behind the
    adapter its ``input_kind`` asks for."""
    kind = task.input_kind
    if kind == "symbols":
        return CharLM(task.input_size, name, **kwargs)
    if kind == "sentences":
        return fact_encoded(task, name, **kwargs)
    if kind == "snippets":
        return SST(task.input_size, task.output_size, name, **kwargs)
    return build_model(name, task.input_size, task.output_size, **kwargs)


__all__ = ["model_for_task", "ModelWrapper", "CharLM", "FactEncoded", "GRUFactEncoder", "SST", "fact_encoded"]
