"""Algorithmic tasks of the memory-network papers: copy and its permutations,
repeat copy, associative recall and priority sort, with the ARMIN authors' column-sorting
variant of it (N-grams live in ngrams.py).

Every class documents its time layout; "step t" is a row of the (T, channels)
arrays of one sequence, before batch padding (see base.py). Bits are drawn with
p = 1/2 and every random draw comes from the numpy generator given to ``sample``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch

from mannlab.errors import ConfigError
from mannlab.tasks.base import Example, Task, check_bool, check_int, check_order, signed_unit_char
from mannlab.tasks.ngrams import NGramsTask

__all__ = [
    "CopyTask",
    "ReverseTask",
    "BigramFlipTask",
    "OddFirstTask",
    "RepeatCopyTask",
    "AssociativeRecallTask",
    "PrioritySortTask",
    "PrioritySortColumnsTask",
    "NGramsTask",
]


def _bits(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(0, 2, size=shape).astype(np.float32)


def _draw(rng: np.random.Generator, low: int, high: int, length: int | None) -> int:
    """``length`` if given, else an integer uniform in [low, high]."""
    return length if length is not None else int(rng.integers(low, high + 1))


class CopyTask(Task):
    """Copy (Graves et al. 2014): read a random bit sequence, then write it back.

    Params: ``width`` bits per element, sequence length L uniform in
    [``min_length``, ``max_length``], ``end_marker``. ``length`` = L.

    Channels: inputs ``width + 1`` (channel ``width`` = delimiter); outputs
    ``width``, or ``width + 1`` with ``end_marker`` (channel ``width`` = end).

    Time layout (T = 2L + 1, or 2L + 2 with ``end_marker``):

    - steps 0..L-1: input = element a_1..a_L on the data channels; mask 0
    - step L: input = delimiter only; mask 0
    - steps L+1..2L: zero input; target = the output sequence; mask 1
    - step 2L+1 (only with ``end_marker``, as in the partially non-recurrent
      controllers paper): zero input; target = end channel only; mask 1.
      The end channel target is 0 on the steps L+1..2L.

    The output sequence is ``a[permutation(L)]``: the identity for copy;
    subclasses only change ``permutation``.
    """

    name = "copy"
    length_name = "sequence length"
    defaults = {"width": 8, "min_length": 1, "max_length": 20, "end_marker": False}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        width, end = self.params["width"], self.params["end_marker"]
        self.input_size = width + 1
        self.output_size = width + int(end)
        self.train_length = self.params["max_length"]
        self.input_names = [str(c) for c in range(width)] + ["delim"]
        self.output_names = [str(c) for c in range(width)] + (["end"] if end else [])

    def _validate(self, p: dict[str, Any]) -> None:
        check_int(p, "width")
        check_int(p, "min_length")
        check_int(p, "max_length")
        check_order(p, "min_length", "max_length")
        check_bool(p, "end_marker")

    @staticmethod
    def permutation(length: int) -> np.ndarray:
        """Indices (0-based) of the input elements in output order."""
        return np.arange(length)

    def source_steps(self, inputs: torch.Tensor) -> np.ndarray:
        """Output step L+1+i copies input step permutation(L)[i]."""
        delimiters = inputs[..., self.params["width"]].detach().cpu().numpy()
        sources = np.full(delimiters.shape, -1, np.int64)
        for b, row in enumerate(delimiters):
            n = int(np.argmax(row > 0.5))
            sources[b, n + 1 : 2 * n + 1] = self.permutation(n)
        return sources

    def _sequence(self, rng: np.random.Generator, length: int | None) -> Example:
        width, end = self.params["width"], int(self.params["end_marker"])
        n = _draw(rng, self.params["min_length"], self.params["max_length"], length)
        seq = _bits(rng, n, width)
        steps = 2 * n + 1 + end
        x = np.zeros((steps, self.input_size), np.float32)
        y = np.zeros((steps, self.output_size), np.float32)
        m = np.zeros(steps, np.float32)
        x[:n, :width] = seq
        x[n, width] = 1.0
        y[n + 1 : 2 * n + 1, :width] = seq[self.permutation(n)]
        m[n + 1 :] = 1.0
        if end:
            y[2 * n + 1, width] = 1.0
        return x, y, m


class ReverseTask(CopyTask):
    """Reverse: like copy (same params and layout) but the output is a_L .. a_1."""

    name = "reverse"

    @staticmethod
    def permutation(length: int) -> np.ndarray:
        return np.arange(length)[::-1].copy()


class BigramFlipTask(CopyTask):
    """Bigram flip: like copy but each pair is swapped: a_2 a_1 a_4 a_3 ...;
    with odd L the last element a_L stays last."""

    name = "bigram_flip"

    @staticmethod
    def permutation(length: int) -> np.ndarray:
        perm = np.arange(length)
        even = length - length % 2  # the elements that have a partner
        perm[0:even:2], perm[1:even:2] = np.arange(1, even, 2), np.arange(0, even, 2)
        return perm


class OddFirstTask(CopyTask):
    """Odd first: like copy but the output is the odd positions, then the even
    ones (1-based): a_1 a_3 a_5 ... a_2 a_4 ..."""

    name = "odd_first"

    @staticmethod
    def permutation(length: int) -> np.ndarray:
        return np.concatenate([np.arange(0, length, 2), np.arange(1, length, 2)])


class RepeatCopyTask(Task):
    """Repeat copy (Graves et al. 2014): copy a sequence M times, then signal the end.

    Params: ``width``, sequence length L uniform in [``min_length``, ``max_length``],
    repeats M uniform in [``min_repeats``, ``max_repeats``]. ``length`` = L (the
    repeats range is changed with ``make``).

    Channels: inputs ``width + 2`` (``width`` = delimiter, ``width + 1`` = repeat
    count); outputs ``width + 1`` (``width`` = end marker).

    Time layout (T = L + 1 + L*M + 1):

    - steps 0..L-1: input = element a_1..a_L; mask 0
    - step L: input = delimiter 1 and the count channel = (M - mean) / std, with
      mean and variance of the uniform integer distribution on [min_repeats,
      max_repeats] (0 when the range is a single value); mask 0
    - steps L+1..L+L*M: zero input; target = a_1..a_L repeated M times, end 0; mask 1
    - step L+L*M+1: zero input; target = end marker only; mask 1
    """

    name = "repeat_copy"
    length_name = "sequence length"
    defaults = {"width": 8, "min_length": 1, "max_length": 10, "min_repeats": 1, "max_repeats": 10}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        width, low, high = self.params["width"], self.params["min_repeats"], self.params["max_repeats"]
        self.input_size = width + 2
        self.output_size = width + 1
        self.train_length = self.params["max_length"]
        self.input_names = [str(c) for c in range(width)] + ["delim", "count"]
        self.output_names = [str(c) for c in range(width)] + ["end"]
        self.repeat_mean = (low + high) / 2
        self.repeat_std = math.sqrt(((high - low + 1) ** 2 - 1) / 12)

    def _validate(self, p: dict[str, Any]) -> None:
        for key in ("width", "min_length", "max_length", "min_repeats", "max_repeats"):
            check_int(p, key)
        check_order(p, "min_length", "max_length")
        check_order(p, "min_repeats", "max_repeats")

    def normalise_repeats(self, repeats: int) -> float:
        """The value of the count channel for ``repeats``."""
        return 0.0 if self.repeat_std == 0 else (repeats - self.repeat_mean) / self.repeat_std

    def decode_repeats(self, value: float) -> int:
        """Inverse of ``normalise_repeats`` (for rendering and tests)."""
        if self.repeat_std == 0:
            return self.params["min_repeats"]
        return int(round(value * self.repeat_std + self.repeat_mean))

    def _input_char(self, x_t: np.ndarray, channel: int) -> str:
        width = self.params["width"]
        if channel != width + 1:
            return super()._input_char(x_t, channel)
        if x_t[width] == 0:  # the count is only given on the delimiter step
            return "."
        # The count as one base-36 digit (10 -> 'A'), '+' beyond 35.
        count = self.decode_repeats(x_t[channel])
        return "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[count] if 0 <= count < 36 else "+"

    def source_steps(self, inputs: torch.Tensor) -> np.ndarray:
        """Output step L+1+j repeats input step j mod L; the end step has no source."""
        x = inputs.detach().cpu().numpy()
        width = self.params["width"]
        sources = np.full(x.shape[:2], -1, np.int64)
        for b, row in enumerate(x):
            n = int(np.argmax(row[:, width] > 0.5))
            reps = self.decode_repeats(float(row[n, width + 1]))
            sources[b, n + 1 : n + 1 + n * reps] = np.tile(np.arange(n), reps)
        return sources

    def _sequence(self, rng: np.random.Generator, length: int | None) -> Example:
        width = self.params["width"]
        n = _draw(rng, self.params["min_length"], self.params["max_length"], length)
        reps = _draw(rng, self.params["min_repeats"], self.params["max_repeats"], None)
        seq = _bits(rng, n, width)
        steps = n + 1 + n * reps + 1
        x = np.zeros((steps, self.input_size), np.float32)
        y = np.zeros((steps, self.output_size), np.float32)
        m = np.zeros(steps, np.float32)
        x[:n, :width] = seq
        x[n, width] = 1.0
        x[n, width + 1] = self.normalise_repeats(reps)
        y[n + 1 : steps - 1, :width] = np.tile(seq, (reps, 1))
        y[steps - 1, width] = 1.0
        m[n + 1 :] = 1.0
        return x, y, m


class AssociativeRecallTask(Task):
    """Associative recall (Graves et al. 2014): given one item, return the next one.

    Params: items of ``item_length`` steps x ``item_bits`` bits; the number of
    items K is uniform in [``min_items``, ``max_items``]. ``length`` = K. The K
    items of a sequence are distinct (so the answer is unique), hence
    ``max_items`` may not exceed 2 ** (item_bits * item_length).

    Channels: inputs ``item_bits + 2`` (``item_bits`` = item delimiter,
    ``item_bits + 1`` = query delimiter); outputs ``item_bits``.

    Time layout, with S = item_length + 1 (T = K*S + S + 1 + item_length):

    - for item k = 0..K-1, steps k*S .. k*S+item_length: one step with the item
      delimiter only, then the item_length steps of the item's bits; mask 0
    - step K*S: query delimiter; steps K*S+1 .. K*S+item_length: a copy of item
      q, q uniform in [0, K-2]; step K*S+S: query delimiter; mask 0
    - the last item_length steps: zero input; target = item q+1; mask 1
    """

    name = "associative_recall"
    length_name = "number of items"
    defaults = {"item_bits": 6, "item_length": 3, "min_items": 2, "max_items": 6}
    min_length = 2

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        bits = self.params["item_bits"]
        self.input_size = bits + 2
        self.output_size = bits
        self.train_length = self.params["max_items"]
        self.input_names = [str(c) for c in range(bits)] + ["item", "query"]
        self.output_names = [str(c) for c in range(bits)]

    def _validate(self, p: dict[str, Any]) -> None:
        check_int(p, "item_bits")
        check_int(p, "item_length")
        check_int(p, "min_items", minimum=2)  # the query may not be the last item
        check_int(p, "max_items", minimum=2)
        check_order(p, "min_items", "max_items")
        self._check_capacity(p["max_items"], p["item_bits"] * p["item_length"])

    @staticmethod
    def _check_capacity(items: int, bits: int) -> None:
        if bits < 63 and items > 2**bits:
            raise ConfigError(
                f"cannot draw {items} distinct items of {bits} bits; expected "
                f"at most {2**bits} items (or larger item_bits * item_length)"
            )

    def _sequence(self, rng: np.random.Generator, length: int | None) -> Example:
        bits, span = self.params["item_bits"], self.params["item_length"]
        if length is not None:
            self._check_capacity(length, bits * span)
        count = _draw(rng, self.params["min_items"], self.params["max_items"], length)
        items = self._distinct_items(rng, count, span * bits).reshape(count, span, bits)
        query = int(rng.integers(0, count - 1))
        stride = span + 1
        steps = count * stride + stride + 1 + span
        x = np.zeros((steps, self.input_size), np.float32)
        y = np.zeros((steps, self.output_size), np.float32)
        m = np.zeros(steps, np.float32)
        for k in range(count):
            x[k * stride, bits] = 1.0
            x[k * stride + 1 : (k + 1) * stride, :bits] = items[k]
        start = count * stride
        x[start, bits + 1] = 1.0
        x[start + 1 : start + stride, :bits] = items[query]
        x[start + stride, bits + 1] = 1.0
        y[steps - span :] = items[query + 1]
        m[steps - span :] = 1.0
        return x, y, m

    def source_steps(self, inputs: torch.Tensor) -> np.ndarray:
        """Query step K*S+1+j points at row j of the queried item q (step q*S+1+j), output
        step j of the answer at row j of item q+1 (the key's and the value's rows)."""
        x = inputs.detach().cpu().numpy()
        bits, span = self.params["item_bits"], self.params["item_length"]
        stride = span + 1
        sources = np.full(x.shape[:2], -1, np.int64)
        for b, row in enumerate(x):
            start = int(np.argmax(row[:, bits + 1] > 0.5))  # the first query delimiter
            count = start // stride
            query = row[start + 1 : start + stride, :bits]
            items = row[: count * stride].reshape(count, stride, -1)[:, 1:, :bits]
            q = int(np.argmin(np.abs(items - query).sum(axis=(1, 2))))
            sources[b, start + 1 : start + stride] = q * stride + 1 + np.arange(span)
            answer = start + stride + 1
            sources[b, answer : answer + span] = (q + 1) * stride + 1 + np.arange(span)
        return sources

    @staticmethod
    def _distinct_items(rng: np.random.Generator, count: int, bits: int) -> np.ndarray:
        """(count, bits) random rows, redrawing duplicates until all rows differ."""
        items = _bits(rng, count, bits)
        while True:
            _, first = np.unique(items, axis=0, return_index=True)
            duplicate = np.setdiff1d(np.arange(count), first)
            if duplicate.size == 0:
                return items
            items[duplicate] = _bits(rng, duplicate.size, bits)


class PrioritySortTask(Task):
    """Priority sort (Graves et al. 2014): output the highest-priority vectors, sorted.

    Params: ``width`` bits per vector, ``num_inputs`` vectors N, ``num_outputs``
    vectors K <= N to write. ``length`` = N; K then scales as
    max(1, floor(K * length / N + 1/2)). ARMIN's "sort 40, keep top 30" is
    ``make("priority_sort", num_inputs=40, num_outputs=30)``.

    Channels: inputs ``width + 2`` (``width`` = priority, uniform in [-1, 1];
    ``width + 1`` = delimiter); outputs ``width``.

    Time layout (T = N + 1 + K):

    - steps 0..N-1: input = vector v_i and its priority p_i; mask 0
    - step N: delimiter only; mask 0
    - steps N+1..N+K: zero input; target = the K vectors of highest priority,
      in descending order of priority; mask 1
    """

    name = "priority_sort"
    length_name = "number of inputs"
    defaults = {"width": 8, "num_inputs": 20, "num_outputs": 16}
    #: whether a delimiter channel and step separate the inputs from the outputs
    #: (PrioritySortColumnsTask follows code that has none)
    delimiter: ClassVar[bool] = True

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        width = self.params["width"]
        self.input_size = width + 1 + int(self.delimiter)
        self.output_size = width
        self.train_length = self.params["num_inputs"]
        self.input_names = [str(c) for c in range(width)] + ["prio"] + (["delim"] if self.delimiter else [])
        self.output_names = [str(c) for c in range(width)]

    def _validate(self, p: dict[str, Any]) -> None:
        check_int(p, "width")
        check_int(p, "num_inputs")
        check_int(p, "num_outputs")
        check_order(p, "num_outputs", "num_inputs")

    def num_outputs_for(self, num_inputs: int) -> int:
        """How many vectors are written back when ``num_inputs`` are read."""
        base_in, base_out = self.params["num_inputs"], self.params["num_outputs"]
        return max(1, min(num_inputs, math.floor(base_out * num_inputs / base_in + 0.5)))

    def _input_char(self, x_t: np.ndarray, channel: int) -> str:
        if channel == self.params["width"]:
            return signed_unit_char(x_t[channel])
        return super()._input_char(x_t, channel)

    @staticmethod
    def target(vectors: np.ndarray, priority: np.ndarray, k: int) -> np.ndarray:
        """The (k, width) output rows: the k vectors of highest priority, highest first."""
        return vectors[np.argsort(-priority, kind="stable")[:k]]

    def _sequence(self, rng: np.random.Generator, length: int | None) -> Example:
        width = self.params["width"]
        n = self.params["num_inputs"] if length is None else length
        k = self.num_outputs_for(n)
        vectors = _bits(rng, n, width)
        priority = rng.uniform(-1.0, 1.0, size=n).astype(np.float32)
        start = n + int(self.delimiter)  # the first output step
        x = np.zeros((start + k, self.input_size), np.float32)
        y = np.zeros((start + k, self.output_size), np.float32)
        m = np.zeros(start + k, np.float32)
        x[:n, :width] = vectors
        x[:n, width] = priority
        if self.delimiter:
            x[n, width + 1] = 1.0
        y[start:] = self.target(vectors, priority, k)
        m[start:] = 1.0
        return x, y, m


class PrioritySortColumnsTask(PrioritySortTask):
    """Priority sort as the ARMIN authors' public code builds it: every bit column is
    sorted on its own, so the output counts ones and the priorities are never used.

    This is the task the ARMIN authors' public code trains on for its priority sort (the
    one their Table 1 reports as solved): its generator sorts the whole (N, width + 1)
    input matrix along time, descending, and keeps the first K rows of the bit columns.
    Sorting a matrix along time sorts each column independently, so output row j has bit c set
    iff column c holds more than j ones among the N inputs: a per-column count written in
    thermometer code. In the NTM paper's priority sort (PrioritySortTask) the output rows are
    whole input vectors reordered by their priorities; here a row is in general none of the
    inputs.

    Params, channels and the meaning of ``length`` as PrioritySortTask (ARMIN trains
    ``num_inputs=40, num_outputs=30``), but, as in the authors' code, there is no
    delimiter: inputs ``width + 1`` (``width`` = priority, uniform in [-1, 1]).

    Time layout (T = N + K):

    - steps 0..N-1: input = vector v_i and its priority p_i; mask 0
    - steps N..N+K-1: zero input; mask 1; target = the first K rows of the vectors
      with each column sorted in descending order (its ones first)
    """

    name = "priority_sort_columns"
    delimiter = False

    @staticmethod
    def target(vectors: np.ndarray, priority: np.ndarray, k: int) -> np.ndarray:
        """The first k rows of ``vectors`` with each column sorted, ones first; ``priority``
        is unused (the authors' sort moves it in its own column, then drops it)."""
        return np.sort(vectors, axis=0)[::-1][:k]
