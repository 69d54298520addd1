"""enwik8 next-byte prediction as a task: windows of ``length`` bytes, every step scored.

    task = mannlab.tasks.make("enwik8", length=100)

Input: the one-hot of byte t (256 channels); target: byte t + 1. The splits are the
90M / 5M / 5M bytes of ``mannlab.data.enwik8`` (``split_sizes`` changes them, for small
copies); a split's examples are its consecutive non-overlapping windows, and ``sample``
draws windows at random. ``error`` is the fraction of bytes mispredicted; ``ce`` is the
cross-entropy in nats per byte (bits per character = ce / ln 2). For the papers'
protocol with state carried across segments see ``mannlab.tasks.charlm``. No offline
copy of enwik8 exists on this project's machines.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mannlab.data import enwik8 as enwik8_data
from mannlab.errors import ConfigError
from mannlab.tasks.base import Example, check_int
from mannlab.tasks.dataset import DatasetTask


def _load(data_dir: str | None, sizes: tuple[int, int, int], download: bool) -> dict[str, np.ndarray]:
    splits = enwik8_data.load_enwik8(data_dir, sizes, download=download)
    return {k: np.frombuffer(v, np.uint8) for k, v in splits.items()}


class Enwik8Task(DatasetTask):
    """Byte-level language modelling on enwik8 windows (see the module docstring)."""

    name = "enwik8"
    defaults = {"length": 100, "split_sizes": list(enwik8_data.SPLIT), "data_dir": None}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.bytes = _load(self.params["data_dir"], tuple(self.params["split_sizes"]), self.download)
        self.input_size = self.output_size = 256
        self.train_length = self.params["length"]
        self.input_names = self.output_names = [f"{b:02x}" for b in range(256)]

    def _validate(self, params: dict[str, Any]) -> None:
        super()._validate(params)
        check_int(params, "length", minimum=1)
        sizes = params["split_sizes"]
        if (
            not isinstance(sizes, (list, tuple))
            or len(sizes) != 3
            or any(not isinstance(s, int) or isinstance(s, bool) or s < 2 for s in sizes)
        ):
            raise ConfigError(f"split_sizes must be three byte counts (train, valid, test), got {sizes!r}")
        params["split_sizes"] = [int(s) for s in sizes]

    def split_size(self, split: str) -> int:
        return (len(self.bytes[split]) - 1) // self.params["length"]

    def encode(self, split: str, indices: np.ndarray, rng: np.random.Generator) -> list[Example]:
        length, data = self.params["length"], self.bytes[split]
        eye = np.eye(256, dtype=np.float32)
        out = []
        for i in indices:
            window = data[i * length : i * length + length + 1]
            out.append((eye[window[:-1]], eye[window[1:]], np.ones(length, np.float32)))
        return out
