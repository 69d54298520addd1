"""Short learning checks: each model's loss clearly falls on a tiny copy task.

Full solves at the papers' sizes are recipes (recipes/, docs/RESULTS.md), not tests.
"""

import pytest

from mannlab.models import build_model
from tiny_copy import tiny_copy_losses

TINY = {
    "ntm-lstm": ("ntm", dict(controller="lstm", controller_size=32, memory_slots=12, memory_width=6)),
    "ntm-fnn": ("ntm", dict(controller="fnn", controller_size=32, memory_slots=12, memory_width=6)),
    "lstm": ("lstm", dict(hidden_size=32)),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_loss_falls_on_tiny_copy(name):
    model_name, kwargs = TINY[name]
    before, after = tiny_copy_losses(
        lambda task: build_model(model_name, task.input_size, task.output_size, **kwargs),
        steps=300,
        max_length=4,
    )
    assert after < 0.6 * before, f"{name}: validation BCE {before:.3f} -> {after:.3f}"
