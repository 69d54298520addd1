"""Absurd sizes fail at once, before anything is allocated, with the memory they would need:
model constructors (models/size_check.py), a training run's batch and lengths, an evaluation's
lengths."""

import inspect

import pytest

import mannlab
from conftest import SMALL
from fuzzing import no_hang
from mannlab.errors import ConfigError
from mannlab.models import MODELS, build_model, size_check

HUGE = [
    ("lstm", {"num_layers": 10**6}),
    ("gru", {"num_layers": 10**6}),
    ("lstm", {"hidden_size": 10**6}),
    ("tardis", {"memory_slots": 10**10}),
    ("tardis", {"read_mlp_size": 10**10}),
    ("tardis", {"fusion_size": 10**10}),
    ("dnc", {"memory_slots": 10**10}),
    ("dnc", {"controller_size": 10**6}),
    ("ntm", {"memory_slots": 10**11}),
    ("ntm", {"controller_size": 10**6}),
    ("dntm", {"memory_slots": 10**11}),
    ("dntm", {"controller_size": 10**6}),
    ("armin", {"memory_slots": 10**10, "memory_width": 100}),
    ("armin", {"memory_width": 10**6}),
]


@pytest.mark.parametrize("model,args", HUGE, ids=[f"{m}-{next(iter(a))}" for m, a in HUGE])
def test_absurd_model_sizes_fail_at_once(model, args):
    with no_hang(10), pytest.raises(ConfigError) as error:
        build_model(model, 3, 2, **args)
    message = str(error.value)
    assert "num_layers must be at most" in message or ("needs at least" in message and "available" in message)


def test_the_estimate_is_compared_with_the_memory_available(monkeypatch):
    monkeypatch.setattr(size_check, "available_memory", lambda: 1000)
    with pytest.raises(ConfigError, match=r"LSTM\(hidden_size=100, num_layers=1\) needs at least .*KiB"):
        mannlab.LSTM(3, 2)
    monkeypatch.setattr(size_check, "available_memory", lambda: None)  # unknown: no check
    mannlab.LSTM(3, 2)


def test_available_memory_is_known_here():
    have = size_check.available_memory()
    assert have is None or (isinstance(have, int) and have > 0)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_estimates_are_lower_bounds(name):
    """What the constructor refuses could never be built: its estimate of the parameters and of
    one sequence's state is at most what the built model holds, small and default sizes alike."""
    cls = MODELS[name]
    defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items() if k != "output_size"}
    for args in (SMALL[name], {}):
        model = build_model(name, 3, 2, **args)
        given = {**defaults, **args, "input_size": 3}
        sizes = {k: 1 if given.get(k) is None else given[k] for k in size_check._SIZES[cls.__name__]}
        recurrent = int(given.get("controller") in ("lstm", "gru", "elman"))
        parameters, state = size_check._ESTIMATES[cls.__name__]({**sizes, "recurrent": recurrent})
        held = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
        assert parameters <= held, f"{name} {args}: {parameters} > {held}"
        assert state <= size_check.state_elements(model), f"{name} {args}"


def test_format_bytes():
    assert size_check.format_bytes(512) == "512 B"
    assert size_check.format_bytes(3 * 2**30) == "3 GiB"
    assert size_check.format_bytes(2**60).endswith("PiB")


def tiny_run(run_dir, batch_size=2, max_length=2):
    from mannlab.config import RunConfig, TrainConfig

    return RunConfig(
        model="lstm",
        task="copy",
        model_args={"hidden_size": 4},
        task_args={"width": 2, "max_length": max_length},
        train=TrainConfig(steps=1, batch_size=batch_size, progress=False),
        run_dir=str(run_dir),
    )


@pytest.mark.parametrize("sizes", [{"batch_size": 10**12}, {"max_length": 10**9}], ids=["batch", "length"])
def test_a_run_no_memory_holds_fails_before_its_run_dir(tmp_path, sizes):
    from mannlab.training import train

    with (
        no_hang(20),
        pytest.raises(ConfigError, match=r"training lstm on copy .* needs at least .* available"),
    ):
        train(tiny_run(tmp_path / "run", **sizes))
    assert not (tmp_path / "run").exists()


def test_eval_lengths_no_memory_holds_fail_before_sampling(monkeypatch):
    from mannlab import tasks
    from mannlab.evaluation.lengths import evaluate_lengths

    task = tasks.make("copy", width=2, max_length=2)
    model = build_model("lstm", task.input_size, task.output_size, hidden_size=4)
    with no_hang(10), pytest.raises(ConfigError, match=r"evaluating at length 1000000000 .* needs at least"):
        evaluate_lengths(model, task, [2, 10**9])
    monkeypatch.setattr(size_check, "available_memory", lambda: 10**6)
    with pytest.raises(ConfigError, match=r"evaluating at length 100000 \(4 batches of 32"):
        evaluate_lengths(model, task, [100_000])
    rows = evaluate_lengths(model, task, [2], batches=1, batch_size=2)  # small enough: runs
    assert rows[0]["length"] == 2


MAGNITUDE_CASES = [
    ("armin", {}),
    ("lstm", {"layer_norm": True}),
    ("dntm", {"location_shifts": 1}),
    ("dnc", {"controller": "gru"}),
]


@pytest.mark.parametrize("model,args", MAGNITUDE_CASES, ids=[m for m, _ in MAGNITUDE_CASES])
def test_inputs_and_states_past_the_magnitude_bound_are_refused(model, args):
    import torch

    from mannlab.models.state_check import MAX_MAGNITUDE

    net = build_model(model, 3, 2, **{**SMALL[model], **args})
    x = torch.randn(2, 4, 3)
    _, state = net(x)
    with pytest.raises(ValueError, match=r"input with a value of magnitude .*e\+30; values must stay below"):
        net(x * 1e30)
    big = type(state)(*(field * 0 + 1e30 if isinstance(field, torch.Tensor) else field for field in state))
    with pytest.raises(ValueError, match="state field .* magnitude"):
        net(x, big)
    y, _ = net(x * (MAX_MAGNITUDE / 10) / x.abs().max())  # below the bound: accepted
    assert y.shape == (2, 4, 2)


def test_aux_loss_refuses_a_step_nll_that_is_not_a_likelihood():
    import math

    import torch

    net = build_model("dntm", 3, 2, **{**SMALL["dntm"], "addressing": "reinforce"})
    _, _, trace = net(torch.randn(2, 4, 3), return_trace=True)
    assert torch.isfinite(net.aux_loss(trace, torch.ones(2, 4)))
    for bad in (math.nan, math.inf, -5.0):
        nll = torch.ones(2, 4)
        nll[0, 1] = bad
        with pytest.raises(ValueError, match="step_nll must be finite and >= 0"):
            net.aux_loss(trace, nll)
