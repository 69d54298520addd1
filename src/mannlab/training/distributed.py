"""Data-parallel training on torchrun (PyTorch DDP): the one place that knows about ranks.

torchrun starts one process per worker and tells each its place through the environment
(``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); ``setup`` reads
it and opens the process group, gloo on the CPU and NCCL on CUDA. Without those variables
(or with WORLD_SIZE 1) every function here is the single-process identity, so the trainer
calls them unconditionally.

The rule: a run means the same thing whatever the number of processes. ``train.batch_size``
is the GLOBAL batch: every rank builds the same global batch from the same seed and keeps
its contiguous slice (rank r: rows r*b .. (r+1)*b - 1, b = batch_size / world_size); the
losses are scaled so that DDP's average of the ranks' gradients is the gradient of the
one-process loss on the global batch; every decision (stop, solve, time budget, the
D-NTM's curriculum coin) is made once and shared; rank 0 alone writes the run directory.
"""

from __future__ import annotations

import atexit
import datetime
import inspect
import os
import sys
from typing import Any, Callable, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from mannlab.errors import ConfigError
from mannlab.models.base import Model

T = TypeVar("T")
# a rank waits this long for the others (e.g. while rank 0 alone validates or writes figures)
TIMEOUT = datetime.timedelta(minutes=60)


def env_world_size() -> int:
    """WORLD_SIZE as torchrun sets it (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def active() -> bool:
    """Whether a process group of more than one process is open."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def is_main() -> bool:
    """Rank 0: the one process that writes files, logs and shows a progress bar."""
    return rank() == 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def place(device: torch.device) -> torch.device:
    """The device of this rank: ``cuda`` without an index becomes cuda:LOCAL_RANK (one
    process per GPU); other devices are as given."""
    if device.type == "cuda" and device.index is None and env_world_size() > 1:
        gpus = torch.cuda.device_count()
        if local_rank() >= gpus:
            raise ConfigError(
                f"torchrun started process {local_rank()} (LOCAL_RANK) on this node, but it has "
                f"{gpus} GPU(s) and each process trains on its own: start at most {gpus} "
                f"(torchrun --nproc-per-node {gpus}), or train on the CPU with --device cpu"
            )
        return torch.device("cuda", local_rank())
    return device


def setup(device: torch.device) -> None:
    """Open the process group torchrun's environment describes (idempotent; nothing without
    torchrun): NCCL for CUDA devices, gloo otherwise. The group stays open until the
    process exits, so `mannlab run` trains its seeds in one group."""
    if env_world_size() <= 1 or (dist.is_available() and dist.is_initialized()):
        return
    if not dist.is_available():
        raise ConfigError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=TIMEOUT)
    atexit.register(teardown)


def start(device_name: str, model: Model | None = None, batch_size: int | None = None) -> torch.device:
    """The device of this process for ``train.device`` (``cuda`` is cuda:LOCAL_RANK under
    torchrun; "auto" picks for ``model`` at ``batch_size``), with the process group open if
    torchrun launched it."""
    from mannlab.training.device import resolve_device  # device.py knows the names

    device = place(resolve_device(device_name, model, batch_size))
    setup(device)
    return device


def teardown() -> None:
    """Close the process group if one is open."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if active():
        dist.barrier()


# ------------------------------------------------------------------ batches


def check_batch(batch_size: int, what: str = "train.batch_size") -> int:
    """The per-rank batch: ``batch_size / world_size``; ConfigError unless it divides."""
    world = world_size()
    if batch_size % world:
        raise ConfigError(
            f"{what} = {batch_size} is the global batch and must divide evenly among the "
            f"{world} processes (every rank takes an equal slice, so that the averaged "
            f"gradients are those of the global batch); use a multiple of {world}"
        )
    return batch_size // world


def rank_rows(batch_size: int) -> slice:
    """The rows of a global batch of ``batch_size`` that this rank trains on."""
    per_rank = check_batch(batch_size)
    return slice(rank() * per_rank, (rank() + 1) * per_rank)


def shard(value: Any, batch_size: int) -> Any:
    """This rank's rows of every tensor in ``value`` (tensors, tuples, lists, NamedTuples)
    whose first axis is the global batch; other values pass through."""
    if not active():
        return value
    rows = rank_rows(batch_size)
    if isinstance(value, torch.Tensor):
        return value[rows] if value.dim() and value.shape[0] == batch_size else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(shard(v, batch_size) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(shard(v, batch_size) for v in value)
    return value


def shard_along(tensor: torch.Tensor, batch_size: int, axis: int) -> torch.Tensor:
    """This rank's slice of ``tensor`` whose axis ``axis`` is the global batch."""
    if not active():
        return tensor
    return tensor.narrow(axis, rank_rows(batch_size).start, batch_size // world_size())


def gather_along(tensor: torch.Tensor, axis: int) -> torch.Tensor:
    """The inverse of ``shard_along``: the ranks' slices concatenated in rank order."""
    if not active():
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=axis)


class _RankReducer:
    """Sums and gathers over the ranks' slices of the global batch: the ``reducer`` of the
    estimators' batch statistics (nn/sampling.py's ``Reducer``)."""

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.detach().clone()
        dist.all_reduce(total)
        return total

    def gather(self, tensor: torch.Tensor) -> tuple[torch.Tensor, slice]:
        parts = [torch.empty_like(tensor) for _ in range(world_size())]
        dist.all_gather(parts, tensor.detach().contiguous())
        start = rank() * tensor.shape[0]
        return torch.cat(parts), slice(start, start + tensor.shape[0])


def batch_reducer() -> _RankReducer | None:
    """What a model's ``aux_loss`` takes its batch statistics over: the ranks' slices with a
    process group open, None (this process's batch alone) without one."""
    return _RankReducer() if active() else None


def global_scale(count: torch.Tensor, total: torch.Tensor | None = None) -> torch.Tensor:
    """world_size * count / total, ``total`` being the sum of ``count`` over the ranks:
    multiplies a rank's loss that is a mean over its own ``count`` terms (scored bits or
    steps) so that DDP's average over ranks is the mean over all the global batch's terms.
    Without ``total`` it is all-reduced here (a collective: each one is a point where the
    ranks wait for each other, so callers that hold the global batch pass it). 1 without a
    process group."""
    if not active():
        return torch.ones((), dtype=count.dtype, device=count.device)
    if total is None:
        total = count.detach().clone()
        dist.all_reduce(total)
    return world_size() * count.detach() / total.to(count.dtype).clamp_min(1)


def mean_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """The mean over the ranks of ``values`` (a copy; the input itself without a group)."""
    if not active():
        return values
    total = values.detach().clone()
    dist.all_reduce(total)
    return total / world_size()


def mean_over_ranks_later(values: torch.Tensor) -> Callable[[], torch.Tensor]:
    """``mean_over_ranks(values)`` for after the backward: returns a function that gives it
    (the same tensor on every call), to be called once on every rank. The all-reduce starts
    now and runs during the backward."""
    if not active():
        return lambda: values
    total = values.detach().clone()
    work = dist.all_reduce(total, async_op=True)
    done: list[torch.Tensor] = []

    def result() -> torch.Tensor:
        if not done:
            assert work is not None  # async_op=True returns its handle
            work.wait()
            done.append(total / world_size())
        return done[0]

    return result


# ---------------------------------------------------------------- decisions


def from_main(value: T) -> T:
    """Rank 0's ``value`` on every rank (any picklable object)."""
    if not active():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def main_only(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and give its result to every rank; an exception it raises is
    raised on every rank (so the other ranks do not wait for a rank 0 that has failed)."""
    if not active():
        return fn()
    outcome: tuple[bool, Any] = (True, None)
    if is_main():
        try:
            outcome = (True, fn())
        except Exception as exc:  # noqa: BLE001 - re-raised below, on every rank
            outcome = (False, exc)
    ok, value = from_main(outcome)
    if not ok:
        raise value
    return value


def gather_objects(value: Any) -> list[Any] | None:
    """Every rank's ``value`` as a list on rank 0 (None elsewhere); [value] without a group."""
    if not active():
        return [value]
    out: list[Any] | None = [None] * world_size() if is_main() else None
    dist.gather_object(value, out, dst=0)
    return out


def say(message: str) -> None:
    """Print on rank 0 only (stderr)."""
    if is_main():
        print(f"mannlab: {message}", file=sys.stderr)


# -------------------------------------------------------------------- seeds


def rank_seed(seed: int, rank_index: int, step: int = 0) -> int:
    """The seed of rank ``rank_index``'s torch RNG stream (the model's own sampling: REINFORCE
    samples, gumbel noise, dropout): rank 0 keeps the run's stream, the others get streams
    of their own so their slices do not draw the same noise."""
    if rank_index == 0 and step == 0:
        return seed
    return (seed * 0x9E3779B97F4A7C15 + rank_index * 0xBF58476D1CE4E5B9 + step * 0x94D049BB133111EB) % 2**63


# ------------------------------------------------------------------- models


class _LossModule(nn.Module):
    """``forward(fn, *args) = fn(model, *args)``: the whole loss of a step, estimator terms
    included, runs inside DDP's forward, so DDP sees every parameter the step uses (the
    D-NTM's input baseline, TARDIS's auxiliary heads) and finds those a step leaves unused."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.model, *args)


# newer torch names broadcast_buffers=False forward_sync_buffers=False
_NO_FORWARD_BUFFER_SYNC: dict[str, Any] = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


class Runner:
    """Calls a step's loss function on the model: ``runner(fn, *args) = fn(model, *args)``,
    through DistributedDataParallel when a process group is open.

    find_unused_parameters is on: some parameters are unused on some steps (a learned
    initial state when TBPTT carries the state in, the D-NTM's input baseline on a soft
    minibatch of its curriculum), and DDP must know before it waits for their gradients.
    It costs a search of the step's graph (see benchmarks/bench_ddp.py); torch warns once
    when a model happened to use every parameter.
    Buffers are copied from rank 0 once, here, and not at each forward: the only buffers
    that change in training, the running reward moments (nn/sampling.py), are computed from
    the global batch on every rank (``batch_reducer``) and stay equal. DDP sums the
    gradients in the default group: gloo on the CPU, NCCL on CUDA."""

    def __init__(self, model: nn.Module, device: torch.device):
        self.model = model
        self._wrapped: Callable[..., Any] | None = None
        if active():
            for buffer in model.buffers():  # rank 0's (a resumed run's running moments)
                dist.broadcast(buffer, src=0)
            self._wrapped = nn.parallel.DistributedDataParallel(
                _LossModule(model),
                device_ids=[device.index] if device.type == "cuda" else None,
                find_unused_parameters=True,
                **_NO_FORWARD_BUFFER_SYNC,
            )

    def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        if self._wrapped is None:
            return fn(self.model, *args)
        return self._wrapped(fn, *args)
