"""One optimizer update from a loss, shared by every batch source: the NaN guard, the
gradient clipping and the auxiliary losses of models with their own estimators."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from mannlab.models.base import Model
from mannlab.training import distributed


class DivergedError(RuntimeError):
    """Training diverged (train.diverge_*); summary.json records it."""


class NonFiniteLossError(DivergedError):
    """The loss or the gradient became NaN or infinite; the weights were not updated."""


def model_aux_loss(
    model: Model,
    trace: Any,
    step_nll: torch.Tensor,
    score: Callable[[torch.Tensor], torch.Tensor],
    outputs_per_step: int,
) -> torch.Tensor:
    """``model.aux_loss(trace, step_nll, outputs_per_step, reducer)``, ``outputs_per_step``
    being what the task loss averages over per scored step (output bits for BCE, 1 for
    cross-entropy) and ``reducer`` the ranks' slices under data-parallel training (the
    estimators' batch statistics are the global batch's: collectives, so every rank calls
    this alike); models with their own auxiliary predictions (``aux_loss_scores``: TARDIS
    eq. 17) also get ``score``, logits -> per-step NLL on the targets."""
    extra: dict[str, Any] = {"score": score} if model.aux_loss_scores else {}
    return model.aux_loss(
        trace, step_nll, outputs_per_step=outputs_per_step, reducer=distributed.batch_reducer(), **extra
    )


def sequence_loss(
    model: Model,
    task: Any,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    scored: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss to minimise, task loss) of one sampled batch: ``task.loss`` plus, for a model
    with ``uses_aux_loss``, its auxiliary loss rewarded by the detached per-step NLL.
    ``scored``: under data-parallel training, the global batch's ``mask.sum()`` (every
    rank's rows), which saves a collective; all-reduced when not given."""
    if model.uses_aux_loss:
        logits, _, trace = model(inputs, return_trace=True)
        task_loss = _global_mean(task.loss(logits, targets, mask), mask, scored)
        # the per-step NLL is a reward signal for the model's estimator, not a path for gradients
        step_nll = task.step_nll(logits, targets, mask).detach()
        return task_loss + model_aux_loss(
            model, trace, step_nll, lambda out: task.step_nll(out, targets, mask), task.outputs_per_step
        ), task_loss
    logits, _ = model(inputs)
    loss = _global_mean(task.loss(logits, targets, mask), mask, scored)
    return loss, loss


def _global_mean(loss: torch.Tensor, mask: torch.Tensor, scored: torch.Tensor | None) -> torch.Tensor:
    """A task loss, a mean over this process's scored terms (``mask``'s count times a
    constant), rescaled under data-parallel training so that DDP's mean over the processes
    is the mean over the global batch's scored terms, whatever each slice scores."""
    if not distributed.active():
        return loss
    return loss * distributed.global_scale(mask.to(loss.dtype).sum(), scored)


def apply_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    clip: float | None,
    scaler: torch.amp.GradScaler | None = None,
    reported: torch.Tensor | Callable[[], torch.Tensor] | None = None,
) -> None:
    """Backward, clip the global gradient norm to ``clip`` (0/None: measure only), step.
    Raises NonFiniteLossError, before the weights change, on a non-finite loss or norm.
    With a ``scaler`` (float16 training) a non-finite norm is a loss-scale overflow instead:
    the scaler skips the step and lowers the scale. ``reported``: the loss the finiteness
    check looks at instead of ``loss`` (the global batch's, the same on every rank, so that
    all ranks stop together); a function giving it is called after the backward, so that
    the all-reduce behind it (distributed.mean_over_ranks_later) overlaps the backward."""
    if not callable(reported):
        _check_loss(loss if reported is None else reported)
    optimizer.zero_grad(set_to_none=True)
    (loss if scaler is None else scaler.scale(loss)).backward()
    if callable(reported):
        _check_loss(reported())
    if scaler is not None:
        scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip or math.inf)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
        return
    if not torch.isfinite(norm):
        raise NonFiniteLossError(f"the gradient norm is {norm.item()}")
    optimizer.step()


def _check_loss(value: torch.Tensor) -> None:
    if not torch.isfinite(value):
        raise NonFiniteLossError(f"the loss is {value.item()}")
