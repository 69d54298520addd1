"""Shared machinery of the tasks: parameters, seeds, padding, loss, metrics, rendering.

A task subclass only declares its parameters (``defaults`` + ``_validate``) and
generates sequences (``_sequence`` for one, or ``_generate`` for a whole batch).
Everything that touches tensors lives here, so every task scores the same way.

Layout of a batch (see ``Task.sample``):

- ``inputs``  (B, T, input_size)  float32
- ``targets`` (B, T, output_size) float32
- ``mask``    (B, T)              float32, 1 where the output is scored

T is the longest sequence of the batch; shorter sequences are padded at the
end with zero inputs, zero targets and mask 0.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence, TypeGuard

import numpy as np
import torch
import torch.nn.functional as F

from mannlab.errors import ConfigError

# One generated sequence: inputs (T_i, input_size), targets (T_i, output_size), mask (T_i,).
Example = tuple[np.ndarray, np.ndarray, np.ndarray]


# --------------------------------------------------------------------- seeds


def as_generator(seed: int | Sequence[int] | np.random.Generator) -> np.random.Generator:
    """Turn ``seed`` (an int, a sequence of ints, or a Generator) into a numpy Generator.

    A Generator is returned as is (and advanced by the caller's draws); ints and
    sequences of ints go through ``numpy.random.default_rng``. ``None`` is refused
    so that every batch is reproducible.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if _is_int(seed):
        entropy: Any = int(seed)
    elif isinstance(seed, (list, tuple, np.ndarray)) and len(seed) > 0 and all(_is_int(s) for s in seed):
        entropy = [int(s) for s in seed]
    else:
        raise ConfigError(f"seed must be an int, a sequence of ints or a numpy Generator, got {seed!r}")
    try:
        return np.random.default_rng(entropy)
    except ValueError as err:  # e.g. negative ints
        raise ConfigError(f"invalid seed {seed!r}: {err}") from None


def _is_int(value: Any) -> TypeGuard[numbers.Integral]:
    # bool is an int subclass, but True as a length or seed is almost surely a mistake.
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


# ---------------------------------------------------------------- parameters


def check_int(params: dict, key: str, minimum: int = 1, maximum: int | None = None) -> int:
    """Validate ``params[key]`` as an int in [minimum, maximum], store it back as a plain int."""
    value = params[key]
    if not _is_int(value):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and <= {maximum}"
        raise ConfigError(f"{key} must be an integer >= {minimum}{upper}, got {value}")
    params[key] = value
    return value


def check_bool(params: dict, key: str) -> bool:
    """Validate ``params[key]`` as a bool and store it back as a plain bool."""
    value = params[key]
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    params[key] = bool(value)
    return bool(value)


def check_order(params: dict, low: str, high: str) -> None:
    """Require ``params[low] <= params[high]``."""
    if params[low] > params[high]:
        raise ConfigError(f"{low} must be <= {high}, got {low}={params[low]} > {high}={params[high]}")


# ------------------------------------------------------------------- scoring


def _check_shapes(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> None:
    if logits.shape != targets.shape or logits.dim() != 3 or mask.shape != targets.shape[:2]:
        raise ValueError(
            "expected logits and targets (B, T, output_size) and mask (B, T), got "
            f"logits {tuple(logits.shape)}, targets {tuple(targets.shape)}, mask {tuple(mask.shape)}"
        )


def bit_bce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, O) BCE-with-logits of every bit, zero where ``mask`` is 0."""
    _check_shapes(logits, targets, mask)
    bce = F.binary_cross_entropy_with_logits(logits, targets.to(logits.dtype), reduction="none")
    return bce * mask.to(logits.dtype).unsqueeze(-1)


def masked_bce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scalar mean BCE (nats) per scored bit; 0 if nothing is scored."""
    scored = mask.to(logits.dtype).sum() * targets.shape[-1]
    return bit_bce(logits, targets, mask).sum() / scored.clamp_min(1.0)


def step_nll(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) BCE summed over the output bits of each step, times ``mask``."""
    return bit_bce(logits, targets, mask).sum(-1)


def bit_metrics(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``bce``, ``bit_error_rate`` and ``seq_bit_errors`` over the scored bits (no grad).

    A bit is predicted 1 when sigmoid(logit) > 0.5, i.e. logit > 0.
    """
    with torch.no_grad():
        m = mask.to(logits.dtype).unsqueeze(-1)
        wrong = ((logits > 0) != (targets > 0.5)).to(logits.dtype) * m
        scored = (m.sum() * targets.shape[-1]).clamp_min(1.0)
        return {
            "bce": float(masked_bce(logits, targets, mask)),
            "bit_error_rate": float(wrong.sum() / scored),
            "seq_bit_errors": float(wrong.sum(dim=(1, 2)).mean()),
        }


def step_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) cross-entropy of the class ``targets`` one-hot marks at each step, times ``mask``
    (the categorical counterpart of ``step_nll``; unscored steps may hold all-zero targets)."""
    _check_shapes(logits, targets, mask)
    nll = -(F.log_softmax(logits, dim=-1) * targets.to(logits.dtype)).sum(-1)
    return nll * mask.to(logits.dtype)


def masked_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scalar mean cross-entropy (nats) per scored step; 0 if nothing is scored."""
    return step_ce(logits, targets, mask).sum() / mask.to(logits.dtype).sum().clamp_min(1.0)


def class_metrics(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``ce`` (the softmax cross-entropy, nats per scored step: ``CategoricalTask.loss_key``, the
    key the training loop selects and plots by), ``error`` (fraction of scored steps whose argmax
    is not the target class) and ``seq_error`` (fraction of sequences with a wrong scored step).
    No grad."""
    with torch.no_grad():
        m = mask > 0
        wrong = (logits.argmax(-1) != targets.argmax(-1)) & m
        return {
            "ce": float(masked_ce(logits, targets, mask)),
            "error": float(wrong.sum() / m.sum().clamp_min(1)),
            "seq_error": float(wrong.any(dim=1).float().mean()),
        }


# ---------------------------------------------------------------- rendering


def bit_char(value: float) -> str:
    """'#' for a set bit, '.' for a clear one."""
    return "#" if value > 0.5 else "."


def signed_unit_char(value: float) -> str:
    """A value in [-1, 1] as a digit 0..9 (-1 -> '0', +1 -> '9'); exactly 0 -> '.'."""
    if value == 0:
        return "."
    return str(int(np.clip(np.floor((value + 1.0) * 4.5 + 0.5), 0, 9)))


# ------------------------------------------------------------- declarations

#: what a task is: "generated" (sequences from a seed and a length range), "data" (a data set's
#: fixed sequences in splits), "proposals" (temporal action proposals over videos), "text" (a
#: character-level corpus)
TASK_KINDS = ("generated", "data", "proposals", "text")
#: how a task is trained: "samples" (independent batches ``task.sample(B, [seed, step])``) or
#: "streams" (contiguous streams of a corpus, truncated BPTT with the state carried)
BATCHINGS = ("samples", "streams")
#: what a task feeds, i.e. the adapter mannlab.wrappers puts in front of a model: "features"
#: (float vectors, read as they are), "symbols" (integer symbols: an embedding), "sentences"
#: (word ids of one sentence per step: a fact encoder), "snippets" (video snippet features
#: scored by proposal anchors: SST's input projection)
INPUT_KINDS = ("features", "symbols", "sentences", "snippets")


class TaskTraits:
    """What every task declares about itself, so that the layers above ask the task (or the
    registry, ``mannlab.tasks.entry``) instead of probing its type or its attributes."""

    #: one of TASK_KINDS
    kind: ClassVar[str] = "generated"
    #: one of BATCHINGS
    batching: ClassVar[str] = "samples"
    #: the INPUT_KINDS its instances may feed, the default first (``input_kind`` says which)
    input_kinds: ClassVar[tuple[str, ...]] = ("features",)
    #: the metrics key of its loss (what training logs, selects the best checkpoint by and
    #: plots): "bce" (nats per bit), "ce" (nats per scored step), "wbce", "bpc"
    loss_key: ClassVar[str] = "bce"
    #: the named splits of its data (held-out validation on "valid"); () for generated tasks
    splits: ClassVar[tuple[str, ...]] = ()

    @property
    def input_kind(self) -> str:
        """What this task feeds (one of ``input_kinds``)."""
        return self.input_kinds[0]

    def steps_per_epoch(self, batch_size: int) -> int | None:
        """Training steps of ``batch_size`` in one pass over the training data, for tasks that
        define an epoch (the proposal tasks); None for the others."""
        return None

    def extra_results(self, model: Any, split: str, limit: int | None, batch_size: int) -> dict[str, Any]:
        """Results of the task's own evaluation protocol beyond its metrics, by name (strokes:
        the predictions fed back); none by default."""
        return {}


# -------------------------------------------------------------------- Task


class Task(TaskTraits, ABC):
    """Base class of a task: resolved parameters, sizes, ``sample`` and scoring.

    Subclasses set the class attributes ``name``, ``length_name``, ``defaults``
    (parameter -> default value) and may set ``min_length`` (the smallest value
    ``sample(length=...)`` accepts). They implement ``_validate(params)`` (check
    and coerce values, raising ConfigError), set ``input_size``, ``output_size``,
    ``train_length`` and the channel names in ``__init__``, and implement
    ``_sequence(rng, length)`` (or ``_generate`` for a vectorised batch). Their TaskTraits
    declarations (kind, input kinds, loss key, splits) default to a generated task of bits.
    """

    name: ClassVar[str] = ""
    length_name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    min_length: ClassVar[int] = 1

    input_size: int
    output_size: int
    train_length: int
    input_names: list[str]  # one short label per input channel, for render
    output_names: list[str]  # one short label per output channel, for render

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ConfigError(
                f"unknown parameter {', '.join(map(repr, unknown))} for task '{self.name}'; "
                f"valid parameters: {', '.join(self.defaults)}"
            )
        resolved = {**self.defaults, **params}
        self._validate(resolved)
        self.params: dict[str, Any] = resolved

    @abstractmethod
    def _validate(self, params: dict[str, Any]) -> None:
        """Raise ConfigError for invalid parameter values (each task knows its own)."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    # ------------------------------------------------------------- sampling

    def sample(
        self, batch_size: int, seed: int | Sequence[int] | np.random.Generator, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draw a batch: ``inputs (B, T, input_size)``, ``targets (B, T, output_size)``, ``mask (B, T)``.

        All randomness comes from the numpy generator made from ``seed``, so the
        same seed gives the same batch. ``length`` (see ``length_name``) replaces
        the task's size range by exactly ``length``, to test generalisation.
        """
        check_int({"batch_size": batch_size}, "batch_size")
        if length is not None:
            length = check_int({"length": length}, "length", minimum=self.min_length)
        examples = self._generate(as_generator(seed), int(batch_size), length)
        return self._pad(examples)

    def _sequence(self, rng: np.random.Generator, length: int | None) -> Example:
        """One example (inputs, targets, mask as numpy arrays); subclasses define it, or
        override ``_generate``."""
        raise NotImplementedError(f"{type(self).__name__} defines _sequence or _generate")

    def _generate(self, rng: np.random.Generator, batch_size: int, length: int | None) -> list[Example]:
        """One example per sequence from the subclass's ``_sequence(rng, length)`` (inputs,
        targets, mask as numpy arrays); tasks that draw a whole batch at once override this."""
        return [self._sequence(rng, length) for _ in range(batch_size)]

    def _pad(self, examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        steps = max(len(m) for _, _, m in examples)
        batch = len(examples)
        inputs = np.zeros((batch, steps, self.input_size), np.float32)
        targets = np.zeros((batch, steps, self.output_size), np.float32)
        mask = np.zeros((batch, steps), np.float32)
        for b, (x, y, m) in enumerate(examples):
            inputs[b, : len(m)] = x
            targets[b, : len(m)] = y
            mask[b, : len(m)] = m
        return torch.from_numpy(inputs), torch.from_numpy(targets), torch.from_numpy(mask)

    # -------------------------------------------------------------- scoring

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked BCE-with-logits, mean per scored bit (differentiable scalar, nats)."""
        return masked_bce(logits, targets, mask)

    def step_nll(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) BCE summed over output bits at each step, times ``mask``."""
        return step_nll(logits, targets, mask)

    @property
    def outputs_per_step(self) -> int:
        """What ``loss`` averages over at each scored step: every output bit. A model's
        estimator terms are scaled by it (``aux_loss``) to keep their ratio to the NLL."""
        return self.output_size

    def metrics(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        inputs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """``bce`` (nats/bit), ``bit_error_rate`` and ``seq_bit_errors``; ``inputs`` is unused here
        (tasks with a reference score, like ngrams, use it)."""
        return bit_metrics(logits, targets, mask)

    def source_steps(self, inputs: torch.Tensor) -> np.ndarray | None:
        """For each step of each sequence of ``inputs (B, T, C)``, the earlier input step
        whose content that step reproduces or asks for, else -1: (B, T) integers. An output
        step of copy points at the element it copies; a query step of associative recall at
        the row of the item it repeats. None: the task does not say (evaluation.reads uses it
        to tell where a model's reads should land)."""
        return None

    # ------------------------------------------------------------ rendering

    def _input_char(self, x_t: np.ndarray, channel: int) -> str:
        """The character for input ``channel`` of the step whose inputs are ``x_t``
        (the whole step is given so continuous channels can depend on the others)."""
        return bit_char(x_t[channel])

    def render(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        logits: torch.Tensor | None = None,
        index: int = 0,
    ) -> str:
        """Text picture of sequence ``index``: one row per channel, one column per step.

        Rows ``in <c>`` show the inputs ('#' = 1, '.' = 0, digits for continuous
        channels), rows ``tgt <c>`` the targets (' ' where not scored), and with
        ``logits`` rows ``out <c>`` the thresholded predictions with 'x' on wrong
        scored bits. Trailing padding (after the last scored step) is cut off.
        """
        x = inputs[index].detach().cpu().float().numpy()
        y = targets[index].detach().cpu().float().numpy()
        m = mask[index].detach().cpu().float().numpy()
        scored = np.flatnonzero(m > 0)
        steps = int(scored[-1]) + 1 if scored.size else len(m)
        rows = [
            (f"in {self.input_names[c]}", "".join(self._input_char(x[t], c) for t in range(steps)))
            for c in range(x.shape[1])
        ]
        rows += [
            (
                f"tgt {self.output_names[c]}",
                "".join(bit_char(y[t, c]) if m[t] > 0 else " " for t in range(steps)),
            )
            for c in range(y.shape[1])
        ]
        header = f"{self.name} [{index}]: {steps} steps, {scored.size} scored"
        if logits is not None:
            p = logits[index].detach().cpu().float().numpy() > 0
            wrong = (p != (y > 0.5)) & (m[:, None] > 0)
            header += f", {int(wrong[:steps].sum())} wrong bits"
            rows += [
                (
                    f"out {self.output_names[c]}",
                    "".join(
                        " " if m[t] <= 0 else "x" if wrong[t, c] else bit_char(p[t, c]) for t in range(steps)
                    ),
                )
                for c in range(y.shape[1])
            ]
        width = max(len(label) for label, _ in rows)
        return "\n".join([header] + [f"{label:>{width}} |{chars}|" for label, chars in rows])


class CategoricalTask(Task):
    """A task whose scored steps each have one correct class (one-hot ``targets``): softmax
    cross-entropy instead of BCE, ``error`` instead of bit errors (see ``class_metrics``).
    Their metrics report the loss under the key ``ce`` (``loss_key``), not ``bce``."""

    loss_key: ClassVar[str] = "ce"

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked softmax cross-entropy, mean per scored step (nats)."""
        return masked_ce(logits, targets, mask)

    def step_nll(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) cross-entropy at each step, times ``mask``."""
        return step_ce(logits, targets, mask)

    @property
    def outputs_per_step(self) -> int:
        """``loss`` is a mean per scored step: one class each."""
        return 1

    def metrics(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        inputs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """``ce`` (cross-entropy, nats per scored step), ``error`` and ``seq_error``."""
        return class_metrics(logits, targets, mask)
