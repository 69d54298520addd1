"""Single-Stream Temporal Action Proposals (SST, Buch et al. CVPR 2017) over any registered
model: ARMIN section 4.3 and appendix C.3.

SST reads a video's snippet features (C3D, one vector per 16 frames) once, in one pass, and
at every step t scores K proposals that all end at t, of lengths 1..K steps: the encoder's
output head gives K anchor logits per step. SST's encoder is a GRU; ARMIN's MA-SST puts an
ARMIN cell in its place and compares an LSTM. Appendix C.3 replaces SST's PCA of the 4096-d
C3D features by a fully connected layer to 256 units and applies dropout (0.2) to the input
and output layers (appendix C: "dropout to the input and output layers"), so:

    u_t = d_in(W_p x_t + b_p)                   projection (256 in C.3), input dropout
    s_t = model(u_1..t)                          any registered model, its own state
    y_t = head(d_out(features_t))                the model's head: K anchor logits

The options of the wrapper (``projection_size``, ``input_dropout``, ``output_dropout``) are
given with the model's in the run's [model] table, as the char-LM embedding's are: they are
part of the network, not of the data. The state is the model's own, so a long video runs in
chunks with the state carried (evaluation does so) exactly as in one call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mannlab.models.base import check_input
from mannlab.wrappers.front_end import FrontEnd


class SST(FrontEnd):
    """``logits, state = sst(features (B, T, feature_size), state)``: an input projection with
    dropout, then the registered model ``model`` whose head gives ``anchors`` logits per step
    (see the module docstring). Called like a model (``return_trace`` too); the trainer's
    interface (``initial_state``, ``begin_step``, ``aux_loss``, ...) is the model's
    (ModelWrapper)."""

    OPTIONS = ("projection_size", "input_dropout", "output_dropout")
    LABEL = "SST"
    projection: nn.Linear  # the front layer (FrontEnd.build)

    def __init__(
        self,
        feature_size: int,
        anchors: int,
        model: str = "gru",
        projection_size: int = 256,
        input_dropout: float = 0.0,
        output_dropout: float = 0.0,
        **model_kwargs: Any,
    ):
        super().__init__()
        self.input_size, self.anchors = feature_size, anchors
        self.build(
            "projection",
            lambda: nn.Linear(feature_size, projection_size),
            projection_size,
            model,
            anchors,
            input_dropout,
            output_dropout,
            model_kwargs,
        )

    def forward(self, x: torch.Tensor, state: Any = None, return_trace: bool = False):
        """x (B, T, feature_size) -> (B, T, anchors) logits, state[, trace]."""
        x = check_input(self, x, "(batch, time, features)", self.input_size)
        return self.core(self.input_dropout(self.projection(x)), state, return_trace=return_trace)
