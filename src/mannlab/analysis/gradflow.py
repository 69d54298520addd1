"""Gradient flow through time: the empirical side of section 5 of the TARDIS paper.

Gulcehre, Chandar, Bengio (2017), eqs. 23-38: in a plain RNN the Jacobian
dh_t1/dh_t0 is a product of t1 - t0 step Jacobians and its norm decays
exponentially with the distance (eq. 25); in a MANN it is Q + R (eq. 29), where
R holds the shorter paths through the memory and need not vanish (eq. 38,
Theorem 1). This module measures, for any model of the library, the norm of

    quantity "output":  J(t1, t0) = dy_t1 / dx_t0        (O x I, Frobenius norm)
    quantity "loss":    g(t1, t0) = dL_t1 / dx_t0         (I, Euclidean norm)

against the distance d = t1 - t0, where y_t1 is the model's output (logits, or
features for models without a head), x_t0 the input at t0 and L_t1 the task's
loss at step t1 (summed over output bits). The input Jacobian stands in for
dh_t1/dh_t0, which has no model-independent definition: it equals
dy_t1/dh_t0 . dh_t0/dx_t0, the product of the readout, the recurrent Jacobian of
eqs. 23/28 and the input projection, so its decay with d is that of eq. 23/28.

Cost: t1 is the last step of the sequence and every t0 comes out of one backward
pass. For "output" the O output components of a sample are O copies of the
sample in one batch (row b*O + o back-propagates y_t1[o]), so a batch of B
samples costs one forward and one backward of a batch of B*O sequences
(``chunk`` bounds the rows per pass). Models run in eval() mode, which is where
models with discrete reads use argmax reads (exact wormholes).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

QUANTITIES = ("output", "loss")
QUANTITY_LABELS = {"output": "||dy_t1 / dx_t0||_F", "loss": "||dL_t1 / dx_t0||"}


class GradientFlow(NamedTuple):
    """Norms against distance: ``distances`` (D,) = 0..max_distance, ``norms`` (S, D) one
    row per sample, ``mean`` and ``sem`` (D,) over samples, ``median`` (D,)."""

    distances: np.ndarray
    norms: np.ndarray
    mean: np.ndarray
    sem: np.ndarray
    median: np.ndarray


def input_gradient_norms(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    max_distance: int,
    quantity: str = "output",
    targets: torch.Tensor | None = None,
    loss_fn: Any = None,
    chunk: int = 16,
) -> np.ndarray:
    """(B, max_distance + 1) norms of dy_t1/dx_t0 (or dL_t1/dx_t0) for t0 = t1 - d.

    Args:
        model: ``y, state = model(x)`` with x (B, T, I), batch first, causal.
        inputs: (B, T, I); t1 = T - 1 (0-based, the last step); needs T > max_distance.
        quantity: "output" (Frobenius norm over the O x I Jacobian) or "loss".
        targets, loss_fn: for "loss": ``loss_fn(logits, targets) -> (B, T)`` per-step
            loss (e.g. the task's ``step_nll`` with an all-ones mask); L_t1 is its column t1.
        chunk: most sequences per forward/backward pass. It bounds memory: the DNC
            (128 x 20 memory) keeps about 75 MB per sequence of 200 steps in float64.
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {', '.join(QUANTITIES)}; got {quantity!r}")
    if inputs.dim() != 3:
        raise ValueError(f"inputs must be (batch, time, features); got shape {tuple(inputs.shape)}")
    steps = inputs.shape[1]
    if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 0:
        raise ValueError(f"max_distance must be an integer >= 0; got {max_distance!r}")
    if steps <= max_distance:
        raise ValueError(
            f"sequences of {steps} steps are too short for distances up to "
            f"{max_distance}: need at least {max_distance + 1} steps (a longer length)"
        )
    if quantity == "loss" and (targets is None or loss_fn is None):
        raise ValueError("quantity 'loss' needs targets and loss_fn")
    t1 = steps - 1
    was_training = model.training
    model.eval()
    try:
        if quantity == "output":
            squares = _output_jacobian_squares(model, inputs, t1, chunk)
        else:
            squares = _loss_gradient_squares(model, inputs, targets, loss_fn, t1, chunk)
    finally:
        model.train(was_training)
    window = squares[:, t1 - max_distance : t1 + 1].flip(1)  # column d is t0 = t1 - d
    return window.sqrt().numpy()


def _output_jacobian_squares(model, inputs, t1: int, chunk: int) -> torch.Tensor:
    """(B, T) sum over o and input features of (dy_t1[o] / dx_t0)^2, by O copies per sample."""
    with torch.no_grad():
        outputs = model(inputs[:1, :1])[0].shape[-1]
    rows = inputs.repeat_interleave(outputs, dim=0)  # row b*O + o: sample b, output o
    component = torch.arange(rows.shape[0]) % outputs
    squares = torch.empty(rows.shape[:2], dtype=inputs.dtype)
    for start in range(0, rows.shape[0], max(chunk, 1)):
        x = rows[start : start + chunk].detach().clone().requires_grad_(True)
        y = model(x)[0]
        picked = y[torch.arange(x.shape[0]), t1, component[start : start + chunk]]
        (grad,) = torch.autograd.grad(picked.sum(), x)
        squares[start : start + chunk] = grad.pow(2).sum(-1)
    return squares.view(inputs.shape[0], outputs, -1).sum(1)


def _loss_gradient_squares(model, inputs, targets, loss_fn, t1: int, chunk: int) -> torch.Tensor:
    """(B, T) squared norm of dL_t1 / dx_t0 over input features."""
    squares = []
    for start in range(0, inputs.shape[0], max(chunk, 1)):
        x = inputs[start : start + chunk].detach().clone().requires_grad_(True)
        loss = loss_fn(model(x)[0], targets[start : start + chunk])[:, t1]
        (grad,) = torch.autograd.grad(loss.sum(), x)
        squares.append(grad.pow(2).sum(-1))
    return torch.cat(squares)


def summarise(norms: np.ndarray) -> GradientFlow:
    """A GradientFlow from per-sample norms (S, D)."""
    samples = norms.shape[0]
    sem = norms.std(axis=0, ddof=1) / np.sqrt(samples) if samples > 1 else np.zeros(norms.shape[1])
    return GradientFlow(np.arange(norms.shape[1]), norms, norms.mean(axis=0), sem, np.median(norms, axis=0))


def length_for_steps(task: Any, steps: int, limit: int = 1 << 14) -> int:
    """The smallest task length (``task.sample(length=...)``) whose sequences have >= steps steps."""

    def steps_at(length: int) -> int:
        return task.sample(1, 0, length=length)[0].shape[1]

    low = high = max(task.min_length, 1)
    while steps_at(high) < steps:
        low, high = high + 1, high * 2
        if high > limit:
            raise ValueError(f"task {task.name!r} gives no sequence of {steps} steps up to length {limit}")
    while low < high:  # steps_at(high) >= steps
        middle = (low + high) // 2
        low, high = (middle + 1, high) if steps_at(middle) < steps else (low, middle)
    return high


def gradient_flow(
    model: torch.nn.Module,
    task: Any,
    max_distance: int = 200,
    samples: int = 32,
    batch_size: int = 16,
    seed: int = 0,
    length: int | None = None,
    quantity: str = "output",
    chunk: int = 16,
    float64: bool = True,
) -> GradientFlow:
    """Mean norm of dy_t1/dx_t0 (or dL_t1/dx_t0) over ``samples`` sequences of ``task``
    against the distance t1 - t0 = 0..max_distance, t1 the last step of each batch.

    ``length`` is the task's length parameter (default: the smallest giving more than
    ``max_distance`` steps). Batch k is ``task.sample(batch_size, [seed, k], length)``.
    With ``float64`` a float64 copy of the model is measured: vanishing gradients fall
    below float32's smallest number (1e-45) within about 150 steps for an LSTM.
    """
    if float64:
        model = copy.deepcopy(model).to(torch.float64)
    if length is None:
        length = length_for_steps(task, max_distance + 1)
    for name, value in (("samples", samples), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    dtype = next(model.parameters()).dtype
    norms = []
    for k, start in enumerate(range(0, samples, batch_size)):
        inputs, targets, _ = task.sample(min(batch_size, samples - start), [seed, k], length=length)
        loss_fn = None
        if quantity == "loss":

            def loss_fn(logits, y):
                return task.step_nll(logits, y, torch.ones(y.shape[:2], dtype=logits.dtype))

        norms.append(
            input_gradient_norms(
                model, inputs.to(dtype), max_distance, quantity, targets.to(dtype), loss_fn, chunk
            )
        )
    return summarise(np.concatenate(norms))


def load_model(spec: str, task: Any, seed: int = 0, checkpoint: str = "best") -> tuple[str, torch.nn.Module]:
    """(label, model) for a registry name (freshly initialised with torch seed ``seed``)
    or a run directory (its ``checkpoint``, best by default).

    A name may carry model options after a colon, e.g. ``"dntm:addressing=argmax"`` or
    ``"ntm:memory_slots=32,controller=fnn"`` (values read as int, float, true/false or text).

    The model must take the task's inputs: a run trained on another task with other
    input or output sizes fails naming both.
    """
    from mannlab.models import MODELS, build_model

    path = Path(spec)
    if path.is_dir():
        from mannlab.loading import load_run

        config, run_task, model, meta = load_run(path, checkpoint)
        if (run_task.input_size, run_task.output_size) != (task.input_size, task.output_size):
            raise ValueError(
                f"run {spec} was trained on {config.task} (input {run_task.input_size}, "
                f"output {run_task.output_size}); the task here has input "
                f"{task.input_size}, output {task.output_size}"
            )
        return f"{config.model} ({path.name}, step {meta.get('step')})", model
    name, _, options = spec.partition(":")
    if name.lower().replace("-", "_") not in MODELS:
        raise ValueError(
            f"{spec!r} is neither a run directory nor a model name; models: {', '.join(sorted(MODELS))}"
        )
    kwargs = dict(_option(item) for item in options.split(",") if item.strip())
    torch.manual_seed(seed)
    return f"{spec} (untrained, seed {seed})", build_model(name, task.input_size, task.output_size, **kwargs)


def _option(item: str) -> tuple[str, Any]:
    """ "key=value" -> (key, value as int, float, bool or str)."""
    key, equals, text = item.partition("=")
    if not equals or not key.strip():
        raise ValueError(f"model options are key=value pairs separated by commas; got {item!r}")
    text = text.strip()
    for convert in (int, float):
        try:
            return key.strip(), convert(text)
        except ValueError:
            pass
    return key.strip(), {"true": True, "false": False}.get(text.lower(), text)
