"""SNLI as a task: read the premise, a separator, the hypothesis; the label at the last step.

    task = mannlab.tasks.make("snli", vocab_size=2000)

Input per step: the one-hot of the word among the ``vocab_size`` most frequent training
words, else an ``<unk>`` channel, and a separator flag (the step between premise and
hypothesis). The 3-way label (entailment, neutral, contradiction) is scored at the last
hypothesis word (TARDIS 8.4). One-hot words keep the library's dense input interface;
the vocabulary is therefore capped (a learned embedding would need a model wrapper).
No offline copy of SNLI exists on this project's machines.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mannlab.data import snli as snli_data
from mannlab.tasks.base import Example, check_int
from mannlab.tasks.dataset import DatasetTask


def _load(data_dir: str | None, download: bool) -> dict:
    return snli_data.load_snli(("train", "valid", "test"), data_dir, download=download)


class SnliTask(DatasetTask):
    """Premise then hypothesis, 3-way classification at the end (see the module docstring)."""

    name = "snli"
    defaults = {"vocab_size": 2000, "data_dir": None}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.pairs = _load(self.params["data_dir"], self.download)
        self.words = snli_data.vocabulary(self.pairs["train"], self.params["vocab_size"])
        self._word_id = {w: i for i, w in enumerate(self.words)}
        self.input_size = len(self.words) + 2
        self.output_size = len(snli_data.LABELS)
        self.input_names = [*self.words, "<unk>", "sep"]
        self.output_names = list(snli_data.LABELS)
        self.train_length = int(
            np.mean([len(p.premise) + len(p.hypothesis) + 1 for p in self.pairs["train"]])
        )

    def _validate(self, params: dict[str, Any]) -> None:
        super()._validate(params)
        check_int(params, "vocab_size", minimum=1)

    def split_size(self, split: str) -> int:
        return len(self.pairs[split])

    def groups(self, split: str, indices: np.ndarray) -> np.ndarray:
        return np.array([self.pairs[split][i].label for i in indices], np.int64)

    def group_name(self, group: int) -> str:
        return snli_data.LABELS[group]

    def encode(self, split: str, indices: np.ndarray, rng: np.random.Generator) -> list[Example]:
        return [self._example(self.pairs[split][i]) for i in indices]

    def _example(self, pair: snli_data.Pair) -> Example:
        unk, sep = len(self.words), len(self.words) + 1
        ids = (
            [self._word_id.get(w, unk) for w in pair.premise]
            + [sep]
            + [self._word_id.get(w, unk) for w in pair.hypothesis]
        )
        steps = len(ids)
        x = np.zeros((steps, self.input_size), np.float32)
        x[np.arange(steps), ids] = 1.0
        y = np.zeros((steps, self.output_size), np.float32)
        y[-1, pair.label] = 1.0
        mask = np.zeros(steps, np.float32)
        mask[-1] = 1.0
        return x, y, mask
