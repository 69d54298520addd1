"""An adapter that is otherwise its model: attribute reads and writes it does not have itself
reach the wrapped model.

The training loop and evaluation talk to "the model" (``initial_state``, ``aux_loss``,
``uses_aux_loss``, and the switches ``start_minibatch`` sets: the D-NTM curriculum's
``soft_minibatch``, the gumbel ``inverse_temperature``); behind an adapter those are the
wrapped model's, so an adapter forwards them instead of copying each one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class PassThrough:
    """Mixin for an ``nn.Module`` adapter whose wrapped model is the submodule named by
    ``inner``: unknown attributes are read from it, and plain values (not modules or tensors)
    set on the adapter go to it when it has that attribute and the adapter does not."""

    inner: str = "model"

    def __getattr__(self, name: str) -> Any:
        try:
            return nn.Module.__getattr__(self, name)  # parameters, buffers, submodules
        except AttributeError:
            modules = self.__dict__.get("_modules")
            if modules is None or name == self.inner or self.inner not in modules:
                raise
            return getattr(modules[self.inner], name)

    def __setattr__(self, name: str, value: Any) -> None:
        model = self.__dict__.get("_modules", {}).get(self.inner)
        if (
            model is not None
            and name not in self.__dict__
            and not hasattr(type(self), name)
            and not isinstance(value, (nn.Module, torch.Tensor))
            and hasattr(model, name)
        ):
            setattr(model, name, value)
        else:
            nn.Module.__setattr__(self, name, value)
