"""The short learning check shared by the model and controller tests."""

import torch

from mannlab import tasks


def tiny_copy_losses(build, steps=150, lr=3e-3, max_length=3):
    """Train ``build(task)`` on copy (width 4) with Adam; validation BCE before and after."""
    torch.manual_seed(0)
    task = tasks.make("copy", width=4, max_length=max_length)
    model = build(task)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    val = task.sample(64, 12345)

    def val_loss():
        with torch.no_grad():
            return task.loss(model(val[0])[0], val[1], val[2]).item()

    before = val_loss()
    for step in range(steps):
        x, y, mask = task.sample(16, [0, step])
        loss = task.loss(model(x)[0], y, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return before, val_loss()
