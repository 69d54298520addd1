"""Speed of the DNC at the partially-non-recurrent paper's Toy-task size, as ratios to LSTMCell.

Measures, per time step, the median over several repeats of:
  train  forward + loss + backward over a whole sequence, divided by its length T
  infer  forward under torch.no_grad(), divided by T
for these models, measured in the same run on the same inputs (input 9, output 8):
  DNC          mannlab.DNC(9, 8), 128-unit LSTM controller, 128 x 20 memory, one read
               head (Taguchi & Tsuruoka's Toy-task configuration): the compiled
               whole-sequence path (mannlab.ops.dnc.numba_sequence) on CPU float32
  DNC steps    the same sizes on the per-step tensor path (every kernel switched off),
               for information
  NTM          mannlab.NTM(9, 8) with the same controller and memory, for information
  LSTMCell     torch.nn.LSTMCell(9, 128) stepped in a Python loop + Linear(128, 8):
               the reference
  LSTM         torch.nn.LSTM(9, 128) (the fused sequence op) + Linear, for information
  dnc (PyPI)   the `dnc` package's DNC (R. Chatterjee, "ixaxaar") at the same size, when it
               imports (installed, or from --dnc-path DIR, e.g. a directory made with
               `pip install --no-deps --target DIR dnc`) and runs, else "not measured"; its
               output layer maps back to the input size, so a Linear(9, 8) is added

plus, once per training setting (untimed), the bytes autograd keeps for the
backward pass (the activation memory a training step needs beyond the weights; for the
compiled path, the kernels' records). The timing, memory and table helpers are bench_ntm.py's.

    python benchmarks/bench_dnc.py                       # batch 1 and 32, T=41, 1 thread
    python benchmarks/bench_dnc.py --dnc-path DIR --clock cpu
    python benchmarks/bench_dnc.py --batch-sizes 8 --json bench.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mannlab  # noqa: E402
from bench_ntm import (
    CLOCKS,
    INPUT,
    OUTPUT,
    FusedLSTM,
    Logits,
    LSTMCellLoop,  # noqa: E402
    TensorPath,
    parse_args,
    report,
    train_step,
)

HIDDEN, SLOTS, WIDTH, READS = 128, 128, 20, 1
REFERENCE = "LSTMCell"


class PyPIDNC(nn.Module):
    """The PyPI `dnc` package's DNC at the same size (+ Linear(9, 8): its output is input-sized)."""

    def __init__(self):
        super().__init__()
        from dnc import DNC  # optional dependency: pip install --no-deps dnc

        self.dnc = DNC(
            input_size=INPUT,
            hidden_size=HIDDEN,
            rnn_type="lstm",
            num_layers=1,
            num_hidden_layers=1,
            nr_cells=SLOTS,
            cell_size=WIDTH,
            read_heads=READS,
            batch_first=True,
            gpu_id=-1,
        )
        self.head = nn.Linear(INPUT, OUTPUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.dnc(x, (None, None, None), reset_experience=True)
        return self.head(out)


SIZES = dict(
    controller="lstm", controller_size=HIDDEN, memory_slots=SLOTS, memory_width=WIDTH, read_heads=READS
)


def dnc() -> nn.Module:
    """The benchmark's DNC with its output layer (also bench_threads.py's)."""
    return Logits(mannlab.DNC(INPUT, OUTPUT, **SIZES))


def make_models() -> tuple[dict[str, nn.Module], str | None]:
    """The models of the run; the PyPI DNC only if it imports and runs (else the error)."""
    models: dict[str, nn.Module] = {
        "DNC": dnc(),
        "DNC steps": TensorPath(dnc()),
        "NTM": Logits(mannlab.NTM(INPUT, OUTPUT, **SIZES)),
        "LSTMCell": LSTMCellLoop(HIDDEN),
        "LSTM": FusedLSTM(HIDDEN),
    }
    try:
        pypi = PyPIDNC()
        train_step(pypi, torch.zeros(2, 3, INPUT), torch.zeros(2, 3, OUTPUT))  # does it run?
    except Exception as exc:  # any failure of a third-party package is reported, not fatal
        return models, f"not measured ({type(exc).__name__}: {exc})"
    models["dnc (PyPI)"] = pypi
    return models, None


def add_options(parser) -> None:
    parser.add_argument(
        "--dnc-path", metavar="DIR", help="a directory holding the PyPI `dnc` package (pip --target)"
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall seconds (default), or CPU seconds of this process (fairer on a loaded machine)",
    )


def main(argv: list[str] | None = None) -> None:
    args, batch_sizes = parse_args(argv, __doc__.split("\n")[0], add_options)
    if args.dnc_path:
        sys.path.insert(0, args.dnc_path)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models, pypi_error = make_models()
    notes = {"clock": args.clock, "dnc (PyPI)": pypi_error}
    report(args, batch_sizes, models, REFERENCE, notes=notes, clock=CLOCKS[args.clock])


if __name__ == "__main__":
    main()
