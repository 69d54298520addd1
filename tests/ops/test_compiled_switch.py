"""The switch that forces the "compiled" backend (ops/compiled.py, ops/dispatch.py): every
memory model's pass takes it where forced, with and without the trace, and the step loop
where the kernels are off. Choosing compiles nothing."""

import pytest
import torch

from conftest import small_model
from mannlab.models import base
from mannlab.ops import use_kernels


@pytest.mark.parametrize("with_trace", [False, True])
@pytest.mark.parametrize("name", ["ntm", "dnc", "dntm", "tardis", "armin"])
def test_switch_chooses_the_compiled_backend(name, with_trace):
    model = small_model(name, 4, 3)
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    with use_kernels("compiled"):
        assert base.sequence_backend(model.cell, x, None, with_trace) == "compiled"
    with use_kernels(False):
        assert base.sequence_backend(model.cell, x, None, with_trace) == ""
