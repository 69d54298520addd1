"""Every shipped D-NTM recipe builds a model whose addressing can learn: at initialisation, on
a real batch of the recipe's task, the read and write distributions, at the first step and
after it, are not uniform and the log-probability of the cells they pick has a non-zero gradient. (Write
keys over the content part alone fail this: with C_0 = 0 every write weighting is uniform with
a zero gradient.) Data-set tasks read small generated fixtures, never the network."""

from pathlib import Path

import pytest
import torch

from data_files import write_archive, write_mnist
from mannlab import tasks
from mannlab.building import build_run
from mannlab.config import load_config
from mannlab.models.dntm import DNTM

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
DNTM_RECIPES = sorted(p for p in RECIPES.rglob("*.toml") if load_config(p).model == "dntm")


pytestmark = pytest.mark.usefixtures("offline")


def fixture_overrides(task: str, tmp_path: Path) -> list[str]:
    """Point a data-set task at a generated fixture (a small batch-size-agnostic set)."""
    if task == "babi":
        return [f"task.data_dir={write_archive(tmp_path / 'tasks_1-20_v1-2.tar.gz')}"]
    if task == "mnist":
        write_mnist(tmp_path)
        return [f"task.data_dir={tmp_path}", "task.valid_size=5"]
    assert task in tasks.TASKS, f"no fixture for the data-set task {task!r}"
    return []


def inner_dntm(model) -> DNTM:
    """The DNTM itself (a bAbI model sits behind its fact encoder)."""
    return model if isinstance(model, DNTM) else model.model


def test_the_recipes_are_found():
    names = {p.stem for p in DNTM_RECIPES}
    assert {"dntm-copy-reinforce", "babi-dntm-soft-1step", "pmnist-dntm-soft"} <= names


@pytest.mark.parametrize("recipe", DNTM_RECIPES, ids=lambda p: p.stem)
def test_addressing_is_not_uniform_and_has_a_gradient(recipe, tmp_path):
    config = load_config(recipe)
    config = load_config(recipe, fixture_overrides(config.task, tmp_path))
    torch.manual_seed(0)
    task, model = build_run(config)
    model.train()
    x, _, _ = task.sample(4, 0)
    _, _, trace = model(x, return_trace=True)
    cells = inner_dntm(model).cell.slots
    parameters = [p for p in model.parameters() if p.requires_grad]
    learned = ("read", "write") if inner_dntm(model).cell.writes == "learned" else ("read",)
    for name in learned:  # writes="sequential" learns no addressing for its writes
        for when, steps in (("at the first step", slice(0, 1)), ("after it", slice(1, None))):
            probs = getattr(trace, f"{name}_probs")[:, steps]
            picked = getattr(trace, f"{name}_weights")[:, steps]  # samples, or soft weights
            # the largest probability of each step, against uniform 1/N
            assert (probs.amax(-1) - 1 / cells).abs().max() > 1e-3, f"{name} weights are uniform {when}"
            chosen = torch.nn.functional.one_hot(picked.argmax(-1), cells).to(probs.dtype)
            log_p = (chosen * probs.clamp_min(1e-30).log()).sum()
            grads = torch.autograd.grad(log_p, parameters, allow_unused=True, retain_graph=True)
            norm = sum(float(g.norm()) for g in grads if g is not None)
            assert norm > 1e-6, f"log p(picked {name} cells) {when} has no gradient"
