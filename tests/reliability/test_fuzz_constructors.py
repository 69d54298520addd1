"""Fuzz corpus of the model constructors: every registered model built with one to three of its
arguments set to hostile values (wrong types, NaN, huge or negative numbers, strings, sizes
no memory holds).

Every case must build a model whose arguments kept their declared types (a bool-annotated
argument a bool, an int-annotated one an int), or fail with a ConfigError with a message;
no other exception, no hang.

    MANNLAB_FUZZ_EXAMPLES=1000 pytest tests/reliability/test_fuzz_constructors.py -n 0
"""

import inspect
import math

from hypothesis import given
from hypothesis import strategies as st

from conftest import SMALL
from fuzzing import fuzz_settings, no_hang
from mannlab.errors import ConfigError
from mannlab.models import MODELS, build_model

FUZZ = fuzz_settings(60, seconds=30)
HOSTILE = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(-3, 12),
    st.sampled_from([-1, 0, -(2**63)]),
    st.sampled_from([10**10, 2**40, 2**62]),  # sizes that cannot fit: refused before allocating
    st.sampled_from([0.0, 0.5, 1.0, 2.0, 2.5, -1.0, -1e30, math.nan, math.inf]),
    st.sampled_from(["", "false", "true", "3", "nan", "lstm", "gru", "soft", "x" * 100]),
)


def parameters(model: str) -> dict[str, str]:
    """Constructor argument -> its annotation, for every argument besides the two sizes."""
    found = inspect.signature(MODELS[model].__init__).parameters.values()
    return {p.name: str(p.annotation) for p in found if p.name not in ("self", "input_size", "output_size")}


@st.composite
def constructor_case(draw):
    model = draw(st.sampled_from(sorted(MODELS)))
    args = dict(SMALL[model])
    for _ in range(draw(st.integers(1, 3))):
        args[draw(st.sampled_from(sorted(parameters(model))))] = draw(HOSTILE)
    return model, args


@FUZZ
@given(case=constructor_case())
def test_generated_constructor_arguments(case):
    model, args = case
    try:
        with no_hang(20):
            build_model(model, 3, 2, **args)
    except ConfigError as error:
        assert str(error).strip()
        return
    for name, kind in parameters(model).items():
        value = args.get(name)
        if name not in args or (value is None and kind.startswith("Optional")):
            continue
        if kind in ("bool", "Optional[bool]"):
            assert isinstance(value, bool), f"{model}: {name}={value!r} accepted"
        elif kind in ("int", "Optional[int]"):
            assert isinstance(value, int) and not isinstance(value, bool), (
                f"{model}: {name}={value!r} accepted"
            )
