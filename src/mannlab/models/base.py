"""The sequence wrapper every model shares: validation, layout, time loop, output head.

A model is a one-step *cell* plus this wrapper. The cell provides

    precompute(x (B, T, I)) -> per-step inputs, a tensor (B, T, P) split along time
    step(x_t, state, with_trace) -> (features_t (B, F), state, trace_t or None)
    initial_state(batch_size, device, dtype) -> state (NamedTuple of tensors)
    features: int, the width F of the output features

and the wrapper turns it into a module shaped like torch.nn.LSTM:
``y, state = model(x, state=None)``; ``return_trace=True`` adds a NamedTuple
of per-step tensors stacked on a time axis right after the batch axis.
The output head (features -> output_size logits) does not feed back into the
recurrence, so it runs once on the whole sequence after the loop.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any, Callable, NamedTuple, Optional, Self

import torch
from torch import nn

from mannlab.errors import ConfigError
from mannlab.models.state_check import check_state, check_values, values_checkable
from mannlab.nn import sampling
from mannlab.nn.schedules import inverse_temperature
from mannlab.ops import dispatch


def check_positive(**sizes: int) -> None:
    """Constructor guard: every named size must be an int >= 1."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def check_probability(name: str, value: Any) -> float:
    """Constructor guard: a dropout or zoneout probability in [0, 1), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{name} must be a probability in [0, 1), got {value!r}")
    return float(value)


def check_choice(name: str, value: Any, valid: tuple[str, ...]) -> str:
    """Constructor guard: one of the ``valid`` names."""
    if value not in valid:
        raise ConfigError(f"{name} must be one of {', '.join(map(repr, valid))}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Constructor guard: a real bool (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value


def check_integer(name: str, value: Any, low: int = 0, high: int = 2**63 - 1) -> int:
    """Constructor guard: an int (not a bool, not a float or string that looks like one) in
    [low, high]; the default range is that of a seed (a TOML integer, >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def check_number(
    name: str,
    value: Any,
    low: float,
    high: float = float("inf"),
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Constructor guard: a finite real number (not a bool) in [low, high] (``low_open``:
    > low; ``high_open``: < high)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        number = float(value)
        above = number > low if low_open else number >= low
        ok = above and (number < high if high_open else number <= high)
    if not ok:
        bound = f"> {low}" if low_open else f">= {low}"
        if high != float("inf"):
            bound += f" and < {high}" if high_open else f" and <= {high}"
        raise ConfigError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def size_or_default(value: Optional[int], default: int) -> int:
    """An optional size argument: ``default`` when None (only None: 0 is an invalid size
    that check_positive rejects, not a request for the default)."""
    return default if value is None else value


def batched(initial: torch.Tensor, batch_size: int, device=None, dtype=None) -> torch.Tensor:
    """A learned initial value expanded to the batch, on the device and in the dtype asked for
    (None: the parameter's; a no-op when they match, so the gradient still reaches it)."""
    return initial.to(device=device, dtype=dtype).expand(batch_size, *initial.shape)


def stack_traces(traces: list) -> Optional[NamedTuple]:
    """List over time of per-step NamedTuples (B, ...) -> one NamedTuple of (B, T, ...)."""
    if not traces:
        return None
    first = traces[0]
    return type(first)(*(torch.stack(field, dim=1) for field in zip(*traces)))


def check_input(owner: nn.Module, x: Any, layout: str, input_size: Optional[int]) -> torch.Tensor:
    """Clear errors for the usual mistakes with an input ``x`` of ``layout`` (its last axis the
    features), before they become deep tracebacks. Finiteness is checked where values can be
    read (not while torch.compile traces, not on the meta device)."""
    name = type(owner).__name__
    dims = layout.count(",") + 1
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} expects a torch.Tensor input, got {type(x).__name__}")
    if x.dim() != dims:
        raise ValueError(f"{name} expects a {dims}-D input {layout}, got shape {tuple(x.shape)}")
    if input_size is not None and x.shape[-1] != input_size:
        raise ValueError(
            f"{name} expects input_size={input_size} features in the last "
            f"dimension, got shape {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} expects a floating-point input, got {x.dtype}; convert with x.float()")
    dtype = next(owner.parameters()).dtype
    if x.dtype != dtype:
        raise TypeError(
            f"{name} has {dtype} parameters but got a {x.dtype} input; "
            f"convert the input or the model (model.to({x.dtype}))"
        )
    if x.numel() == 0:
        raise ValueError(f"{name} got an empty input of shape {tuple(x.shape)}")
    check_values(x, f"{name} got an input")
    return x


class MemoryCell(nn.Module):
    """Base of the one-step cells: ``features, state = cell(x_t, state)`` on raw input.

    Subclasses provide ``precompute``, ``step`` and ``initial_state`` (see the top
    of this module); the sequence module calls those directly. A cell whose whole sequence
    is also an op (``mannlab.ops.<name>``) sets ``op`` to that package and builds the op's
    records: ``op_options`` (None where the op cannot express the configuration),
    ``op_weights`` and ``run_op``. Which backend runs is the op's and dispatch's choice
    (:func:`run_sequence`), never the cell's.
    """

    #: the whole-sequence op package of this cell (``mannlab.ops.ntm``), or None
    op: Any = None

    def op_options(self, with_trace: bool, backward: bool) -> Any:
        """The op's options record for a pass (``backward``: a graph is recorded), or None
        where the op has no word for this configuration (then the step loop runs)."""
        return None

    def op_weights(self) -> Any:
        """The op's weights record: this cell's parameters, by the op's field names."""
        raise NotImplementedError(f"{type(self).__name__} has no op")

    def run_op(self, x: torch.Tensor, state: Any, options: Any, weights: Any, backend: str):
        """All steps of x (B, T, I) through the op on ``backend``: (features (B, T, F), final
        state, the trace stacked over time or None)."""
        raise NotImplementedError(f"{type(self).__name__} has no op")

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        """The input's projections for every step at once (outside the time loop)."""
        raise NotImplementedError(f"{type(self).__name__} defines precompute")

    def step(self, inputs_t: torch.Tensor, state: Any, with_trace: bool) -> tuple[torch.Tensor, Any, Any]:
        """One step from its precomputed inputs: (features, state, the step's trace or None)."""
        raise NotImplementedError(f"{type(self).__name__} defines step")

    def initial_state(self, batch_size: int, device: Any = None, dtype: Any = None) -> Any:
        """The state a sequence starts from."""
        raise NotImplementedError(f"{type(self).__name__} defines initial_state")

    def forward(self, x_t: torch.Tensor, state: Any = None, return_trace: bool = False):
        """One step on x_t (B, input_size); state None starts a new sequence."""
        check_input(self, x_t, "(batch, features)", getattr(self, "input_size", None))
        if state is None:
            state = self.initial_state(x_t.shape[0], x_t.device, x_t.dtype)
        else:
            check_state(self, state, x_t.shape[0], x_t.device, x_t.dtype)
        features, state, trace = self.step(self.precompute(x_t), state, return_trace)
        return (features, state, trace) if return_trace else (features, state)


class TemperatureCell(MemoryCell):
    """A cell that samples with a temperature: its inverse temperature 1/tau, which its model
    sets (CellTemperature)."""

    inverse_temperature: float


class CellTemperature:
    """Mixin for models whose cell samples with a temperature: the cell's inverse
    temperature 1/tau as a model attribute, set from the step by ``begin_step`` where the
    model's ``temperature_schedule`` is (every, maximum), not None."""

    cell: TemperatureCell
    temperature_schedule: Optional[tuple[int, float]]

    def begin_step(self, step: int, coin: Optional[Callable[[float], bool]] = None) -> None:
        """1/tau of training step ``step`` (nn.schedules.inverse_temperature)."""
        schedule = self.temperature_schedule
        if schedule is not None:
            self.inverse_temperature = inverse_temperature(step, *schedule)

    @property
    def inverse_temperature(self) -> float:
        return self.cell.inverse_temperature

    @inverse_temperature.setter
    def inverse_temperature(self, value: float) -> None:
        self.cell.inverse_temperature = float(value)


def run_steps(cell: MemoryCell, x: torch.Tensor, state: Any, with_trace: bool):
    """The time loop over ``unbind``-ed precomputed inputs: the backward of one unbind is
    one stack, where indexing [:, t] at every step makes each step's backward zero-fill
    the whole (B, T, P) input gradient (O(T^2) work, felt at pMNIST's 784 steps)."""
    outputs, traces = [], []
    for inputs_t in cell.precompute(x).unbind(1):
        out, state, trace = cell.step(inputs_t, state, with_trace)
        outputs.append(out)
        if with_trace:
            traces.append(trace)
    return torch.stack(outputs, dim=1), state, stack_traces(traces)


def _plan(cell: MemoryCell, x: torch.Tensor, state: Any, with_trace: bool) -> tuple[str, Any, Any]:
    """(backend, options, weights) of a pass of ``cell`` over x: the op's backend dispatch
    chooses for the op's records, or "" for the step loop."""
    options = cell.op_options(with_trace, dispatch.records_graph(cell.parameters(), x, state))
    if options is None:  # the op has no word for this configuration
        return "", None, None
    weights = cell.op_weights()
    return dispatch.choose(cell.op, x, options, weights), options, weights


def sequence_backend(cell: MemoryCell, x: torch.Tensor, state: Any = None, with_trace: bool = False) -> str:
    """The backend a pass of ``cell`` over x (B, T, I) takes: "numba", "triton", "compiled", or
    "" (the step loop)."""
    return _plan(cell, x, state, with_trace)[0] if cell.op is not None else ""


def run_sequence(cell: MemoryCell, x: torch.Tensor, state: Any, with_trace: bool):
    """A pass over x on the path dispatch chooses for the cell's op: the op on that backend,
    or the step loop (the reference, which runs everywhere)."""
    if cell.op is not None:
        backend, options, weights = _plan(cell, x, state, with_trace)
        if backend:
            return cell.run_op(x, state, options, weights, backend)
    return run_steps(cell, x, state, with_trace)


class Model(nn.Module):
    """What the trainer, evaluation and the run files call on a model besides its forward
    pass: a registered model (:class:`SequenceModel`) or an adapter in front of one
    (mannlab.wrappers.ModelWrapper)."""

    @property
    def uses_aux_loss(self) -> bool:
        """Whether the training loss needs ``aux_loss(trace, step_nll)``."""
        return False

    @property
    def aux_loss_scores(self) -> bool:
        """Whether ``aux_loss`` also takes ``score`` (logits -> per-step NLL on the targets)."""
        return False

    def begin_step(self, step: int, coin: Optional[Callable[[float], bool]] = None) -> None:
        """Set the model's switches for training step ``step``, before its forward pass."""

    def kernel_backends(self) -> tuple[str, ...]:
        """The kernels a training pass can run on ("numba", "triton"); () for none."""
        return ()

    def initial_state(self, batch_size: int, device: Any = None, dtype: Any = None) -> Any:
        """The state a sequence starts from."""
        raise NotImplementedError(f"{type(self).__name__} defines initial_state")

    def aux_loss(
        self,
        trace: Any,
        step_nll: torch.Tensor,
        outputs_per_step: Optional[int] = None,
        reducer: Optional[sampling.Reducer] = None,
    ) -> torch.Tensor:
        """Extra training terms (estimators, regularisers), a 0-dim tensor; zero for fully
        differentiable models. ``reducer``: the batch is a slice of a global batch split among
        processes, and the estimators' batch statistics are taken over the global batch through
        it (the trainer passes it under data-parallel training; see nn/sampling.py)."""
        return step_nll.new_zeros(())


class SequenceModel(Model):
    """Base for every model: subclasses set ``self.cell`` (or override ``_run``)."""

    cell: MemoryCell

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # help(), IDEs and the API pages show __init__'s own docstring, else nn.Module's
        # generic one: point them at the model's Args instead.
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not init.__doc__:
            init.__doc__ = f"Builds the model: {cls.__name__}'s arguments are its class docstring's Args."

    #: True for models whose training loss needs ``aux_loss(trace, step_nll)``.
    uses_aux_loss = False
    #: True for models whose ``aux_loss`` also takes ``score`` (logits -> per-step NLL on the
    #: targets), for auxiliary predictions of their own (TARDIS eq. 17).
    aux_loss_scores = False

    def begin_step(self, step: int, coin: Optional[Callable[[float], bool]] = None) -> None:
        """Set the model's switches for training step ``step`` (0-based), before its forward
        pass: the trainer calls it each minibatch. Nothing here; models with a temperature or
        a curriculum schedule apply it. ``coin(p)`` draws one pi ~ Bernoulli(p) for the whole
        minibatch (the trainer's is rank 0's draw under data-parallel training); default:
        one draw from torch's RNG."""

    def kernel_backends(self) -> tuple[str, ...]:
        """The kernels a training pass of this configuration can run on without being forced:
        "numba" (CPU), "triton" (GPU, where Triton is installed and the kernels have run on a
        GPU); () for models without an op (dispatch.available)."""
        cell = self._modules.get("cell")
        if not isinstance(cell, MemoryCell) or cell.op is None:
            return ()
        options = cell.op_options(False, True)
        return () if options is None else dispatch.available(cell.op, options, cell.op_weights())

    def __init__(self, input_size: int, output_size: Optional[int], features: int, batch_first: bool = True):
        super().__init__()
        check_positive(input_size=input_size)
        check_bool("batch_first", batch_first)
        if output_size is not None:
            check_positive(output_size=output_size)
        self.input_size, self.output_size, self.batch_first = input_size, output_size, batch_first
        self.output_features = output_size if output_size is not None else features
        self.head = nn.Linear(features, output_size) if output_size is not None else None

    def initial_state(self, batch_size: int, device=None, dtype=None):
        """The state a sequence starts from (learned initial values, expanded to the batch)."""
        return self.cell.initial_state(batch_size, device=device, dtype=dtype)

    def _scored_outputs(
        self,
        trace: Any,
        trace_type: type[Any],
        step_nll: torch.Tensor,
        outputs_per_step: Optional[int] = None,
        reducer: Optional[sampling.Reducer] = None,
    ) -> torch.Tensor:
        """Checks aux_loss's inputs; returns S, the mean number of terms the task loss averages
        over per sequence: scored steps (where step_nll > 0) times ``outputs_per_step``, at
        least 1. ``outputs_per_step`` is what the task loss averages over at each scored
        step: every output bit of a BCE task (the default, the output size), 1 for the
        cross-entropy of a categorical task (one class per step). The papers' costs add the
        estimator terms to the sequence's summed NLL; the task loss is that sum divided by
        S, so terms divided by S keep the papers' ratio to the NLL."""
        if not isinstance(trace, trace_type):
            raise TypeError(
                f"aux_loss expects the {trace_type.__name__} of return_trace=True, got {type(trace).__name__}"
            )
        if step_nll.shape != trace.sampled.shape:
            raise ValueError(
                f"step_nll must be (B, T) = {tuple(trace.sampled.shape)}, got {tuple(step_nll.shape)}"
            )
        if values_checkable(step_nll) and not bool((torch.isfinite(step_nll) & (step_nll >= 0)).all()):
            raise ValueError("step_nll must be finite and >= 0 (a negative log-likelihood per step)")
        if outputs_per_step is None:
            outputs_per_step = self.output_features
        if (
            isinstance(outputs_per_step, bool)
            or not isinstance(outputs_per_step, int)
            or outputs_per_step < 1
        ):
            raise ValueError(f"outputs_per_step must be a positive integer, got {outputs_per_step!r}")
        # over the global batch with a reducer: every slice scales alike
        steps = sampling.batch_mean((step_nll > 0).sum(1).to(step_nll.dtype), reducer)
        return (steps * outputs_per_step).clamp_min(1.0)

    def forward(self, x: torch.Tensor, state: Any = None, return_trace: bool = False):
        """x (B, T, input_size) (or (T, B, .) if batch_first=False) -> y, state[, trace]."""
        x = self._check_input(x)
        if not self.batch_first:
            x = x.transpose(0, 1)
        if state is None:
            state = self.initial_state(x.shape[0], device=x.device, dtype=x.dtype)
        else:
            check_state(self, state, x.shape[0], x.device, x.dtype)
        features, state, trace = self._run(x, state, return_trace)
        y = self.head(features) if self.head is not None else features
        if not self.batch_first:
            y = y.transpose(0, 1)
        return (y, state, trace) if return_trace else (y, state)

    def _run(self, x: torch.Tensor, state: Any, with_trace: bool):
        """The time loop: the only Python loop in a model (internal: ``forward`` calls it)."""
        return run_steps(self.cell, x, state, with_trace)

    def _check_input(self, x: torch.Tensor) -> torch.Tensor:
        layout = "(batch, time, features)" if self.batch_first else "(time, batch, features)"
        return check_input(self, x, layout, self.input_size)

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Keep the arguments the model is built with, by name, as ``constructor_args``: what
        # mannlab.save writes so that mannlab.load can build the same model again. Copies and
        # unpickling call __new__ without arguments and restore the attribute with the rest.
        model = super().__new__(cls)
        if args or kwargs:
            try:
                bound = inspect.signature(cls.__init__).bind(model, *args, **kwargs)
            except TypeError:
                return model  # __init__ raises the error for the wrong arguments
            model.__dict__["constructor_args"] = {k: v for k, v in list(bound.arguments.items())[1:]}
        return model
