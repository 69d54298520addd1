"""Batch source of contiguous streams for truncated BPTT (the char-LM tasks).

The training set is cut into ``train.batch_size`` contiguous streams; step ``i`` trains on
segment ``i mod S`` of them (S segments of ``task.bptt`` symbols per epoch), and the hidden
state and memory are carried from one segment to the next, detached (ARMIN section 4.2); a
new epoch starts from the initial state. ``train_state.pt`` also holds the carried state, so
a resumed run takes the same steps as an uninterrupted one.

Metrics: train rows ``loss`` (nats per symbol) and ``bpc``; validation rows ``bpc`` on the
valid split (``task.valid_batch_size`` streams, state carried, eval mode); at the end one
``test`` row: the best checkpoint's test BPC (``task.test_batch_size`` streams, 1 by
default: the test split as one sequence).

Data-parallel training: ``train.batch_size`` streams in all, each rank training on its
contiguous slice of them (distributed.rank_rows) and carrying their state; a checkpoint
holds the carried state of all streams (gathered in rank order), so a run resumes on any
number of ranks that divides the streams.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mannlab.config import RunConfig
from mannlab.errors import ConfigError
from mannlab.evaluation.bpc import LN2, evaluate_bpc
from mannlab.models.base import Model
from mannlab.state import detach_state, map_state
from mannlab.tasks.charlm import num_segments, segment_at
from mannlab.training import distributed
from mannlab.training.schedules import start_minibatch
from mannlab.training.source import Finished, Summary, Validation
from mannlab.training.update import apply_update, model_aux_loss


def segment_loss(
    model: Model, x: torch.Tensor, y: torch.Tensor, state: Any
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(loss to minimise, mean cross-entropy per symbol, new state) of segment (x, y) (B, T)
    from ``state``."""
    targets = y.long()
    if model.uses_aux_loss:  # TARDIS with REINFORCE: eq. 17's auxiliary reward needs the targets
        logits, state, trace = model(x, state, return_trace=True)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
        task_loss = nll.mean()
        loss = task_loss + model_aux_loss(
            model,
            trace,
            nll.detach(),
            lambda out: F.cross_entropy(out.transpose(1, 2), targets, reduction="none"),
            outputs_per_step=1,
        )  # the loss is a mean per symbol
    else:
        logits, state = model(x, state)
        loss = task_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return loss, task_loss, state


def tbptt_step(
    model: Model,
    x: torch.Tensor,
    y: torch.Tensor,
    state: Any,
    optimizer: torch.optim.Optimizer,
    clip: float,
) -> tuple[float, Any]:
    """One truncated-BPTT update on segment (x, y) from ``state``; returns the mean loss
    (nats per symbol) and the new state, detached. Raises NonFiniteLossError (without
    updating the weights) when the loss or the gradient is not finite."""
    loss, task_loss, state = segment_loss(model, x, y, state)
    apply_update(model, optimizer, loss, clip)
    return task_loss.item(), detach_state(state)


class StreamSegments:
    """Consecutive TBPTT segments of ``train.batch_size`` streams, state carried."""

    unit = "seg"
    best_field = "best_bpc"
    # the batch size is the stream layout: a resume with another would read other data
    train_invariants: tuple[str, ...] = ("optimizer", "batch_size")
    solves = False

    def __init__(self, config: RunConfig, task: Any, model: Model):
        self.config, self.task = config, task
        self.streams = task.streams("train", config.train.batch_size)  # all ranks' streams
        self.rows = distributed.rank_rows(config.train.batch_size)  # this rank's
        self.bptt = task.params["bptt"]
        self.per_epoch = num_segments(self.streams, self.bptt)
        self.carried: Any = None
        self.axes = batch_axes(model)  # of the state's tensors, to slice and gather them

    def restore(self, state: dict[str, Any], model: Model) -> None:
        carried = state.get("carried")
        if carried is not None:
            batch = self.config.train.batch_size
            unflatten_state(model.initial_state(batch), carried)  # checks the count
            mine = [distributed.shard_along(t, batch, axis) for t, axis in zip(carried, self.axes)]
            self.carried = unflatten_state(model.initial_state(mine[0].shape[self.axes[0]]), mine)

    def batch_name(self, step: int) -> str:
        return ""

    def losses(self, model: Model, step: int, run: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        index = step % self.per_epoch
        if index == 0:
            self.carried = None  # a new epoch starts the streams again
        x, y = segment_at(self.streams[self.rows], index, self.bptt)
        start_minibatch(model, step)  # gumbel temperature
        if run is None:
            loss, task_loss, state = segment_loss(model, x, y, self.carried)
        else:
            loss, task_loss, state = run(segment_loss, x, y, self.carried)
        self.carried = detach_state(state)
        return loss, task_loss

    def epochs(self, step: int) -> float:
        return step / self.per_epoch

    def train_row(
        self, losses: list[tuple[float, float]], step: int
    ) -> tuple[dict[str, float], dict[str, Any]]:
        loss = sum(t for _, t in losses) / len(losses)
        return {"loss": loss, "bpc": loss / LN2}, {"epoch": round(self.epochs(step), 4)}

    def _bpc(self, model: Model, split: str) -> float:
        batch = self.task.params[f"{split}_batch_size"]
        with torch.random.fork_rng(devices=[]):
            return evaluate_bpc(model, self.task.streams(split, batch), self.bptt)

    def validate(self, model: Model) -> Validation:
        bpc = self._bpc(model, "valid")
        return Validation([({"bpc": bpc, "loss": bpc * LN2}, {})], bpc, None, bpc)

    def postfix(self, step: int, train: dict[str, float] | None, val: Any) -> dict[str, str]:
        out = {"epoch": f"{self.epochs(step):.2f}"}
        if train is not None:
            out["bpc"] = f"{train['bpc']:.3f}"
        if val is not None:
            out["val_bpc"] = f"{val:.3f}"
        return out

    def checkpoint_meta(self, step: int, val: Any) -> dict[str, Any]:
        return {"epoch": self.epochs(step), "val_bpc": val}

    def extra_state(self) -> dict[str, Any]:
        if self.carried is None:
            return {"carried": None}
        local = flatten_state(self.carried)
        return {"carried": [distributed.gather_along(t, axis) for t, axis in zip(local, self.axes)]}

    def logged_after_solve(self, metrics: Path, solved_at: int) -> list[float]:
        return []  # a char-LM run is never solved

    def summary(self, model: Model, run: Finished) -> Summary:
        """Test the best checkpoint (``model``): a ``test`` row and the summary fields."""
        progress = run.progress
        test_batch = self.task.params["test_batch_size"]
        start = time.perf_counter()
        test_bpc = self._bpc(model, "test")
        test_seconds = time.perf_counter() - start
        row = (
            "test",
            {"bpc": test_bpc, "loss": test_bpc * LN2},
            {"checkpoint_step": progress.best_step, "batch": test_batch},
        )
        return Summary(
            [row],
            {
                "epochs": round(self.epochs(progress.step), 4),
                "segments_per_epoch": self.per_epoch,
                "symbols_per_step": int(self.streams.shape[0] * self.bptt),
                "best_val": {"step": progress.best_step, "bpc": progress.best},
                "final_val": {"step": run.last_val_step, "bpc": run.last_val},
                "test": {
                    "bpc": test_bpc,
                    "checkpoint": "best",
                    "step": progress.best_step,
                    "batch_size": test_batch,
                    "symbols": int(self.task.split("test").numel()),
                    "seconds": round(test_seconds, 3),
                },
            },
        )


# ------------------------------------------------------------------ states


def flatten_state(state: Any) -> list[torch.Tensor]:
    """The tensors of a nested NamedTuple state, in order (for weights-only train_state.pt)."""
    tensors: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        tensors.append(t.detach().clone())
        return t

    map_state(keep, state)
    return tensors


def batch_axes(model: Model) -> list[int]:
    """The batch axis of each tensor of ``model``'s state (flatten_state's order): the axis
    whose size follows the batch (an LSTM's state is (layers, B, H), the memories' (B, ...))."""
    one, two = flatten_state(model.initial_state(1)), flatten_state(model.initial_state(2))
    return [next(i for i, (p, q) in enumerate(zip(a.shape, b.shape)) if p != q) for a, b in zip(one, two)]


def unflatten_state(template: Any, tensors: list[torch.Tensor]) -> Any:
    """Rebuild a state shaped like ``template`` from flatten_state's list."""
    count = len(flatten_state(template))
    if count != len(tensors):
        raise ConfigError(f"the saved carried state has {len(tensors)} tensors, the model's state {count}")
    items = iter(tensors)
    return map_state(lambda _: next(items), template)
