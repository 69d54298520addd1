"""What the char-LM embedding and SST's input projection share: a front layer with input
dropout, then a registered model (``core``) whose output head gets output dropout.

The output dropout is a forward pre-hook on the core's head, so it works for every
registered model without each model having the option. The hook holds the Dropout module
only, not the wrapper (no reference cycle through the hook).
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from mannlab.errors import ConfigError
from mannlab.models import build_model
from mannlab.models.base import Model, SequenceModel, check_positive, check_probability
from mannlab.wrappers.wrapped import ModelWrapper


class FrontEnd(ModelWrapper):
    """Base of the wrappers with a front layer (``build``), wrapping ``core``. Subclasses set
    ``OPTIONS``, their own [model] keys, the front layer's size first, and ``LABEL`` (for
    error messages)."""

    OPTIONS: tuple[str, ...] = ()
    LABEL = ""
    core: SequenceModel

    def build(
        self,
        front_name: str,
        make_front: Callable[[], nn.Module],
        front_size: Any,
        model: str,
        output_size: int,
        input_dropout: Any,
        output_dropout: Any,
        model_kwargs: dict[str, Any],
    ) -> None:
        """Check the options, then set ``front_name`` to ``make_front()`` (made after the
        checks, so that a bad size is a ConfigError, not torch's error), ``input_dropout``,
        ``core`` and ``output_dropout``, in that order (the parameters' order, which an
        optimizer's saved state follows)."""
        check_probability("model.input_dropout", input_dropout)
        check_probability("model.output_dropout", output_dropout)
        check_positive(**{f"model.{self.OPTIONS[0]}": front_size})
        setattr(self, front_name, make_front())
        self.input_dropout = nn.Dropout(input_dropout)
        try:
            self.core = build_model(model, front_size, output_size, **model_kwargs)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (and {self.LABEL}'s own: {', '.join(self.OPTIONS)})") from None
        self.output_dropout = nn.Dropout(output_dropout)
        if output_dropout and self.core.head is not None:  # a head: the output size is given
            dropout = self.output_dropout
            self.core.head.register_forward_pre_hook(lambda _, args: (dropout(args[0]),))

    @property
    def wrapped(self) -> Model:
        return self.core
