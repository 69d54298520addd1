"""The estimator and regulariser terms keep the papers' ratio to the NLL whatever the task kind.

The papers' costs add these terms to the sequence's summed NLL. The task loss is a mean: per
output bit on BCE tasks (copy, recall), per scored step on categorical tasks (bAbI, MNIST,
characters). So a term divided by the loss's own normaliser S gives term / task_loss equal to
term_sum / NLL_sum; dividing by bits on a categorical task would make it |V| times too small."""

import pytest
import torch

from data_files import write_mnist
from mannlab import tasks
from mannlab.models import build_model
from mannlab.nn import sampling
from mannlab.training import tbptt
from mannlab.training.update import model_aux_loss
from mannlab.wrappers import CharLM

pytestmark = pytest.mark.usefixtures("offline")


def bit_task(tmp_path):
    return tasks.make("copy", width=3, min_length=2, max_length=5)


def categorical_task(tmp_path):
    write_mnist(tmp_path)
    return tasks.make("mnist", data_dir=str(tmp_path), valid_size=5, pixels_per_step=112)


def losses(task, name, **sizes):
    """Model ``name`` for ``task`` and, on one batch: (task loss, per-sequence summed NLL (B,),
    aux terms, trace, model, scorer)."""
    torch.manual_seed(0)
    model = build_model(name, task.input_size, task.output_size, **sizes).double()
    x, y, m = task.sample(4, 0)
    model.train()
    logits, _, trace = model(x.double(), return_trace=True)
    nll = task.step_nll(logits, y, m)

    def scorer(out):
        return task.step_nll(out, y, m)

    extra = {"score": scorer} if getattr(model, "aux_loss_scores", False) else {}
    terms = model.aux_terms(trace, nll.detach(), outputs_per_step=task.outputs_per_step, **extra)
    return task.loss(logits, y, m), nll.sum(1), terms, trace, model, scorer


KINDS = pytest.mark.parametrize("make_task", [bit_task, categorical_task], ids=["bce", "categorical"])


@KINDS
def test_entropy_term_has_the_papers_ratio_to_the_nll(make_task, tmp_path):
    task_loss, nll, terms, trace, _, _ = losses(
        make_task(tmp_path),
        "dntm",
        controller_size=6,
        memory_slots=4,
        address_size=2,
        content_size=3,
        entropy_weight=0.3,
    )
    entropy = sampling.entropy(trace.read_probs).sum((1, 2)) + sampling.entropy(trace.write_probs).sum((1, 2))
    paper_ratio = (-0.3 * entropy.mean()) / nll.mean()  # section 4's cost, summed terms
    assert torch.allclose(terms["entropy"] / task_loss, paper_ratio, rtol=1e-10)


@KINDS
def test_tardis_auxiliary_cost_has_the_papers_ratio_to_the_nll(make_task, tmp_path):
    task_loss, nll, terms, trace, model, scorer = losses(
        make_task(tmp_path),
        "tardis",
        hidden_size=6,
        memory_slots=3,
        address_size=2,
        content_size=3,
        addressing="reinforce",
    )
    aux_nll = scorer(model.aux_logits(trace)).sum(1)
    paper_ratio = model.aux_weight * aux_nll.mean() / nll.mean()  # eq. 17's cost beside the NLL
    assert torch.allclose(terms["auxiliary"] / task_loss, paper_ratio, rtol=1e-10)


def test_the_task_kinds_say_what_their_loss_averages_over(tmp_path):
    assert bit_task(tmp_path).outputs_per_step == 3
    assert categorical_task(tmp_path).outputs_per_step == 1


def test_the_loops_pass_the_tasks_normaliser(monkeypatch):
    seen = []

    def spy(self, trace, step_nll, score=None, outputs_per_step=None, reducer=None):
        seen.append(outputs_per_step)
        return step_nll.new_zeros(())

    torch.manual_seed(0)
    lm = CharLM(
        5,
        "tardis",
        embedding_size=4,
        hidden_size=8,
        memory_slots=3,
        address_size=2,
        content_size=4,
        addressing="reinforce",
    )
    monkeypatch.setattr(type(lm.core), "aux_loss", spy)
    tokens = torch.randint(0, 5, (2, 5))
    tbptt.tbptt_step(lm, tokens[:, :4], tokens[:, 1:5], None, torch.optim.Adam(lm.parameters()), clip=1.0)
    model = build_model(
        "dntm", 3, 3, controller_size=4, memory_slots=3, address_size=2, content_size=2, entropy_weight=0.1
    )
    monkeypatch.setattr(type(model), "aux_loss", spy)
    x = torch.rand(1, 2, 3)
    model_aux_loss(model, model(x, return_trace=True)[2], torch.ones(1, 2), None, 7)
    assert seen == [1, 7]


def test_outputs_per_step_is_checked():
    model = build_model(
        "dntm", 3, 3, controller_size=4, memory_slots=3, address_size=2, content_size=2, entropy_weight=0.1
    )
    trace = model(torch.rand(1, 2, 3), return_trace=True)[2]
    with pytest.raises(ValueError, match="outputs_per_step must be a positive integer"):
        model.aux_loss(trace, torch.ones(1, 2), outputs_per_step=0)
