"""Constructor arguments keep their types: a boolean must be a bool (not "false", 1 or None,
which Python would read as true or false without a word), an integer an int (not 2.5, "3",
True or NaN), and a seed an integer >= 0."""

import inspect
import math

import pytest

from conftest import SMALL
from mannlab.errors import ConfigError
from mannlab.models import MODELS, build_model

NOT_BOOLS = ["false", "true", 1, 0, None, 1.0]
NOT_INTS = [2.5, "3", True, math.nan, 2.0, None]


def annotated(kind: str) -> list[tuple[str, str]]:
    """(model, argument) of every constructor argument annotated ``kind`` (or Optional)."""
    out = []
    for name, cls in MODELS.items():
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
            if p.name not in ("input_size", "output_size") and str(p.annotation) == kind:
                out.append((name, p.name))
    return out


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
@pytest.mark.parametrize("model,arg", annotated("bool"))
def test_booleans_must_be_bools(model, arg, value):
    with pytest.raises(ConfigError, match=f"{arg} must be true or false, got {value!r}"):
        build_model(model, 3, 2, **{**SMALL[model], arg: value})


@pytest.mark.parametrize("value", NOT_INTS, ids=repr)
@pytest.mark.parametrize("model,arg", annotated("int"))
def test_integers_must_be_ints(model, arg, value):
    with pytest.raises(ConfigError, match=arg):
        build_model(model, 3, 2, **{**SMALL[model], arg: value})


@pytest.mark.parametrize("value", [2.5, "3", True, math.nan, -1, 2**63])
@pytest.mark.parametrize("model,extra", [("tardis", {}), ("armin", {}), ("armin", {"read": "tardis"})])
def test_address_seeds_are_integers_from_zero(model, extra, value):
    with pytest.raises(ConfigError, match=r"address_seed must be an integer in \[0, "):
        build_model(model, 3, 2, **{**SMALL[model], **extra, "address_seed": value})


def test_the_issue_cases():
    """The cases as reported: batch_first="false" kept as a truthy string, layer_norm="false"
    turning TARDIS's layer norm on, a reinforce D-NTM's input_baseline=1, shift_range=True."""
    for model in MODELS:
        with pytest.raises(ConfigError, match="batch_first"):
            build_model(model, 3, 2, **{**SMALL[model], "batch_first": "false"})
    with pytest.raises(ConfigError, match="layer_norm"):
        build_model("tardis", 3, 2, **{**SMALL["tardis"], "layer_norm": "false"})
    for value in ("false", 1, None):
        with pytest.raises(ConfigError, match="input_baseline"):
            build_model("dntm", 3, 2, **{**SMALL["dntm"], "addressing": "reinforce", "input_baseline": value})
    with pytest.raises(ConfigError, match="shift_range"):
        build_model("ntm", 3, 2, **{**SMALL["ntm"], "shift_range": True})


def test_right_types_still_build():
    for model in MODELS:
        build_model(model, 3, 2, **{**SMALL[model], "batch_first": False})
    build_model("tardis", 3, 2, **{**SMALL["tardis"], "layer_norm": True, "address_seed": 2**63 - 1})
    build_model("armin", 3, 2, **{**SMALL["armin"], "read": "tardis", "address_seed": 7})
