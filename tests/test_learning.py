"""Short learning checks: each model's loss clearly falls on a tiny copy task.

Full solves at the papers' sizes are recipes (recipes/, docs/RESULTS.md), not tests.
"""
import pytest
import torch

from mannlab import tasks
from mannlab.models import build_model

TINY = {
    "ntm-lstm": ("ntm", dict(controller="lstm", controller_size=32, memory_slots=12, memory_width=6)),
    "ntm-fnn": ("ntm", dict(controller="fnn", controller_size=32, memory_slots=12, memory_width=6)),
    "lstm": ("lstm", dict(hidden_size=32)),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_loss_falls_on_tiny_copy(name):
    torch.manual_seed(0)
    task = tasks.make("copy", width=4, min_length=1, max_length=4)
    model_name, kwargs = TINY[name]
    model = build_model(model_name, task.input_size, task.output_size, **kwargs)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    val = task.sample(64, 12345)

    def val_loss():
        with torch.no_grad():
            return task.loss(model(val[0])[0], val[1], val[2]).item()

    before = val_loss()
    for step in range(300):
        x, y, mask = task.sample(16, [0, step])
        loss = task.loss(model(x)[0], y, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = val_loss()
    assert after < 0.6 * before, f"{name}: validation BCE {before:.3f} -> {after:.3f}"
