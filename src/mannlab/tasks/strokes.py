"""Multi-digit pen-stroke MNIST (TARDIS section 8.2): read the strokes of k digits, then
emit the k digits in order.

    task = mannlab.tasks.make("strokes", digits=5)
    inputs, targets, mask = task.sample(16, seed)       # teacher forcing (training)
    result = evaluate_feedback(model, task, "test")     # predictions fed back, per-digit error

A sequence concatenates the stroke rows of ``digits`` random digits of the split (each
digit's start set to (0, 0)), then ``digits`` output steps. Input channels: ``dx, dy, eos,
eod`` (stroke rows, zero on output steps), ``bos`` (1 on the first output step) and the
one-hot of the previous digit (on output steps 2..k: the true digit while training, the
model's own prediction in ``evaluate_feedback``). The target of output step j is digit j;
only output steps are scored, so ``error`` is the per-digit error rate.

Splits: "train" draws digits from the MNIST training digits minus ``valid_size`` held out
with ``split_seed`` ("valid"); "test" from the test digits. Sequence i of a split is fixed
(its digits come from a generator seeded with ``[split_seed, split, i]``); a split has
``train_sequences`` (train) or ``eval_sequences`` (valid, test) sequences, as the paper's
200,000 and 20,000.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mannlab.data import strokes as strokes_data
from mannlab.errors import ConfigError
from mannlab.tasks.base import Example, check_int
from mannlab.tasks.dataset import DatasetTask

_SPLIT_CODE = {"train": 0, "valid": 1, "test": 2}
STROKE_CHANNELS = 4


def _load(data_dir: str | None, download: bool) -> dict[str, strokes_data.StrokeSet]:
    return {
        split: strokes_data.load_strokes(split, data_dir, download=download) for split in ("train", "test")
    }


class StrokesTask(DatasetTask):
    """Sequential multi-digit stroke MNIST (see the module docstring)."""

    name = "strokes"
    defaults = {
        "digits": 5,
        "valid_size": 5000,
        "split_seed": 0,
        "train_sequences": 200_000,
        "eval_sequences": 20_000,
        "data_dir": None,
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        p = self.params
        loaded = _load(p["data_dir"], self.download)
        train = loaded["train"]
        if p["valid_size"] >= len(train):
            raise ConfigError(
                f"valid_size must be < {len(train)} (the training digits), got {p['valid_size']}"
            )
        order = np.random.default_rng(p["split_seed"]).permutation(len(train))
        self.digits = {
            "train": train.subset(np.sort(order[p["valid_size"] :])),
            "valid": train.subset(np.sort(order[: p["valid_size"]])),
            "test": loaded["test"],
        }
        self.input_size = STROKE_CHANNELS + 1 + 10
        self.output_size = 10
        mean_rows = float(np.diff(train.offsets).mean())
        self.train_length = int(round(p["digits"] * (mean_rows + 1)))
        self.input_names = ["dx", "dy", "eos", "eod", "bos"] + [f"prev{d}" for d in range(10)]
        self.output_names = [str(d) for d in range(10)]

    def _validate(self, params: dict[str, Any]) -> None:
        super()._validate(params)
        check_int(params, "digits", minimum=1)
        check_int(params, "valid_size", minimum=1)
        check_int(params, "split_seed", minimum=0)
        check_int(params, "train_sequences", minimum=1)
        check_int(params, "eval_sequences", minimum=1)

    def split_size(self, split: str) -> int:
        return self.params["train_sequences" if split == "train" else "eval_sequences"]

    def extra_results(self, model: Any, split: str, limit: int | None, batch_size: int) -> dict[str, Any]:
        """``fed_back``: the paper's test protocol, the model's predictions fed back
        (``evaluate_feedback``)."""
        return {"fed_back": evaluate_feedback(model, self, split, limit, batch_size)}

    def digit_indices(self, split: str, index: int) -> np.ndarray:
        """Which digits of the split sequence ``index`` of ``split`` is made of (fixed)."""
        rng = np.random.default_rng([self.params["split_seed"], _SPLIT_CODE[split], int(index)])
        return rng.integers(len(self.digits[split]), size=self.params["digits"])

    def encode(self, split: str, indices: np.ndarray, rng: np.random.Generator | None) -> list[Example]:
        return [self._example(split, self.digit_indices(split, i)) for i in indices]

    def _example(self, split: str, chosen: np.ndarray) -> Example:
        data, k = self.digits[split], len(chosen)
        strokes = np.concatenate([data[i] for i in chosen]).astype(np.float32)
        labels = data.labels[chosen]
        n = len(strokes)
        x = np.zeros((n + k, self.input_size), np.float32)
        x[:n, :STROKE_CHANNELS] = strokes
        x[n, STROKE_CHANNELS] = 1.0  # <bos>
        x[n + 1 + np.arange(k - 1), STROKE_CHANNELS + 1 + labels[:-1]] = 1.0  # previous digit
        y = np.zeros((n + k, 10), np.float32)
        y[n + np.arange(k), labels] = 1.0
        mask = np.zeros(n + k, np.float32)
        mask[n:] = 1.0
        return x, y, mask


def decode_feedback(
    model: torch.nn.Module, task: StrokesTask, inputs: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """(B, k) digits predicted greedily, each prediction fed back as the next step's input.

    Sequences of one batch must have the same number of stroke rows (``evaluate_feedback``
    groups them so). The model runs over the strokes and <bos> once, then one step per digit,
    carrying its state."""
    k = task.params["digits"]
    first = int(mask[0].nonzero()[0])
    if not bool((mask[:, first] > 0).all()) or mask.shape[1] != first + k:
        raise ValueError("decode_feedback needs sequences with equally many stroke rows")
    logits, state = model(inputs[:, : first + 1])
    predicted = [logits[:, -1].argmax(-1)]
    for _ in range(k - 1):
        step = torch.zeros(inputs.shape[0], 1, task.input_size, dtype=inputs.dtype)
        step[torch.arange(inputs.shape[0]), 0, STROKE_CHANNELS + 1 + predicted[-1]] = 1.0
        logits, state = model(step, state)
        predicted.append(logits[:, -1].argmax(-1))
    return torch.stack(predicted, dim=1)


def evaluate_feedback(
    model: torch.nn.Module,
    task: StrokesTask,
    split: str = "test",
    limit: int | None = None,
    batch_size: int = 100,
) -> dict[str, Any]:
    """Per-digit and per-sequence error over the first ``limit`` sequences of ``split`` with
    the model's predictions fed back (the paper's test protocol). Eval mode, no gradients.
    Sequences with equally many stroke rows are decoded together, in batches of ``batch_size``."""
    total = task.split_size(split) if limit is None else min(limit, task.split_size(split))
    rows_per_digit = np.diff(task.digits[split].offsets)
    rows = np.array([rows_per_digit[task.digit_indices(split, i)].sum() for i in range(total)])
    wrong = digits = wrong_sequences = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for n in np.unique(rows):
                same = np.flatnonzero(rows == n)
                for start in range(0, len(same), batch_size):
                    x, y, m = task._pad(task.encode(split, same[start : start + batch_size], None))
                    errors = (decode_feedback(model, task, x, m) != y[:, n:].argmax(-1)).sum(1)
                    wrong += int(errors.sum())
                    digits += errors.numel() * task.params["digits"]
                    wrong_sequences += int((errors > 0).sum())
    finally:
        model.train(was_training)
    return {
        "split": split,
        "sequences": total,
        "digit_error": wrong / max(digits, 1),
        "sequence_error": wrong_sequences / max(total, 1),
    }
