"""The D-NTM's LRU average v carries no gradient by design (its moving average of the logits
is a constant to the backward pass), so ``torch.autograd.gradcheck`` of a DNTM with
``lru=True`` fails past its first step: the finite differences also move v. The gradient is
still exact for what it is: the derivative with the averages held at the values they took.
This holds them so, feeding each step's recorded averages back through the state, and checks
that gradient against finite differences."""

import torch

from conftest import float64_seq, small_model

STEPS = 3


def step_by_step(model, x, averages=None):
    """The outputs of ``model`` run one step at a time; with ``averages`` (each step's
    (read, write) LRU averages) the state's averages are replaced by them after each step, so
    they do not depend on ``x``. Returns (outputs, the averages of this run)."""
    state, outputs, seen = None, [], []
    for t in range(x.shape[1]):
        y, state = model(x[:, t : t + 1], state)
        seen.append((state.read_lru.detach().clone(), state.write_lru.detach().clone()))
        if averages is not None:
            state = state._replace(read_lru=averages[t][0], write_lru=averages[t][1])
        outputs.append(y)
    return torch.cat(outputs, 1), seen


def test_the_lru_gradient_is_exact_with_the_averages_held():
    # one addressing step: with J > 1 the average also moves between a step's addressing steps
    model = small_model("dntm", 4, 3, read_heads=2, write_heads=2, nop=True, lru=True)
    x = float64_seq(1, STEPS, 4).requires_grad_()
    y, averages = step_by_step(model, x)
    assert any(v.abs().sum() > 0 for pair in averages[:-1] for v in pair)  # the LRU acts
    weights = torch.rand_like(y)
    (autograd,) = torch.autograd.grad((y * weights).sum(), x)

    def held(inp):
        return step_by_step(model, inp, averages)[0]

    assert torch.allclose(held(x), y)  # the same function at x
    (held_grad,) = torch.autograd.grad((held(x) * weights).sum(), x)
    assert torch.allclose(held_grad, autograd, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(held, (x,))
    # and the whole-sequence call agrees with the step-by-step one
    assert torch.allclose(model(x)[0], y)


def test_gradcheck_of_the_free_lru_fails_past_the_first_step():
    """What a user who runs gradcheck on the default DNTM sees, and why (the docstring's note)."""
    model = small_model("dntm", 4, 3, nop=True, lru=True)
    x = float64_seq(1, STEPS, 4).requires_grad_()
    assert not torch.autograd.gradcheck(lambda inp: model(inp)[0], (x,), raise_exception=False)
