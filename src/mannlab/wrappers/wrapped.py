"""What an adapter forwards to the model it wraps: the interface the trainer and evaluation
use besides the forward pass, named one by one (everything else of the model is reached as
``adapter.wrapped.<name>``)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from mannlab.models.base import Model
from mannlab.nn import sampling


class ModelWrapper(Model):
    """Base of the adapters: ``wrapped`` is the registered model behind the adapter, and the
    adapter answers for it ``initial_state``, ``begin_step`` (the per-minibatch schedules),
    ``uses_aux_loss``, ``aux_loss_scores``, ``aux_loss`` and ``kernel_backends``."""

    @property
    def wrapped(self) -> Model:
        raise NotImplementedError(f"{type(self).__name__} names its wrapped model")

    def initial_state(self, batch_size: int, device: Any = None, dtype: Any = None) -> Any:
        return self.wrapped.initial_state(batch_size, device=device, dtype=dtype)

    def begin_step(self, step: int, coin: Optional[Callable[[float], bool]] = None) -> None:
        self.wrapped.begin_step(step, coin)

    @property
    def uses_aux_loss(self) -> bool:
        return bool(self.wrapped.uses_aux_loss)

    @property
    def aux_loss_scores(self) -> bool:
        return bool(self.wrapped.aux_loss_scores)

    def aux_loss(
        self,
        trace: Any,
        step_nll: torch.Tensor,
        outputs_per_step: Optional[int] = None,
        reducer: Optional[sampling.Reducer] = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        return self.wrapped.aux_loss(
            trace, step_nll, outputs_per_step=outputs_per_step, reducer=reducer, **kwargs
        )

    def kernel_backends(self) -> tuple[str, ...]:
        return self.wrapped.kernel_backends()
