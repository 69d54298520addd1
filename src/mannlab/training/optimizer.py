"""The optimizer of a run: RMSprop (with momentum, as in the NTM paper's implementations) or Adam."""

from __future__ import annotations

from typing import Any

import torch

from mannlab.config import TrainConfig


def make_optimizer(model: torch.nn.Module, train: TrainConfig) -> torch.optim.Optimizer:
    if train.optimizer == "rmsprop":
        return torch.optim.RMSprop(model.parameters(), **hyperparameters(train))
    return torch.optim.Adam(model.parameters(), **hyperparameters(train))


def hyperparameters(train: TrainConfig) -> dict[str, Any]:
    """The optimizer's settings from the config (a resume applies them to the saved state)."""
    common = {"lr": train.lr, "eps": train.eps, "weight_decay": train.weight_decay}
    if train.optimizer == "rmsprop":
        return {**common, "momentum": train.momentum, "alpha": train.alpha}
    return common
