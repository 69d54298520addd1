"""Speed of the D-NTM at the paper's toy-task size, as ratios to a GRUCell loop.

Measures, per time step, the median over several repeats of one training step
(forward + loss + backward, divided by the sequence length T; no optimizer update)
and of inference (forward under torch.no_grad()), for these models, in the same
run on the same random binary inputs (input 9, output 8, the copy task's sizes):

  D-NTM soft J=1, J=3       mannlab.DNTM(9, 8): 100-unit GRU controller, 128 cells,
                            address and content parts of size 8, one read and one
                            write head, LRU on, J addressing steps per time step
  D-NTM discrete J=1, J=3   the same with addressing="reinforce": one-hot samples in
                            training, plus the REINFORCE terms of aux_loss (entropy
                            bonus on); argmax at inference
  GRUCell                   torch.nn.GRUCell(9, 100) stepped in a Python loop +
                            Linear(100, 8): the reference (the D-NTM also steps its
                            GRU controller in Python)
  LSTMCell                  bench_ntm.py's reference, for comparison with the NTM and DNC

The timing helpers and options are bench_ntm.py's.

    python benchmarks/bench_dntm.py                       # batch 1 and 32, T=41, 1 thread
    python benchmarks/bench_dntm.py --batch-sizes 16 --repeats 9 --json bench.json
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ntm import (INPUT, OUTPUT, LSTMCellLoop, eval_infer_step, parse_args,  # noqa: E402
                       report)

import mannlab  # noqa: E402

HIDDEN = 100
REFERENCE = "GRUCell"


class GRUCellLoop(nn.Module):
    """The reference: a GRUCell stepped over time in Python, with a linear head."""

    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.hidden = hidden
        self.cell = nn.GRUCell(INPUT, hidden)
        self.head = nn.Linear(hidden, OUTPUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], self.hidden)
        outputs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            outputs.append(h)
        return self.head(torch.stack(outputs, dim=1))


def dntm(addressing: str, steps: int) -> mannlab.DNTM:
    extra = {"entropy_weight": 0.01} if addressing == "reinforce" else {}
    return mannlab.DNTM(INPUT, OUTPUT, controller="gru", controller_size=HIDDEN, memory_slots=128,
                        address_size=8, content_size=8, addressing=addressing,
                        addressing_steps=steps, **extra)


def train_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    """Forward, BCE over every step (+ aux_loss for models that need it), backward."""
    model.zero_grad(set_to_none=True)
    if getattr(model, "uses_aux_loss", False):
        logits, _, trace = model(x, return_trace=True)
        nll = F.binary_cross_entropy_with_logits(logits, target, reduction="none").sum(-1)
        loss = nll.mean() / OUTPUT + model.aux_loss(trace, nll.detach())
    else:
        out = model(x)
        loss = F.binary_cross_entropy_with_logits(out[0] if isinstance(out, tuple) else out, target)
    loss.backward()


def main(argv: list[str] | None = None) -> None:
    args, batch_sizes = parse_args(argv, __doc__.split("\n")[0])
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models: dict[str, nn.Module] = {
        "D-NTM soft J=1": dntm("soft", 1), "D-NTM soft J=3": dntm("soft", 3),
        "D-NTM discrete J=1": dntm("reinforce", 1), "D-NTM discrete J=3": dntm("reinforce", 3),
        "GRUCell": GRUCellLoop(), "LSTMCell": LSTMCellLoop(HIDDEN),
    }
    report(args, batch_sizes, models, REFERENCE, train=train_step, infer=eval_infer_step,
           saved_memory=False)


if __name__ == "__main__":
    main()
