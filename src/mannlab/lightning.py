"""Lightning for any registered model on any task (``pip install "mannlab[lightning]"``).

    import lightning as L
    import mannlab
    from mannlab.lightning import MannModule, TaskDataModule

    task = mannlab.tasks.make("copy", max_length=10)
    module = MannModule("ntm", task, lr=1e-4)              # a name and its kwargs, or a model
    data = TaskDataModule(task, batch_size=16, seed=0)
    L.Trainer(max_steps=5000, val_check_interval=500, gradient_clip_val=10).fit(module, data)

The module trains as ``mannlab train`` does, through the same functions: the task loss plus
the model's auxiliary loss (REINFORCE and friends, ``uses_aux_loss``), the per-minibatch
schedules (D-NTM curriculum, gumbel temperature) from ``trainer.global_step``, and for the
char-LM tasks truncated BPTT with the state carried, detached, from one segment to the next
(reset at each epoch, i.e. each pass over the training streams). The train stream of a
sampled task is endless (batch i = ``task.sample(B, [seed, i])``), so give ``max_steps`` and
an integer ``val_check_interval``. Validation logs the task's metrics (``val/bce``, ...) on
fixed batches, or ``val/bpc`` over the valid split for char-LM tasks. ``import mannlab``
never imports this module, so Lightning stays optional.

A checkpoint reloads with ``MannModule.load_from_checkpoint(path)``: the module saves the
hyperparameters that build its model and task again (the model's name and arguments, or a
module's ``mannlab.save`` description; the task's name and parameters). A module mannlab
cannot describe (not a registered model) is passed again: ``load_from_checkpoint(path,
model=module)``. The file is read with ``torch.load(weights_only=True)`` whatever the
PyTorch version (no pickled code runs), and checked before it loads: a file that is not a
MannModule's checkpoint, hyperparameters that build no module, or weights of another name,
shape or dtype, or not finite, are a CheckpointError in one line.
"""

from __future__ import annotations

import io
from typing import IO, Any, cast

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

from mannlab import tasks
from mannlab.config import RunConfig, TrainConfig
from mannlab.errors import CheckpointError, ConfigError
from mannlab.evaluation.bpc import LN2
from mannlab.loading.saved import build_described, describe
from mannlab.models.base import Model
from mannlab.rundir.lightning_checkpoint import read_lightning_checkpoint, weights_only_globals
from mannlab.rundir.weights_check import check_finite, weight_problems
from mannlab.state import detach_state
from mannlab.tasks.torch_data import TaskBatches, TextSegments
from mannlab.training.optimizer import make_optimizer
from mannlab.training.sampled import VAL_SEED_OFFSET
from mannlab.training.schedules import start_minibatch
from mannlab.training.tbptt import segment_loss
from mannlab.training.update import sequence_loss
from mannlab.wrappers import model_for_task


def _streams(task: Any) -> bool:
    return task.batching == "streams"


class _Batches(IterableDataset):
    """A batched dataset's batches without its ``__len__``: Lightning warns at every fit that a
    sized IterableDataset may miscount under several workers (TaskBatches shares its indices
    among workers, so it does not); without a length Lightning runs each loader to its end."""

    def __init__(self, dataset: IterableDataset):
        self.dataset = dataset

    def __iter__(self):
        return iter(self.dataset)


class MannModule(L.LightningModule):
    """``model`` (a registered name, built for ``task`` with ``model_args`` behind the
    adapter the task needs, or a module) trained on ``task`` (a task, or its name with
    ``task_args``) with mannlab's optimizer (``optimizer`` "rmsprop" or "adam", ``lr``; the
    other settings are TrainConfig's)."""

    def __init__(
        self,
        model: str | torch.nn.Module | dict[str, Any] | None,
        task: Any,
        lr: float = 1e-4,
        optimizer: str = "rmsprop",
        task_args: dict[str, Any] | None = None,
        **model_args: Any,
    ):
        super().__init__()
        if not isinstance(model, (str, torch.nn.Module, dict, type(None))):
            raise TypeError(
                "model must be a registered model's name, a module or a mannlab.save description, "
                f"got {model!r}"
            )
        if not isinstance(task, str) and not (hasattr(task, "name") and hasattr(task, "params")):
            raise TypeError(f"task must be a task or a task's name, got {task!r}")
        if isinstance(task, str):
            task = tasks.make(task, **(task_args or {}))
        elif task_args:
            raise TypeError(f"task arguments {sorted(task_args)} need a task name, not a task")
        if isinstance(model, torch.nn.Module) and model_args:
            raise TypeError(f"model arguments {sorted(model_args)} need a model name, not a module")
        if model is None:
            raise TypeError(
                "this checkpoint's model is a module mannlab cannot rebuild: pass it again, "
                "MannModule.load_from_checkpoint(path, model=module)"
            )
        if isinstance(model, str):
            described: str | dict[str, Any] | None = model
            name, model = model, model_for_task(task, model, **model_args)
            # what mannlab.save writes for a model behind a task adapter (char LM, SST, bAbI)
            # torch's stub types Module.__setattr__ for tensors and modules only; any value is kept
            config = RunConfig(model=name, task=task.name, model_args=model_args, task_args=task.params)
            model.config = config  # type: ignore[assignment]
        elif isinstance(model, dict):
            described, model = model, build_described(model, "the checkpoint's hyperparameters")[0]
        else:
            try:
                described = describe(model)
            except TypeError:
                described = None  # load_from_checkpoint then needs model= again
        self.model, self.task = model, task
        self.optimizer_config = TrainConfig.from_dict({"optimizer": optimizer, "lr": lr})  # types checked
        self.carried: dict[str, Any] = {}  # TBPTT state per split, detached
        # what load_from_checkpoint passes back to __init__ (and loggers write as hparams)
        self.save_hyperparameters(
            {
                "model": described,
                "task": task.name,
                "task_args": task.params,
                "lr": lr,
                "optimizer": optimizer,
                **model_args,
            }
        )

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | Any | IO[bytes],
        map_location: Any = None,
        hparams_file: Any = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> "MannModule":
        """Lightning's ``load_from_checkpoint``, reading the file with ``weights_only=True``
        on every PyTorch (``weights_only=False`` is refused: mannlab never unpickles code)
        and checking it first (see the module); ``kwargs`` replace saved hyperparameters."""
        if weights_only is False:
            raise ValueError(
                "mannlab never unpickles code: MannModule checkpoints load with weights_only=True"
            )
        data, checkpoint = read_lightning_checkpoint(checkpoint_path)
        name = str(checkpoint_path) if not hasattr(checkpoint_path, "read") else "the checkpoint"
        if hparams_file is None:  # else Lightning merges the file's hyperparameters in
            _check_checkpoint(cls, checkpoint, name, strict is not False, kwargs)
        try:
            with weights_only_globals():
                return super().load_from_checkpoint(
                    io.BytesIO(data),
                    map_location=map_location,
                    hparams_file=hparams_file,
                    strict=strict,
                    weights_only=True,
                    **kwargs,
                )
        except (RuntimeError, KeyError, TypeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise CheckpointError(
                f"{name} does not load into a MannModule ({type(exc).__name__}: {first})"
            ) from None

    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        return self.model(x, state)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.model, self.optimizer_config)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        # a mannlab model or adapter, or any module with the trainer's interface (begin_step, ...)
        model = cast(Model, self.model)
        start_minibatch(model, self.global_step)  # e.g. the D-NTM curriculum, the temperature
        if _streams(self.task):
            x, y = batch
            loss, task_loss, state = segment_loss(model, x, y, self.carried.get("train"))
            self.carried["train"] = detach_state(state)
            name = "ce"
        else:
            loss, task_loss = sequence_loss(model, self.task, *batch[:3])
            name = self.task.loss_key
        self.log("train/loss", loss, batch_size=len(batch[0]))
        self.log(f"train/{name}", task_loss, prog_bar=True, batch_size=len(batch[0]))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if _streams(self.task):
            x, y = batch
            logits, self.carried["val"] = self.model(x, self.carried.get("val"))
            ce = F.cross_entropy(logits.transpose(1, 2), y.long())
            # weighted by symbols, the epoch mean is the split's exact BPC
            self.log("val/bpc", ce / LN2, prog_bar=True, batch_size=y.numel())
            return
        inputs, targets, mask = batch[:3]
        metrics = self.task.metrics(self.model(inputs)[0], targets, mask)
        for key, value in metrics.items():
            self.log(f"val/{key}", value, prog_bar=key == self.task.loss_key, batch_size=len(inputs))

    # a pass over the streams starts from the initial state, as mannlab's TBPTT epochs do
    def on_train_epoch_start(self) -> None:
        self.carried.pop("train", None)

    def on_validation_epoch_start(self) -> None:
        self.carried.pop("val", None)


def _check_checkpoint(
    cls: type[MannModule], checkpoint: dict[str, Any], name: str, strict: bool, kwargs: dict[str, Any]
) -> None:
    """CheckpointError unless the checkpoint's hyperparameters (with ``kwargs`` over them)
    build a module whose weights its state_dict holds: every name (when ``strict``), shape
    and dtype the module's, every value finite."""
    try:
        module = cls(**{**checkpoint["hyper_parameters"], **kwargs})
    except CheckpointError as exc:
        raise CheckpointError(f"{name}: {exc}") from None
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(
            f"{name}: its hyper_parameters do not build a MannModule ({type(exc).__name__}: "
            f"{str(exc)[:300]}); was it saved from another module?"
        ) from None
    expected, found = module.state_dict(), checkpoint["state_dict"]
    if not strict:  # Lightning then loads the names both have
        expected = {k: v for k, v in expected.items() if k in found}
        found = {k: v for k, v in found.items() if k in expected}
    problems = weight_problems(expected, found)
    if problems:
        raise CheckpointError(
            f"{name}: its weights do not fit the module its hyper_parameters build ({'; '.join(problems)})"
        )
    check_finite(found, name)


class TaskDataModule(L.LightningDataModule):
    """The data of ``mannlab train`` as loaders: training batch i = ``task.sample(batch_size,
    [seed, i])`` (resumed runs continue at ``trainer.global_step``), validation on
    ``val_batches`` fixed batches (the ``valid`` split of a data-set task); for a char-LM
    task, the train and valid splits as ``batch_size`` (``task.valid_batch_size``) streams
    in TBPTT segments."""

    def __init__(
        self,
        task: Any,
        batch_size: int = 16,
        seed: int = 0,
        val_batch_size: int = 32,
        val_batches: int = 2,
        num_workers: int = 0,
    ):
        super().__init__()
        self.task, self.batch_size, self.seed = task, batch_size, seed
        self.val_batch_size, self.val_batches, self.num_workers = val_batch_size, val_batches, num_workers
        # data-set tasks train on "train" and validate on "valid"
        self.splits = task.splits

    def _loader(self, dataset: Any, workers: int) -> DataLoader:
        return DataLoader(_Batches(dataset), batch_size=None, num_workers=workers)  # already batched

    def train_dataloader(self) -> DataLoader:
        if _streams(self.task):
            return self._loader(TextSegments(self.task, "train", self.batch_size), 0)
        start = self.trainer.global_step if self.trainer is not None else 0
        split: dict[str, Any] = {"split": "train"} if self.splits else {}
        return self._loader(
            TaskBatches(self.task, self.batch_size, self.seed, start=start, **split), self.num_workers
        )

    def val_dataloader(self) -> DataLoader:
        if _streams(self.task):
            batch = self.task.params["valid_batch_size"]
            return self._loader(TextSegments(self.task, "valid", batch), 0)
        split = {"split": "valid"} if self.splits else {}
        return self._loader(
            TaskBatches(
                self.task,
                self.val_batch_size,
                self.seed,
                start=VAL_SEED_OFFSET,
                stop=VAL_SEED_OFFSET + self.val_batches,
                **split,
            ),
            0,
        )


__all__ = ["MannModule", "TaskDataModule"]
