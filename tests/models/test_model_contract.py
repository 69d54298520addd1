"""What every model of the registry promises, checked once for all of them: the registry
builds it and rejects misspelled options and invalid sizes with a ConfigError naming them,
bad input gives a clear error, output_size=None gives the features, cell == sequence,
chunked == whole, calls do not share memory, batch elements are independent,
batch_first=False, gradcheck. The model files keep what only their model does."""

import contextlib
import re

import pytest
import torch

from conftest import SMALL, float64_seq, leaves, small_model
from mannlab import ConfigError, detach_state
from mannlab.models import MODELS, build_model, model_kwargs
from mannlab.models.base import sequence_backend
from mannlab.nn.controllers import CONTROLLERS
from mannlab.ops import dispatch

NAMES = sorted(MODELS)
# Models that sample in training (gumbel noise): the checks that need one fixed function
# of the input run them in evaluation mode (argmax), as their own tests do.
SAMPLING = {"tardis", "armin"}


def seq(b=3, t=9, i=5):
    return float64_seq(b, t, i)


def small(name, **kw):
    """A small float64 model with input_size 5 and output_size 4."""
    return small_model(name, 5, 4, **kw)


def assert_states_close(a, b, atol=1e-12):
    assert type(a) is type(b)
    for u, v in zip(leaves(a), leaves(b), strict=True):
        assert u.shape == v.shape and u.dtype == v.dtype
        assert torch.allclose(u.double(), v.double(), atol=atol)


def test_every_registered_model_has_a_small_configuration():
    assert set(SMALL) == set(MODELS)


# ---------------------------------------------------------------- the registry

MISSPELLED = {
    "ntm": ("memory_slot", "memory_slots"),
    "dnc": ("memory_slot", "memory_slots"),
    "dntm": ("adress_size", "address_size"),
    "lstm": ("hiden_size", "hidden_size"),
    "gru": ("hiden_size", "hidden_size"),
    "tardis": ("hiden_size", "hidden_size"),
    "armin": ("memory_slot", "memory_slots"),
}


@pytest.mark.parametrize("name", NAMES)
def test_registry_builds_the_model_and_rejects_unknown_names_and_options(name):
    assert type(build_model(name, 5, 4, **SMALL[name])) is MODELS[name]
    assert type(build_model(name.upper(), 5, 4, **SMALL[name])) is MODELS[name]
    typo, right = MISSPELLED[name]
    with pytest.raises(
        ConfigError,
        match=rf"^unknown option\(s\) \['{typo}'\] for model "
        rf"'{name}'; valid options: (.*, )?{right}(,|$)",
    ):
        build_model(name, 5, 4, **{**SMALL[name], typo: 3})
    with pytest.raises(
        ConfigError,
        match=rf"^unknown model '{name}{name[-1]}'; valid models: "
        rf"{', '.join(NAMES)}$",
    ):
        build_model(name + name[-1], 5, 4)


# ------------------------------------------------------------- invalid options

# Every option each model checks to be a positive integer (besides input_size and
# output_size, which every model checks).
SIZES = {
    "ntm": ["controller_size", "memory_slots", "memory_width", "read_heads", "write_heads"],
    "dnc": ["controller_size", "memory_slots", "memory_width", "read_heads"],
    "dntm": [
        "controller_size",
        "memory_slots",
        "address_size",
        "content_size",
        "read_heads",
        "write_heads",
        "addressing_steps",
    ],
    "lstm": ["hidden_size", "num_layers"],
    "gru": ["hidden_size", "num_layers"],
    "tardis": ["hidden_size", "memory_slots", "address_size", "content_size", "temperature_every"],
    "armin": ["hidden_size", "memory_slots"],
}
# Optional sizes (None: derived from the others) and the options that make them apply
OPTIONAL_SIZES = {
    "tardis": ({}, ["read_mlp_size", "fusion_size"]),
    "armin": ({"read": "tardis"}, ["memory_width", "address_size", "read_mlp_size"]),
}


def size_cases():
    for name in NAMES:
        for option in ["input_size", "output_size", *SIZES[name]]:
            yield name, {}, option
        options, optional = OPTIONAL_SIZES.get(name, ({}, []))
        for option in optional:
            yield name, options, option


@pytest.mark.parametrize("name, options, option", list(size_cases()))
def test_sizes_must_be_positive_integers(name, options, option):
    for value in (0, -1, 2.5, True, "3"):  # 0 is not "the default" (None is)
        sizes = dict(input_size=5, output_size=4, **SMALL[name], **options)
        sizes[option] = value
        message = f"{option} must be a positive integer, got {value!r}"
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            build_model(name, sizes.pop("input_size"), sizes.pop("output_size"), **sizes)


@pytest.mark.parametrize("name", [name for name in NAMES if "controller" in model_kwargs(name)])
def test_unknown_controller_names_the_valid_ones(name):
    message = f"unknown controller 'gru2'; valid: {sorted(CONTROLLERS)}"
    assert "'pnr-lstm'" in message
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build_model(name, 5, 4, **SMALL[name], controller="gru2")


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        (
            "ntm",
            dict(shift_range=4),
            r"shift_range must be an integer in \[0, \(memory_slots - 1\) / 2\] "
            r"= \[0, 3\], got 4",
        ),
        ("dntm", dict(addressing="hard"), "addressing must be one of 'soft', 'reinforce', 'argmax'"),
        ("dntm", dict(write_keys="address"), "write_keys must be one of"),
        ("dntm", dict(lru="yes"), "lru must be true or false"),
        (
            "dntm",
            dict(addressing="reinforce", curriculum_p0=1.5),
            "curriculum_p0 must be a finite number >= 0 and <= 1",
        ),
        ("dntm", dict(curriculum_p0=1.0), "need addressing='reinforce'"),
        ("dntm", dict(input_baseline=True), "need addressing='reinforce'"),
        ("dntm", dict(entropy_weight=-1), "entropy_weight"),
        ("dntm", dict(reinforce_weight=-0.1), "reinforce_weight"),
        ("dntm", dict(reward_momentum=1.0), "reward_momentum"),
        ("dntm", dict(next_input_distribution="poisson"), "next_input_distribution"),
        ("lstm", dict(layer_norm="yes"), "layer_norm must be true or false"),
        ("lstm", dict(zoneout=1.0), r"zoneout must be a probability in \[0, 1\)"),
        ("lstm", dict(fused=True, recurrent_dropout=0.1), "fused=true cannot run layer_norm"),
        ("gru", dict(dropout=1.0), r"dropout must be a probability in \[0, 1\)"),
        ("tardis", dict(addressing="soft"), "addressing"),
        ("tardis", dict(temperature="fixed"), "temperature"),
        ("tardis", dict(discount=1.5), "discount"),
        ("tardis", dict(address_size=2, address_nonzeros=3), "nonzeros"),
        ("tardis", dict(recurrent_dropout=1.5), "recurrent_dropout"),
        (
            "tardis",
            dict(recurrent_dropout=1.0),
            r"recurrent_dropout must be a finite number >= 0.0 and < 1.0",
        ),
        ("tardis", dict(address_nonzeros=0), "address_nonzeros must be a positive integer"),
        ("dntm", dict(entropy_weight=float("inf")), "entropy_weight must be a finite number"),
        ("armin", dict(zoneout=1.0), "zoneout must be a finite number >= 0.0 and < 1.0"),
        ("armin", dict(addressing="reinforce"), "addressing"),
        ("armin", dict(read="content"), "read"),
        ("armin", dict(write="lru"), "write"),
        ("armin", dict(zoneout=1.5), "zoneout"),
        ("armin", dict(control_gates="yes"), "control_gates"),
        ("armin", dict(temperature_every=-1), "temperature_every"),
        ("armin", dict(address_size=4), "sizes of the TARDIS read"),
        ("armin", dict(read_mlp_size=8), "sizes of the TARDIS read"),
    ],
)
def test_invalid_options_raise_config_error(name, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build_model(name, 5, 4, **{**SMALL[name], **kwargs})


# ------------------------------------------------------------------ bad input

OTHER_FLOAT = {torch.float32: torch.float64, torch.float64: torch.float32}
BAD_INPUTS = {  # for a model with input_size=5 and parameters of dtype d
    "features": (
        lambda d: torch.rand(2, 3, 6, dtype=d),
        ValueError,
        r"expects input_size=5 features in the last dimension, got shape \(2, 3, 6\)",
    ),
    "2-D": (
        lambda d: torch.rand(3, 5, dtype=d),
        ValueError,
        r"expects a 3-D input \(batch, time, features\), got shape \(3, 5\)",
    ),
    "4-D": (lambda d: torch.rand(2, 3, 5, 1, dtype=d), ValueError, "expects a 3-D input"),
    "integer": (
        lambda d: torch.ones(2, 3, 5, dtype=torch.long),
        TypeError,
        "expects a floating-point input, got torch.int64",
    ),
    "other float": (
        lambda d: torch.rand(2, 3, 5, dtype=OTHER_FLOAT[d]),
        TypeError,
        "has {d} parameters but got a {other} input",
    ),
    "NaN": (
        lambda d: torch.full((2, 3, 5), float("nan"), dtype=d),
        ValueError,
        "got an input containing NaN",
    ),
    "infinity": (
        lambda d: torch.rand(2, 3, 5, dtype=d).index_fill(1, torch.tensor([2]), -float("inf")),
        ValueError,
        "got an input containing NaN or infinity",
    ),
    "no batch": (
        lambda d: torch.rand(0, 3, 5, dtype=d),
        ValueError,
        r"got an empty input of shape \(0, 3, 5\)",
    ),
    "no steps": (
        lambda d: torch.rand(2, 0, 5, dtype=d),
        ValueError,
        r"got an empty input of shape \(2, 0, 5\)",
    ),
    "non-tensor": (lambda d: [[1.0]], TypeError, "expects a torch.Tensor input, got list"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_bad_input_gives_clear_error(name, dtype, case):
    make, error, message = BAD_INPUTS[case]
    model = small(name).to(dtype)
    message = message.format(d=dtype, other=OTHER_FLOAT[dtype])
    with pytest.raises(error, match=rf"^{MODELS[name].__name__} {message}"):
        model(make(dtype))


@pytest.mark.parametrize("name", NAMES)
def test_bad_layout_error_names_the_time_major_layout(name):
    with pytest.raises(ValueError, match=r"expects a 3-D input \(time, batch, features\)"):
        small(name, batch_first=False)(seq()[0])


# -------------------------------------------------------------------- outputs


@pytest.mark.parametrize(
    "name, kw, features",
    [
        ("ntm", dict(read_heads=2), 6 + 2 * 3),  # controller + read vectors
        ("dnc", dict(read_heads=2), 6 + 2 * 3),
        ("dntm", dict(read_heads=2), 6 + 2 * (2 + 3)),  # controller + read heads x (address + content)
        ("lstm", {}, 8),
        ("gru", {}, 8),
        ("tardis", {}, 6),  # the fusion layer
        ("armin", {}, 6 + 6),  # hidden + read vector (width = hidden)
    ],
)
def test_output_size_none_gives_the_features(name, kw, features):
    model = build_model(name, 5, None, **{**SMALL[name], **kw})
    assert model.head is None and model.output_features == features
    y, _ = model(torch.rand(2, 3, 5))
    assert y.shape == (2, 3, features)


# -------------------------------------------------------------- equivalences


@pytest.mark.parametrize(
    "name, kw",
    [
        ("ntm", dict(controller="lstm", read_heads=2, write_heads=2)),
        ("ntm", dict(controller="fnn", read_heads=2, write_heads=2)),
        ("dnc", dict(controller="lstm", read_heads=2)),
        ("dnc", dict(controller="fnn", read_heads=2)),
        ("dntm", dict(controller="gru", read_heads=2, addressing_steps=2, nop=True)),
        ("dntm", dict(controller="fnn", read_heads=2, addressing_steps=2, nop=True)),
        ("tardis", {}),
        ("armin", {}),
    ],
)  # LSTM and GRU: no cell (torch.nn.LSTM / GRU inside)
def test_cell_loop_equals_sequence_module(name, kw):
    model = small(name, **kw)
    if name in SAMPLING:
        model.eval()
    x = seq()
    y, final = model(x)
    state, feats = None, []
    for x_t in x.unbind(1):
        f, state = model.cell(x_t, state)
        feats.append(f)
    assert torch.allclose(model.head(torch.stack(feats, 1)), y, atol=1e-12)
    assert_states_close(state, final)


def use_kernels(model, kernels, x):
    """kernels None: as configured; True / False: the compiled whole-sequence path (even under
    MANNLAB_KERNELS=0, numba is required) or the per-step tensor path."""
    if kernels is None:
        return contextlib.nullcontext()
    switch = dispatch.use_kernels(kernels)
    with dispatch.use_kernels(kernels):
        assert bool(sequence_backend(model.cell, x)) == kernels
    return switch


@pytest.mark.parametrize(
    "name, kw, kernels, cuts",
    [
        ("ntm", {}, None, [4]),
        ("dnc", dict(read_heads=2), None, [4]),
        ("lstm", {}, None, [5]),
        ("gru", {}, None, [5]),
        ("gru", dict(num_layers=2), None, [2, 7]),
        *[
            ("dntm", dict(read_heads=2, addressing=mode, addressing_steps=2, nop=True), kernels, [4])
            for mode in ("soft", "argmax", "reinforce")
            for kernels in (True, False)
        ],
        *[
            ("tardis", dict(addressing=mode), kernels, [3])  # across the k-th step: the step
            for mode in ("gumbel", "reinforce")
            for kernels in (True, False)
        ],  # counter is state
        ("armin", {}, True, [3]),
        ("armin", {}, False, [3]),
        ("armin", dict(addressing="soft"), None, [3]),
        ("armin", dict(read="tardis", zoneout=0.2), None, [3]),
    ],
)
def test_chunked_run_with_carried_state_equals_one_run(name, kw, kernels, cuts):
    """The draws of each chunk continue where the previous chunk stopped."""
    model = small(name, **kw)
    x = seq(t=10)
    with use_kernels(model, kernels, x):
        torch.manual_seed(5)
        y, final = model(x)
        torch.manual_seed(5)
        ys, state = [], None
        for chunk in x.tensor_split(cuts, dim=1):
            y_chunk, state = model(chunk, None if state is None else detach_state(state))
            ys.append(y_chunk)
    assert torch.allclose(torch.cat(ys, 1), y, atol=1e-12)
    assert_states_close(state, final)


@pytest.mark.parametrize("name", NAMES)
def test_memory_resets_per_call(name):
    model = small(name)
    x = seq()
    torch.manual_seed(5)
    y1, s1 = model(x)
    torch.manual_seed(5)
    y2, s2 = model(x)
    assert torch.equal(y1, y2)
    assert all(torch.equal(a, b) for a, b in zip(leaves(s1), leaves(s2), strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_batch_elements_are_independent(name):
    model = small(name, **({"read_heads": 2} if name in ("ntm", "dnc", "dntm") else {}))
    if name in SAMPLING:
        model.eval()
    x = seq(b=4)
    y, state = model(x)
    y1, state1 = model(x[2:3])
    assert torch.allclose(y[2:3], y1, atol=1e-12)
    for a, b in zip(leaves(state), leaves(state1), strict=True):
        batch_axis = 1 if name in ("lstm", "gru") else 0  # (layers, batch, hidden) as torch.nn.LSTM
        assert torch.allclose(a.narrow(batch_axis, 2, 1).double(), b.double(), atol=1e-12)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", NAMES)
def test_batch_first_false_matches(name, train):
    model = small(name).train(train)
    time_major = small(name, batch_first=False).train(train)
    x = seq()
    torch.manual_seed(5)
    y, state = model(x)
    torch.manual_seed(5)
    y_tb, state_tb = time_major(x.transpose(0, 1))
    assert torch.allclose(y_tb.transpose(0, 1), y)
    assert_states_close(state_tb, state, atol=1e-8)


# The D-NTM, TARDIS and ARMIN gradchecks need model-specific settings (LRU off, argmax reads
# in evaluation, soft reads, fixed noise): their files keep them.
@pytest.mark.parametrize(
    "name, kw",
    [
        ("ntm", dict(read_heads=2, write_heads=2)),
        ("dnc", dict(read_heads=2)),
        ("lstm", {}),
        ("lstm", dict(layer_norm=True)),  # the per-step loop instead of nn.LSTM
        ("gru", dict(num_layers=2)),
    ],
)
def test_gradcheck_through_the_whole_model(name, kw):
    model = small(name, **kw)
    x = seq(b=2, t=3).requires_grad_()
    assert torch.autograd.gradcheck(lambda inp: model(inp)[0], (x,))
