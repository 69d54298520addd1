"""Speed of the D-NTM at the paper's toy-task size, as ratios to a GRUCell loop.

Measures, per time step, the median over several repeats of one training step
(forward + loss + backward, divided by the sequence length T; no optimizer update)
and of inference (forward under torch.no_grad(), eval mode), for these models, in the
same run on the same random binary inputs (input 9, output 8, the copy task's sizes):

  D-NTM soft J=1, J=3       mannlab.DNTM(9, 8): 100-unit GRU controller, 128 cells,
                            address and content parts of size 8, one read and one
                            write head, LRU on, J addressing steps per time step
  D-NTM discrete J=1, J=3   the same with addressing="reinforce": one-hot samples in
                            training, plus the REINFORCE terms of aux_loss (entropy
                            bonus on; the trace is returned); argmax at inference
  ... (tensor path)         the same models with the kernels switched off: the per-step
                            tensor path (the only path before the compiled kernels of
                            mannlab.ops.dntm; --no-tensor-path leaves them out)
  GRUCell                   torch.nn.GRUCell(9, 100) stepped in a Python loop +
                            Linear(100, 8): the reference (the D-NTM's tensor path also
                            steps its GRU controller in Python)
  LSTMCell                  bench_ntm.py's reference, for comparison with the NTM and DNC

On CPU float32 the D-NTM rows run the compiled whole-sequence path. Times are CPU seconds
of this process (time.process_time) by default, so other jobs on a shared machine inflate
them less; ``--clock wall`` times wall-clock seconds as bench_ntm.py does. The other timing
helpers and options are bench_ntm.py's (the models take turns in a rotating order within
each round; ratios are medians over rounds of times measured in the same round).

    python benchmarks/bench_dntm.py                       # batch 1 and 32, T=41, 1 thread
    python benchmarks/bench_dntm.py --batch-sizes 16 --repeats 9 --json bench.json
    python benchmarks/bench_dntm.py --no-tensor-path --clock wall

``--recipes`` times instead the compiled path against the tensor path at the recipes' sizes
(CPU time, per time step, median of --repeats): copy/recall (recipes/dntm-*.toml: batch 16,
T = 41), bAbI (recipes/babi-dntm-*.toml: batch 160, 180 GRU units, 120 cells of 16 + 28,
input the 64 fact features + 2 flags, 20 answers; T = 20 of up to 52) and permuted MNIST
(recipes/pmnist-dntm-soft.toml: batch 32, 64 cells, one pixel per step; T = 100 of 784),
with random inputs and binary targets (BCE).

    python benchmarks/bench_dntm.py --recipes --repeats 5
"""

from __future__ import annotations

import copy as copy_module
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mannlab  # noqa: E402
from bench_ntm import (
    CLOCKS,
    INPUT,
    OUTPUT,
    LSTMCellLoop,
    TensorPath,  # noqa: E402
    cpu_round_robin,
    eval_infer_step,
    parse_args,
    report,
)

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


def dntm(
    addressing: str, steps: int, input_size: int = INPUT, output_size: int = OUTPUT, **sizes
) -> mannlab.DNTM:
    extra = {"entropy_weight": 0.01} if addressing == "reinforce" else {}
    sizes = {"controller_size": HIDDEN, "memory_slots": 128, "address_size": 8, "content_size": 8, **sizes}
    return mannlab.DNTM(
        input_size,
        output_size,
        controller="gru",
        addressing=addressing,
        addressing_steps=steps,
        **sizes,
        **extra,
    )


def train_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    """Forward, BCE over every step (+ aux_loss for models that need it), backward."""
    model.zero_grad(set_to_none=True)
    if getattr(model, "uses_aux_loss", False):
        logits, _, trace = model(x, return_trace=True)
        nll = F.binary_cross_entropy_with_logits(logits, target, reduction="none").sum(-1)
        loss = nll.mean() / target.shape[-1] + model.aux_loss(trace, nll.detach())
    else:
        out = model(x)
        loss = F.binary_cross_entropy_with_logits(out[0] if isinstance(out, tuple) else out, target)
    loss.backward()


def tensor_path(model: mannlab.DNTM) -> nn.Module:
    """The same model on the per-step tensor path (its own copy of the weights)."""
    return TensorPath(copy_module.deepcopy(model))


#: name: (batch, T, input, output, sizes, [(addressing, J, write_keys)]) of the recipes
RECIPES = {
    "copy/recall": (16, 41, 9, 8, {}, [("soft", 1, "memory"), ("reinforce", 1, "content")]),
    "bAbI": (
        160,
        20,
        66,
        20,
        {"controller_size": 180, "memory_slots": 120, "address_size": 16, "content_size": 28},
        [
            ("soft", 1, "content"),
            ("soft", 3, "content"),
            ("reinforce", 1, "content"),
            ("reinforce", 3, "content"),
        ],
    ),
    "pMNIST": (32, 100, 1, 10, {"memory_slots": 64}, [("soft", 1, "content")]),
}


def recipes(args) -> None:
    """The compiled path against the tensor path at the recipes' sizes (see the docstring)."""
    print(
        f"CPU time per time step, median of {args.repeats} (warm-up {args.warmup}), "
        f"threads={args.threads}, torch {torch.__version__}, numba {_numba_version()}\n"
    )
    print(
        "| recipe | batch | addressing | J | train µs / step | tensor path | speed-up "
        "| infer µs / step | tensor path | speed-up |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    start = time.perf_counter()
    for name, (batch, steps, inputs, outputs, sizes, variants) in RECIPES.items():
        gen = torch.Generator().manual_seed(0)
        x = torch.randint(0, 2, (batch, steps, inputs), generator=gen).float()
        target = torch.randint(0, 2, (batch, steps, outputs), generator=gen).float()
        for addressing, J, keys in variants:
            torch.manual_seed(0)
            compiled = dntm(addressing, J, inputs, outputs, write_keys=keys, **sizes)
            models = {"compiled": compiled, "tensor": tensor_path(compiled)}
            row = []
            for step in (train_step, eval_infer_step):
                times = cpu_round_robin(
                    {k: (lambda m=m: step(m, x, target)) for k, m in models.items()},
                    args.warmup,
                    args.repeats,
                )
                med = {k: 1e6 * statistics.median(v) / steps for k, v in times.items()}
                ratio = statistics.median(b / a for a, b in zip(times["compiled"], times["tensor"]))
                row += [f"{med['compiled']:.0f}", f"{med['tensor']:.0f}", f"{ratio:.1f}x"]
            print(f"| {name} | {batch} | {addressing} | {J} | " + " | ".join(row) + " |", flush=True)
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    print(f"\n{time.perf_counter() - start:.0f} s, load average {load} on {os.cpu_count()} cores")


def add_options(parser) -> None:
    """This script's options on top of bench_ntm's."""
    parser.add_argument(
        "--no-tensor-path",
        dest="tensor_rows",
        action="store_false",
        help="leave out the D-NTM rows on the per-step tensor path",
    )
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="cpu",
        help="what the times count: CPU seconds of this process (default) or wall seconds",
    )
    parser.add_argument(
        "--recipes",
        action="store_true",
        help="time the compiled path against the tensor path at the recipes' sizes instead",
    )


def main(argv: list[str] | None = None) -> None:
    args, batch_sizes = parse_args(argv, __doc__.split("\n")[0], add_options)
    torch.set_num_threads(args.threads)
    if args.recipes:
        recipes(args)
        return
    torch.manual_seed(0)
    compiled = {
        "D-NTM soft J=1": dntm("soft", 1),
        "D-NTM soft J=3": dntm("soft", 3),
        "D-NTM discrete J=1": dntm("reinforce", 1),
        "D-NTM discrete J=3": dntm("reinforce", 3),
    }
    models: dict[str, nn.Module] = dict(compiled)
    if args.tensor_rows:
        models.update({f"{name} (tensor path)": tensor_path(model) for name, model in compiled.items()})
    models.update({"GRUCell": GRUCellLoop(), "LSTMCell": LSTMCellLoop(HIDDEN)})
    report(
        args,
        batch_sizes,
        models,
        REFERENCE,
        train=train_step,
        infer=eval_infer_step,
        saved_memory=False,
        clock=CLOCKS[args.clock],
        notes={
            "clock": "process CPU time" if args.clock == "cpu" else "wall time",
            "numba": _numba_version(),
        },
    )


def _numba_version() -> str:
    try:
        import numba
    except ImportError:
        return "not installed (the tensor path runs everywhere)"
    return numba.__version__


if __name__ == "__main__":
    main()
