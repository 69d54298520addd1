"""Dynamic N-grams (Graves et al. 2014): predict the next bit of a random N-gram source,
with the Bayes-optimal predictor as a reference score."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mannlab.tasks.base import Example, Task, check_int


class NGramsTask(Task):
    """Dynamic N-grams: each sequence is drawn from its own random N-gram table.

    Params: ``n`` (the order; a bit depends on the n-1 bits before it) and
    ``length`` L, the number of bits of a sequence (``length`` of ``sample``).

    Generation, per sequence: for each of the 2^(n-1) contexts, P(1 | context)
    ~ Beta(1/2, 1/2); bits b_0..b_{n-2} are uniform, then each b_t is drawn with
    the probability of the context b_{t-n+1}..b_{t-1}.

    Channels: one input, one output. Time layout (T = L - 1, no padding):
    step t = 0..L-2 has input b_t, target b_{t+1}, mask 1.
    """

    name = "ngrams"
    length_name = "number of bits"
    defaults = {"n": 6, "length": 200}
    min_length = 2

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.input_size = 1
        self.output_size = 1
        self.train_length = self.params["length"]
        self.input_names = ["bit"]
        self.output_names = ["next"]

    def _validate(self, p: dict[str, Any]) -> None:
        check_int(p, "n", minimum=1, maximum=20)  # the table has 2^(n-1) entries per sequence
        check_int(p, "length", minimum=2)

    def _generate(self, rng: np.random.Generator, batch_size: int, length: int | None) -> list[Example]:
        # Vectorised over the batch: one Python step per bit, not per bit and sequence.
        n = self.params["n"]
        steps = self.params["length"] if length is None else length
        contexts = 2 ** (n - 1)
        table = rng.beta(0.5, 0.5, size=(batch_size, contexts))
        bits = np.zeros((batch_size, steps), np.int64)
        head = min(n - 1, steps)
        bits[:, :head] = rng.integers(0, 2, size=(batch_size, head))
        rows = np.arange(batch_size)
        ctx = np.zeros(batch_size, np.int64)  # the last n-1 bits, oldest most significant
        for t in range(head):
            ctx = ((ctx << 1) | bits[:, t]) & (contexts - 1)
        for t in range(head, steps):
            bits[:, t] = rng.random(batch_size) < table[rows, ctx]
            ctx = ((ctx << 1) | bits[:, t]) & (contexts - 1)
        x = bits[:, :-1, None].astype(np.float32)
        y = bits[:, 1:, None].astype(np.float32)
        m = np.ones((batch_size, steps - 1), np.float32)
        return [(x[b], y[b], m[b]) for b in range(batch_size)]

    def optimal_bce(self, inputs: torch.Tensor | None, targets: torch.Tensor, mask: torch.Tensor) -> float:
        """Per-bit BCE (nats) of the Bayes-optimal predictor over the scored steps.

        At step t it predicts P(b_{t+1} = 1) = (N1 + 1/2) / (N0 + N1 + 1), where N0, N1
        count the 0s and 1s that followed the current context earlier in the same
        sequence (the Beta(1/2, 1/2) posterior mean), and 1/2 while fewer than n-1
        bits have been seen. ``inputs`` give b_0; without them (``None``) b_0 is
        unknown and the count from the first context is missing, a close estimate.
        """
        y = targets.detach().cpu().double().numpy()[:, :, 0].round().astype(np.int64)
        m = mask.detach().cpu().double().numpy()
        if inputs is not None:
            first = inputs.detach().cpu().double().numpy()[:, :1, 0].round().astype(np.int64)
            nll = _bayes_nll(np.concatenate([first, y], axis=1), self.params["n"])
        else:
            rest = _bayes_nll(y, self.params["n"])
            nll = np.concatenate([np.full((len(y), 1), np.log(2.0)), rest], axis=1)
        return float((nll * m).sum() / max(m.sum(), 1.0))

    def metrics(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        inputs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """The base metrics plus ``optimal_bce`` (exact when ``inputs`` are given)."""
        out = super().metrics(logits, targets, mask)
        out["optimal_bce"] = self.optimal_bce(inputs, targets, mask)
        return out


def _bayes_nll(bits: np.ndarray, n: int) -> np.ndarray:
    """(B, L-1) negative log-probability of b_{t+1} under the Bayes-optimal predictor
    that has seen b_0..b_t, for bits (B, L) of 0/1 ints."""
    batch, steps = bits.shape
    contexts = 2 ** (n - 1)
    counts = np.zeros((batch, contexts, 2))
    rows = np.arange(batch)
    ctx = np.zeros(batch, np.int64)
    nll = np.zeros((batch, max(steps - 1, 0)))
    for t in range(steps - 1):
        ctx = ((ctx << 1) | bits[:, t]) & (contexts - 1)
        if t + 1 < n - 1:  # no full context yet
            nll[:, t] = np.log(2.0)
            continue
        n0, n1 = counts[rows, ctx, 0], counts[rows, ctx, 1]
        p1 = (n1 + 0.5) / (n0 + n1 + 1.0)
        nxt = bits[:, t + 1]
        nll[:, t] = -np.log(np.where(nxt == 1, p1, 1.0 - p1))
        counts[rows, ctx, nxt] += 1
    return nll
