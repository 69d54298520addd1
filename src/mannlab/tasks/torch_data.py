"""Tasks as torch datasets, for ``torch.utils.data.DataLoader`` (or a Lightning DataModule).

    batches = TaskBatches(task, batch_size=16, seed=0)     # batch i = task.sample(16, [0, i])
    for inputs, targets, mask in DataLoader(batches, batch_size=None, num_workers=2): ...

    split = TaskSplit(task, "valid")                       # data-set tasks: example i of a split
    loader = DataLoader(split, batch_size=32, collate_fn=split.collate)

    segments = TextSegments(task, "train", batch_size=32)  # char LM: TBPTT segments in order
    for x, y in DataLoader(segments, batch_size=None): ...

``TaskBatches`` yields the trainer's batches (``mannlab train`` draws step i's batch as
``task.sample(B, [seed, i])``), already batched, hence ``batch_size=None`` in the loader.
With workers, worker w draws i = w, w + W, ... and the loader interleaves them in order, so
the stream is the same for any number of workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from mannlab.tasks.charlm import num_segments, segment_at


def _worker_share(indices: range) -> range:
    """This DataLoader worker's share of ``indices`` (all of them outside a worker)."""
    info = get_worker_info()
    return indices if info is None else indices[info.id :: info.num_workers]


class TaskBatches(IterableDataset):
    """Batches ``task.sample(batch_size, [seed, i], **sample_args)`` for i = start, start + 1,
    ... up to ``stop`` (None: endless). ``sample_args``: ``length=`` for a generated task,
    ``split=`` for a data-set task."""

    def __init__(
        self,
        task: Any,
        batch_size: int,
        seed: int = 0,
        start: int = 0,
        stop: int | None = None,
        **sample_args: Any,
    ):
        self.task, self.batch_size, self.seed = task, batch_size, seed
        self.start, self.stop, self.sample_args = start, stop, sample_args

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        # range needs an end: an endless stream is a range far past any run's length
        indices = _worker_share(range(self.start, self.stop if self.stop is not None else 2**62))
        for i in indices:
            yield self.task.sample(self.batch_size, [self.seed, i], **self.sample_args)

    def __len__(self) -> int:
        if self.stop is None:
            raise TypeError("an endless TaskBatches has no length (give stop=)")
        return max(0, self.stop - self.start)


class TaskSplit(Dataset):
    """Example ``i`` of a data-set task's ``split`` as (inputs (T, I), targets (T, O),
    mask (T,)) tensors; ``collate`` pads a list of them into a batch as ``task.sample`` does.
    An encoding with randomness (e.g. bAbI's) draws it from a generator seeded by ``i``."""

    def __init__(self, task: Any, split: str = "train"):
        if not hasattr(task, "split_size"):
            raise TypeError(f"{type(task).__name__} has no data-set splits; use TaskBatches")
        self.task, self.split = task, split
        task._check_split(split)

    def __len__(self) -> int:
        return self.task.split_size(self.split)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"example {index} of a split of {len(self)}")
        index %= len(self)
        example = self.task.encode(self.split, np.array([index]), np.random.default_rng(index))[0]
        return tuple(torch.as_tensor(part) for part in example)

    def collate(self, examples: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
        return self.task._pad([tuple(part.numpy() for part in ex) for ex in examples])


class TextSegments(IterableDataset):
    """One pass over a char-LM split cut into ``batch_size`` contiguous streams: segment k
    is (inputs (B, T), next-symbol targets (B, T)), T = ``task.params["bptt"]`` (the last
    shorter). In order and in one process: the state a model carries across segments
    needs them consecutive."""

    def __init__(self, task: Any, split: str, batch_size: int):
        self.streams = task.streams(split, batch_size)
        self.bptt = task.params["bptt"]

    def __len__(self) -> int:
        return num_segments(self.streams, self.bptt)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        worker = get_worker_info()
        if worker is not None and worker.num_workers > 1:
            raise RuntimeError("TextSegments must be read in order: use num_workers <= 1")
        return (segment_at(self.streams, k, self.bptt) for k in range(len(self)))


__all__ = ["TaskBatches", "TaskSplit", "TextSegments"]
