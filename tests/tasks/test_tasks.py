"""Tests of the algorithmic tasks: targets recomputed from decoded inputs, seeds,
padding, length overrides, loss/metrics on hand-made numbers, rendering, errors."""

import json
import math

import numpy as np
import pytest
import tomli_w
import torch

from mannlab.errors import ConfigError
from mannlab.tasks import generated_names, make, names

ALL = [
    "copy",
    "repeat_copy",
    "associative_recall",
    "ngrams",
    "priority_sort",
    "reverse",
    "bigram_flip",
    "odd_first",
    "priority_sort_columns",
]
SEEDS = range(25)


def np3(batch):
    return tuple(t.numpy() for t in batch)


def check_padding(x, y, m, steps):
    """Everything after ``steps`` is zero input, zero target, mask 0."""
    assert not x[steps:].any() and not y[steps:].any() and not m[steps:].any()


# ------------------------------------------------------------------ registry


def test_names_and_aliases():
    assert generated_names() == ALL
    generated_names().append("junk")  # a copy: the registry is unchanged
    assert generated_names() == ALL
    every = names()  # every task make builds, the generated ones first
    assert every[: len(ALL)] == ALL and len(every) == len(set(every)) == 19
    assert {"babi", "mnist", "proposals-synthetic", "thumos14-proposals", "ptb-char", "text8"} <= set(every)
    assert make("repeat-copy").name == "repeat_copy"
    assert make("associative-recall").name == "associative_recall"
    assert make("priority-sort", num_inputs=40, num_outputs=30).params["num_outputs"] == 30


def test_unknown_name_lists_valid_names():
    with pytest.raises(ConfigError) as err:
        make("copyy")
    for name in ALL:
        assert name in str(err.value)


def test_unknown_param_names_key_and_valid_keys():
    with pytest.raises(ConfigError) as err:
        make("copy", lenght=5)
    msg = str(err.value)
    assert "lenght" in msg and "min_length" in msg and "end_marker" in msg


@pytest.mark.parametrize(
    "name, params",
    [
        ("copy", {"width": 0}),
        ("copy", {"min_length": 0}),
        ("copy", {"max_length": -3}),
        ("copy", {"min_length": 5, "max_length": 3}),
        ("copy", {"width": 2.5}),
        ("copy", {"width": True}),
        ("copy", {"end_marker": "yes"}),
        ("reverse", {"min_length": 4, "max_length": 2}),
        ("repeat_copy", {"min_repeats": 0}),
        ("repeat_copy", {"min_repeats": 5, "max_repeats": 2}),
        ("associative_recall", {"min_items": 1}),
        ("associative_recall", {"item_bits": 0}),
        ("associative_recall", {"item_bits": 1, "item_length": 1, "max_items": 3}),
        ("ngrams", {"n": 0}),
        ("ngrams", {"length": 1}),
        ("priority_sort", {"num_outputs": 21}),
        ("priority_sort", {"num_inputs": 0}),
        ("priority_sort_columns", {"num_outputs": 41, "num_inputs": 40}),
        ("priority_sort_columns", {"width": 0}),
        ("priority_sort_columns", {"num_inputs": 2.5}),
    ],
)
def test_invalid_values_raise(name, params):
    with pytest.raises(ConfigError, match="must|expected"):
        make(name, **params)


@pytest.mark.parametrize("name", ALL)
def test_params_resolved_and_serialisable(name):
    task = make(name)
    assert task.params == make(name, **task.params).params
    json.dumps(task.params)
    tomli_w.dumps(task.params)
    assert isinstance(task.length_name, str) and task.length_name
    assert task.train_length >= 1


def test_sizes_and_train_lengths():
    sizes = {name: (make(name).input_size, make(name).output_size, make(name).train_length) for name in ALL}
    assert sizes == {
        "copy": (9, 8, 20),
        "reverse": (9, 8, 20),
        "bigram_flip": (9, 8, 20),
        "odd_first": (9, 8, 20),
        "repeat_copy": (10, 9, 10),
        "associative_recall": (8, 6, 6),
        "ngrams": (1, 1, 200),
        "priority_sort": (10, 8, 20),
        "priority_sort_columns": (9, 8, 20),
    }
    assert make("copy", end_marker=True).output_size == 9


# ------------------------------------------------------- seeds and sampling


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_batch_different_seed_different(name):
    task = make(name)
    a, b, c = task.sample(4, 7), task.sample(4, 7), task.sample(4, 8)
    for t in a + c:
        assert t.dtype == torch.float32
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert a[0].shape != c[0].shape or not torch.equal(a[0], c[0])
    g = task.sample(4, np.random.default_rng(7))
    assert all(torch.equal(u, v) for u, v in zip(a, g))
    s1, s2 = task.sample(2, [1, 2]), task.sample(2, (1, 2))
    assert all(torch.equal(u, v) for u, v in zip(s1, s2))


def test_generator_is_advanced_and_bad_seeds_rejected():
    task = make("copy")
    rng = np.random.default_rng(3)
    assert not torch.equal(*(task.sample(1, rng, length=10)[0] for _ in range(2)))
    for bad in (None, "x", 1.5, []):
        with pytest.raises(ConfigError):
            task.sample(2, bad)
    with pytest.raises(ConfigError):
        task.sample(0, 1)


@pytest.mark.parametrize("name, length", [("copy", 0), ("associative_recall", 1), ("ngrams", 1)])
def test_bad_length_override(name, length):
    with pytest.raises(ConfigError):
        make(name).sample(2, 0, length=length)


# ----------------------------------------------------------- copy family


def expected_output(name, seq):
    rows = list(seq)
    if name == "copy":
        out = rows
    elif name == "reverse":
        out = rows[::-1]
    elif name == "bigram_flip":
        out = []
        for i in range(0, len(rows) - 1, 2):
            out += [rows[i + 1], rows[i]]
        if len(rows) % 2:
            out.append(rows[-1])
    else:  # odd_first, 1-based odd positions are 0-based even indices
        out = rows[0::2] + rows[1::2]
    return np.array(out)


def test_permutations_on_small_example():
    seq = np.arange(5)[:, None]
    assert expected_output("bigram_flip", seq).ravel().tolist() == [1, 0, 3, 2, 4]
    assert expected_output("odd_first", seq).ravel().tolist() == [0, 2, 4, 1, 3]
    task = make("bigram_flip", width=1, min_length=5, max_length=5)
    x, y, m = np3(task.sample(1, 0))
    assert np.array_equal(y[0, 6:11, 0], x[0, [1, 0, 3, 2, 4], 0])


@pytest.mark.parametrize("name", ["copy", "reverse", "bigram_flip", "odd_first"])
@pytest.mark.parametrize("end_marker", [False, True])
def test_copy_family_targets(name, end_marker):
    task = make(name, width=5, min_length=1, max_length=12, end_marker=end_marker)
    end = int(end_marker)
    lengths = set()
    for seed in SEEDS:
        x, y, m = np3(task.sample(8, seed))
        for b in range(len(x)):
            delim = np.flatnonzero(x[b, :, 5])
            assert len(delim) == 1
            n = int(delim[0])
            lengths.add(n)
            assert 1 <= n <= 12
            seq = x[b, :n, :5]
            assert set(np.unique(seq)) <= {0.0, 1.0}
            assert not x[b, n, :5].any() and not x[b, n + 1 :].any()
            steps = 2 * n + 1 + end
            assert np.array_equal(y[b, n + 1 : 2 * n + 1, :5], expected_output(name, seq))
            assert not y[b, : n + 1].any()
            assert np.array_equal(m[b, :steps], [0] * (n + 1) + [1] * (n + end))
            if end_marker:
                assert not y[b, n + 1 : 2 * n + 1, 5].any()
                assert np.array_equal(y[b, 2 * n + 1], [0] * 5 + [1])
            check_padding(x[b], y[b], m[b], steps)
        assert x.shape[1] == max(2 * int(np.flatnonzero(r[:, 5])[0]) + 1 + end for r in x)
    assert len(lengths) > 5  # mixed lengths were drawn


def test_copy_length_override():
    task = make("copy")
    x, y, m = np3(task.sample(3, 1, length=50))
    assert x.shape == (3, 101, 9) and (x[:, 50, 8] == 1).all() and (m.sum(1) == 50).all()


# ---------------------------------------------------------------- repeat copy


def test_repeat_normalisation():
    task = make("repeat_copy", min_repeats=1, max_repeats=10)
    values = np.array([task.normalise_repeats(r) for r in range(1, 11)])
    assert abs(values.mean()) < 1e-9 and abs(values.var() - 1) < 1e-9
    assert make("repeat_copy", min_repeats=3, max_repeats=3).normalise_repeats(3) == 0.0


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"min_repeats": 4, "max_repeats": 4},
        {"width": 3, "max_length": 5, "min_repeats": 2, "max_repeats": 7},
    ],
)
def test_repeat_copy_targets(params):
    task = make("repeat_copy", **params)
    w, lo, hi = task.params["width"], task.params["min_repeats"], task.params["max_repeats"]
    mean, std = (lo + hi) / 2, math.sqrt(((hi - lo + 1) ** 2 - 1) / 12)
    repeats = set()
    for seed in SEEDS:
        x, y, m = np3(task.sample(6, seed))
        for b in range(len(x)):
            n = int(np.flatnonzero(x[b, :, w])[0])
            z = x[b, n, w + 1]
            reps = lo if std == 0 else int(round(z * std + mean))
            assert lo <= reps <= hi and abs((reps - mean) / (std or 1) - z) < 1e-5
            repeats.add(reps)
            seq = x[b, :n, :w]
            assert not x[b, :n, w:].any() and not x[b, n + 1 :].any()
            steps = n + 1 + n * reps + 1
            assert np.array_equal(y[b, n + 1 : steps - 1, :w], np.tile(seq, (reps, 1)))
            assert not y[b, : steps - 1, w].any() and np.array_equal(y[b, steps - 1], [0] * w + [1])
            assert np.array_equal(m[b, :steps], [0] * (n + 1) + [1] * (n * reps + 1))
            check_padding(x[b], y[b], m[b], steps)
    assert len(repeats) == hi - lo + 1


def test_repeat_copy_length_override():
    x, y, m = np3(make("repeat_copy").sample(4, 0, length=15))
    assert all(np.flatnonzero(x[b, :, 8])[0] == 15 for b in range(4))


# ----------------------------------------------------------- associative recall


@pytest.mark.parametrize("params", [{}, {"item_bits": 2, "item_length": 1, "min_items": 3, "max_items": 4}])
def test_associative_recall_targets(params):
    task = make("associative_recall", **params)
    bits, span = task.params["item_bits"], task.params["item_length"]
    counts = set()
    for seed in SEEDS:
        x, y, m = np3(task.sample(8, seed))
        for b in range(len(x)):
            starts = np.flatnonzero(x[b, :, bits])
            k = len(starts)
            counts.add(k)
            assert np.array_equal(starts, np.arange(k) * (span + 1))
            items = [x[b, s + 1 : s + 1 + span, :bits] for s in starts]
            assert len({it.tobytes() for it in items}) == k  # distinct
            q0, q1 = np.flatnonzero(x[b, :, bits + 1])
            assert q0 == k * (span + 1) and q1 == q0 + span + 1
            query = x[b, q0 + 1 : q1, :bits]
            matches = [i for i, it in enumerate(items) if np.array_equal(it, query)]
            assert len(matches) == 1 and matches[0] < k - 1
            steps = q1 + 1 + span
            assert np.array_equal(y[b, q1 + 1 : steps], items[matches[0] + 1])
            assert not y[b, : q1 + 1].any() and not x[b, q1 + 1 :].any()
            assert np.array_equal(m[b, :steps], [0] * (q1 + 1) + [1] * span)
            check_padding(x[b], y[b], m[b], steps)
    lo, hi = task.params["min_items"], task.params["max_items"]
    assert counts == set(range(lo, hi + 1))


def test_associative_recall_length_override():
    x, _, _ = np3(make("associative_recall").sample(3, 0, length=12))
    assert (x[:, :, 6].sum(1) == 12).all()


# ----------------------------------------------------------------------- ngrams


def test_ngrams_layout():
    task = make("ngrams", n=3, length=30)
    for seed in range(5):
        x, y, m = np3(task.sample(4, seed))
        assert x.shape == (4, 29, 1) and y.shape == (4, 29, 1) and (m == 1).all()
        assert np.array_equal(x[:, 1:], y[:, :-1])  # input t+1 is target t
        assert set(np.unique(x)) <= {0.0, 1.0}
    assert task.sample(2, 0, length=50)[0].shape == (2, 49, 1)


def test_ngrams_follow_a_context_table():
    # With n=2 each sequence is a Markov chain with P(1 | previous bit) ~ Beta(1/2, 1/2)
    # per context, so the two conditional frequencies differ by E|U - V| = 4/pi^2 ~ 0.41.
    x, y, _ = np3(make("ngrams", n=2, length=1000).sample(40, 0))
    gaps = [
        abs(y[b, x[b, :, 0] == 0].mean() - y[b, x[b, :, 0] == 1].mean())
        for b in range(40)
        if 0 < x[b, :, 0].mean() < 1
    ]
    assert 0.3 < np.mean(gaps) < 0.55


def test_ngrams_optimal_bce_hand_example():
    # n=2, bits 0 1 0 1 1: predictions 0.5, 0.5, then P(1|0)=1.5/2, P(1|1)=0.5/2.
    task = make("ngrams", n=2, length=5)
    bits = torch.tensor([0.0, 1, 0, 1, 1])
    x, y, m = bits[None, :-1, None], bits[None, 1:, None], torch.ones(1, 4)
    expected = (2 * math.log(2) - math.log(0.75) - math.log(0.25)) / 4
    assert task.optimal_bce(x, y, m) == pytest.approx(expected)
    # n=3: 0.5 until two bits are seen, then context (b_{t-1}, b_t).
    task3 = make("ngrams", n=3, length=5)
    # contexts 01, 10 are new; then 01 again, followed once by 0: P(1) = 0.5 / 2.
    assert task3.optimal_bce(x, y, m) == pytest.approx((3 * math.log(2) - math.log(0.25)) / 4)
    bits = torch.tensor([1.0, 1, 1, 1, 1])
    x, y = bits[None, :-1, None], bits[None, 1:, None]
    # steps: 0.5, then context 11 with counts (0,0), (0,1), (0,2)
    expected = (2 * math.log(2) - math.log(1.5 / 2) - math.log(2.5 / 3)) / 4
    assert task3.optimal_bce(x, y, m) == pytest.approx(expected)


def test_ngrams_optimal_bce_on_samples_and_metrics():
    task = make("ngrams")
    x, y, m = task.sample(16, 0)
    opt = task.optimal_bce(x, y, m)
    assert 0.3 < opt < 0.6931
    logits = torch.zeros_like(y)
    metrics = task.metrics(logits, y, m, inputs=x)
    assert metrics["optimal_bce"] == pytest.approx(opt)
    assert metrics["bce"] == pytest.approx(math.log(2), abs=1e-6)
    # Without inputs the first bit is unknown: a close estimate.
    assert task.metrics(logits, y, m)["optimal_bce"] == pytest.approx(opt, abs=0.01)


# ---------------------------------------------------------------- priority sort


@pytest.mark.parametrize(
    "params, length, outputs",
    [
        ({}, None, 16),
        ({"width": 4, "num_inputs": 40, "num_outputs": 30}, None, 30),
        ({"num_inputs": 40, "num_outputs": 30}, 80, 60),
        ({}, 5, 4),
        ({}, 1, 1),
    ],
)
def test_priority_sort_targets(params, length, outputs):
    task = make("priority_sort", **params)
    w = task.params["width"]
    n = length or task.params["num_inputs"]
    for seed in range(10):
        x, y, m = np3(task.sample(4, seed, length=length))
        assert x.shape[1] == n + 1 + outputs
        for b in range(len(x)):
            vectors, prio = x[b, :n, :w], x[b, :n, w]
            assert (np.abs(prio) <= 1).all() and len(set(prio)) == n
            assert np.array_equal(np.flatnonzero(x[b, :, w + 1]), [n])
            order = sorted(range(n), key=lambda i: -prio[i])[:outputs]
            assert np.array_equal(y[b, n + 1 :], vectors[order])
            assert not y[b, : n + 1].any() and not x[b, n + 1 :].any()
            assert np.array_equal(m[b], [0] * (n + 1) + [1] * outputs)


# ---------------------------------------------------------------- loss, metrics


def tiny():
    logits = torch.tensor([[[0.0, 2.0], [-1.0, 5.0]]], requires_grad=True)
    targets = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    mask = torch.tensor([[1.0, 0.0]])
    return logits, targets, mask


def test_loss_and_step_nll_by_hand():
    task = make("copy", width=2)
    logits, targets, mask = tiny()
    step0 = math.log(2) + math.log(1 + math.exp(2))  # bce(0, 1) + bce(2, 0)
    loss = task.loss(logits, targets, mask)
    assert loss.dim() == 0 and loss.item() == pytest.approx(step0 / 2)
    loss.backward()
    assert logits.grad[0, 0].abs().sum() > 0 and (logits.grad[0, 1] == 0).all()
    nll = task.step_nll(logits, targets, mask)
    assert nll.shape == (1, 2) and nll[0, 0].item() == pytest.approx(step0) and nll[0, 1] == 0


def test_loss_on_zero_logits_is_log2():
    task = make("repeat_copy")
    x, y, m = task.sample(4, 0)
    assert task.loss(torch.zeros_like(y), y, m).item() == pytest.approx(math.log(2), abs=1e-6)


def test_metrics_by_hand():
    task = make("copy", width=2)
    # Two sequences, 3 steps, 2 bits; step 2 of sequence 0 and step 0 of sequence 1 not scored.
    targets = torch.tensor([[[1, 0], [0, 1], [1, 1]], [[0, 0], [1, 1], [0, 1]]], dtype=torch.float32)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]], dtype=torch.float32)
    logits = torch.tensor(
        [
            [[3, -3], [3, 3], [-3, -3]],  # 1 wrong scored, 2 wrong masked
            [[3, 3], [3, -3], [-3, -3]],
        ],  # 2 wrong scored, 2 wrong masked
        dtype=torch.float32,
    )
    out = task.metrics(logits, targets, mask)
    assert out["bit_error_rate"] == pytest.approx(3 / 8)
    assert out["seq_bit_errors"] == pytest.approx(1.5)
    right, wrong = math.log(1 + math.exp(-3)), math.log(1 + math.exp(3))
    assert out["bce"] == pytest.approx((5 * right + 3 * wrong) / 8, rel=1e-5)
    assert set(out) == {"bce", "bit_error_rate", "seq_bit_errors"}


# ---------------------------------------------------------------------- render


def test_render_copy_rows():
    task = make("copy", width=2)
    # L = 2: a_1 = (1, 0), a_2 = (1, 1); one padding step at the end.
    x = torch.zeros(1, 6, 3)
    x[0, 0, 0] = x[0, 1, 0] = x[0, 1, 1] = x[0, 2, 2] = 1
    y = torch.zeros(1, 6, 2)
    y[0, 3, 0] = y[0, 4, 0] = y[0, 4, 1] = 1
    m = torch.tensor([[0, 0, 0, 1, 1, 0.0]])
    logits = torch.full((1, 6, 2), -1.0)
    logits[0, 3, 0] = logits[0, 4, 0] = 1.0  # bit 1 of a_2 is missed
    text = task.render(x, y, m, logits=logits)
    assert text.splitlines() == [
        "copy [0]: 5 steps, 2 scored, 1 wrong bits",
        "    in 0 |##...|",
        "    in 1 |.#...|",
        "in delim |..#..|",
        "   tgt 0 |   ##|",
        "   tgt 1 |   .#|",
        "   out 0 |   ##|",
        "   out 1 |   .x|",
    ]
    assert len(task.render(x, y, m).splitlines()) == 6


def test_render_continuous_channels():
    task = make("repeat_copy", width=1, min_repeats=1, max_repeats=12)
    x, y, m = task.sample(1, 0, length=1)
    reps = int(m.sum().item()) - 1
    row = [r for r in task.render(x, y, m).splitlines() if r.strip().startswith("in count")][0]
    assert row.split("|")[1][1] == "0123456789ABC"[reps]
    task = make("priority_sort", width=1, num_inputs=2, num_outputs=1)
    x = torch.tensor([[[1, -1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]], dtype=torch.float32)
    y, m = torch.zeros(1, 4, 1), torch.tensor([[0, 0, 0, 1.0]])
    row = [r for r in task.render(x, y, m).splitlines() if r.strip().startswith("in prio")][0]
    assert row.endswith("|09..|")


# ---------------------------------------- priority sort, each column sorted (ARMIN's code)


def test_priority_sort_columns_target_by_hand():
    # Column 0 holds three ones, column 1 one, column 2 none; the priorities do not matter.
    vectors = np.array([[1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0]], np.float32)
    priority = np.array([0.5, -0.2, 0.9, -0.7], np.float32)
    columns = make("priority_sort_columns", width=3, num_inputs=4, num_outputs=3)
    assert np.array_equal(columns.target(vectors, priority, 3), [[1, 1, 0], [1, 0, 0], [1, 0, 0]])
    assert np.array_equal(columns.target(vectors, -priority, 3), [[1, 1, 0], [1, 0, 0], [1, 0, 0]])
    # The NTM paper's task writes whole vectors by priority: rows 2, 0, 1 of the input.
    ntm = make("priority_sort", width=3, num_inputs=4, num_outputs=3)
    assert np.array_equal(ntm.target(vectors, priority, 3), [[1, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize("length, outputs", [(None, 30), (80, 60), (1, 1)])
def test_priority_sort_columns_layout_and_counts(length, outputs):
    task = make("priority_sort_columns", width=8, num_inputs=40, num_outputs=30)
    n = length or 40
    x, y, m = np3(task.sample(4, 0, length=length))
    assert x.shape == (4, n + outputs, 9) and task.input_names[-1] == "prio"  # no delimiter
    for b in range(4):
        ones = x[b, :n, :8].sum(0)
        thermometer = np.arange(outputs)[:, None] < ones[None, :]  # row j: more than j ones
        assert np.array_equal(y[b, n:], thermometer)
        assert not y[b, :n].any() and not x[b, n:].any() and (np.abs(x[b, :n, 8]) <= 1).all()
        assert np.array_equal(m[b], [0] * n + [1] * outputs)


def test_priority_sort_columns_same_inputs_as_priority_sort_other_targets():
    params = {"width": 8, "num_inputs": 40, "num_outputs": 30}
    cx, cy, _ = np3(make("priority_sort_columns", **params).sample(8, 3))
    px, py, _ = np3(make("priority_sort", **params).sample(8, 3))
    assert np.array_equal(cx[:, :40], px[:, :40, :9])  # same seed, same vectors and priorities
    assert all(not np.array_equal(cy[b, 40:], py[b, 41:]) for b in range(8))


def test_priority_sort_columns_seeds_and_params():
    task = make("priority-sort-columns", num_inputs=40, num_outputs=30)
    a, b, c = task.sample(2, 5), task.sample(2, 5), task.sample(2, 6)
    assert all(torch.equal(u, v) for u, v in zip(a, b)) and not torch.equal(a[1], c[1])
    with pytest.raises(ConfigError, match="delimiter"):
        make("priority_sort_columns", delimiter=True)  # a class property, not a parameter


def test_registry_declares_every_task_kind_batching_and_input():
    from mannlab import tasks
    from mannlab.tasks.base import BATCHINGS, INPUT_KINDS, TASK_KINDS

    assert [e.name for e in tasks.ENTRIES] == names()
    for entry in tasks.ENTRIES:
        assert entry.kind in TASK_KINDS and entry.batching in BATCHINGS, entry
        assert entry.input_kinds and set(entry.input_kinds) <= set(INPUT_KINDS), entry
        assert tasks.entry(entry.name.replace("_", "-").upper()) is entry  # spellings
        assert tasks.batching(entry.name) == entry.batching
    kinds = {e.name: (e.kind, e.batching, e.input_kinds) for e in tasks.ENTRIES}
    assert kinds["copy"] == ("generated", "samples", ("features",))
    assert kinds["babi"] == ("data", "samples", ("features", "sentences"))
    assert kinds["proposals-synthetic"] == ("proposals", "samples", ("snippets",))
    assert kinds["ptb-char"] == ("text", "streams", ("symbols",))
    with pytest.raises(ConfigError, match="unknown task 'nope'; valid names: copy"):
        tasks.batching("nope")


def test_a_built_task_declares_what_its_entry_says():
    from mannlab import tasks

    for name in [*generated_names(), "proposals-synthetic"]:
        task, entry = make(name), tasks.entry(name)
        assert (task.kind, task.batching, task.input_kind) == (
            entry.kind,
            entry.batching,
            entry.input_kinds[0],
        )
    copy = make("copy")
    assert copy.loss_key == "bce" and copy.splits == () and copy.steps_per_epoch(8) is None
    assert copy.extra_results(None, "test", None, 4) == {}
