"""Speed of ARMIN at the size of its algorithmic tasks (table 5), as ratios to LSTMCell.

Measures, per time step, the median over several repeats of:
  train  forward + BCE loss + backward over a whole sequence (no optimizer update), / T
  infer  forward in eval mode under torch.no_grad() (argmax addressing), / T
for these models, measured in the same run on the same random binary inputs (input 9,
output 8: the copy task's sizes):
  ARMIN                  mannlab.ARMIN(9, 8): hidden 100, memory 50 x 32 (linear write
                         map), layer norm, gumbel-softmax straight-through (one-hot) reads
                         in training; on CPU the compiled whole-sequence kernels
                         (mannlab.ops.armin)
  ARMIN relaxed          the same with the relaxed gumbel-softmax sample (eq. 1) as reads
  ARMIN (tensor path)    the same model with the kernels off: the per-step tensor path
                         (models/armin.py ARMINCell.step; at inference the section-5 fast
                         path, argmax and an index gather / put)
  LSTMCell               torch.nn.LSTMCell(9, 100) stepped in a Python loop + Linear(100, 8):
                         the reference (bench_ntm.py's)
  LSTM                   torch.nn.LSTM(9, 100) (the fused sequence op) + Linear, for information

The timing, memory and table helpers are bench_ntm.py's.

    python benchmarks/bench_armin.py                      # batch 1 and 32, T=41, 1 thread
    python benchmarks/bench_armin.py --steps 101 --batch-sizes 1 --json bench.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mannlab  # noqa: E402
from bench_ntm import (
    INPUT,
    OUTPUT,
    FusedLSTM,
    Logits,
    LSTMCellLoop,
    TensorPath,  # noqa: E402
    eval_infer_step,
    parse_args,
    report,
)

HIDDEN, SLOTS, WIDTH = 100, 50, 32
REFERENCE = "LSTMCell"


def armin(addressing: str = "gumbel", kernels: bool = True) -> nn.Module:
    model = mannlab.ARMIN(
        INPUT, OUTPUT, hidden_size=HIDDEN, memory_slots=SLOTS, memory_width=WIDTH, addressing=addressing
    )
    model.inverse_temperature = 5.0
    return Logits(model if kernels else TensorPath(model))


def main(argv: list[str] | None = None) -> None:
    args, batch_sizes = parse_args(argv, __doc__.split("\n")[0])
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models: dict[str, nn.Module] = {
        "ARMIN": armin(),
        "ARMIN relaxed": armin("gumbel-relaxed"),
        "ARMIN (tensor path)": armin(kernels=False),
        "LSTMCell": LSTMCellLoop(HIDDEN),
        "LSTM": FusedLSTM(HIDDEN),
    }
    report(args, batch_sizes, models, REFERENCE, infer=eval_infer_step)


if __name__ == "__main__":
    main()
