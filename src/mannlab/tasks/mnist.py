"""Sequential and permuted MNIST: pixels one by one, the digit's class at the last step.

    task = mannlab.tasks.make("mnist", permuted=True, permutation_seed=0)
    inputs, targets, mask = task.sample(32, seed)          # (32, 784, 1), (32, 784, 10), (32, 784)

Pixels are scaled to [0, 1] and read in scan-line order (left to right, top to bottom;
Le et al. 2015) or, with ``permuted``, in one fixed order drawn from ``permutation_seed``
(the same for every sequence and every run with that seed: D-NTM section 7.2).
``pixels_per_step`` > 1 feeds that many consecutive pixels per step (28: row by row).
Splits: "train" (the 60k training images minus ``valid_size`` held out at random with
``split_seed``), "valid", "test" (the 10k test images).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mannlab.data import mnist as mnist_data
from mannlab.errors import ConfigError
from mannlab.tasks.base import Example, check_bool, check_int
from mannlab.tasks.dataset import DatasetTask

PIXELS = 28 * 28


def _load(data_dir: str | None, download: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {split: mnist_data.load_mnist(split, data_dir, download=download) for split in ("train", "test")}


class MnistTask(DatasetTask):
    """Pixel-by-pixel (permuted) MNIST classification (see the module docstring)."""

    name = "mnist"
    defaults = {
        "permuted": False,
        "permutation_seed": 0,
        "pixels_per_step": 1,
        "valid_size": 5000,
        "split_seed": 0,
        "data_dir": None,
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        p = self.params
        loaded = _load(p["data_dir"], self.download)
        images, labels = loaded["train"]
        if p["valid_size"] >= len(images):
            raise ConfigError(
                f"valid_size must be < {len(images)} (the training images), got {p['valid_size']}"
            )
        order = np.random.default_rng(p["split_seed"]).permutation(len(images))
        held, kept = order[: p["valid_size"]], np.sort(order[p["valid_size"] :])
        self.images = {"train": images[kept], "valid": images[np.sort(held)], "test": loaded["test"][0]}
        self.labels = {"train": labels[kept], "valid": labels[np.sort(held)], "test": loaded["test"][1]}
        self.order = (
            mnist_data.permutation(PIXELS, p["permutation_seed"]) if p["permuted"] else np.arange(PIXELS)
        )
        self.input_size = p["pixels_per_step"]
        self.output_size = 10
        self.train_length = PIXELS // p["pixels_per_step"]
        self.input_names = [f"px{i}" for i in range(self.input_size)]
        self.output_names = [str(d) for d in range(10)]

    def _validate(self, params: dict[str, Any]) -> None:
        super()._validate(params)
        check_bool(params, "permuted")
        check_int(params, "permutation_seed", minimum=0)
        check_int(params, "split_seed", minimum=0)
        check_int(params, "valid_size", minimum=1)
        step = check_int(params, "pixels_per_step", minimum=1, maximum=PIXELS)
        if PIXELS % step:
            raise ConfigError(f"pixels_per_step must divide {PIXELS}, got {step}")

    def split_size(self, split: str) -> int:
        return len(self.labels[split])

    def groups(self, split: str, indices: np.ndarray) -> np.ndarray:
        """The digit, so ``evaluate_split`` reports the error per class."""
        return self.labels[split][indices]

    def pixels(self, split: str, indices: np.ndarray) -> np.ndarray:
        """(len(indices), 784) float32 pixels in [0, 1], in the task's reading order."""
        flat = self.images[split][indices].reshape(len(indices), PIXELS)
        return flat[:, self.order].astype(np.float32) / 255.0

    def encode(self, split: str, indices: np.ndarray, rng: np.random.Generator) -> list[Example]:
        steps = self.train_length
        x = self.pixels(split, indices).reshape(len(indices), steps, self.input_size)
        out = []
        for b, label in enumerate(self.labels[split][indices]):
            y = np.zeros((steps, 10), np.float32)
            y[-1, label] = 1.0
            mask = np.zeros(steps, np.float32)
            mask[-1] = 1.0
            out.append((x[b], y, mask))
        return out

    def render(self, inputs, targets, mask, logits=None, index: int = 0) -> str:
        """The digit as 28 rows of characters (in scan-line order even when permuted)."""
        flat = np.zeros(PIXELS, np.float32)
        flat[self.order] = inputs[index].reshape(-1).cpu().numpy()
        rows = [
            "".join(" .:-=+*#%@"[min(int(v * 10), 9)] for v in flat[r * 28 : (r + 1) * 28]) for r in range(28)
        ]
        text = [f"mnist [{index}]: label {int(targets[index, -1].argmax())}"]
        if logits is not None:
            text[0] += f", predicted {int(logits[index, -1].argmax())}"
        return "\n".join(text + rows)
