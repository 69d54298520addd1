"""The NaN and memory soak: long training runs that look for the first non-finite number
and for memory that grows.

Each model trains at a shipped recipe's settings (its [model], [task] and [train]
sections: optimizer, lr, clip, batch size) on the recipe's batch source, without
validation, checkpoints or lr changes. After every step the loss, every gradient and every
parameter are checked; the first non-finite one stops the run and is reported with its
step and batch seed (a sampled batch is ``task.sample(batch_size, [seed, step])``, so the
step reproduces it). The resident set size (RSS, from /proc/self/statm) and the mean loss
are sampled every ``--every`` steps.

A long soak can be split over several sittings: the run saves its state (weights, optimizer,
random-number state, the carried TBPTT state, the samples and clocks so far) to
``OUT/<name>.ckpt`` every ``--save-minutes`` and when it stops, and ``--resume`` continues it
from there to the same steps as one uninterrupted run. RSS is that of each sitting's process,
so the samples after a resume start from a fresh process (the report marks each sitting).

    python reliability/soak.py train --model ntm --steps 10000 --out OUT
    python reliability/soak.py train --model ntm --steps 100000 --max-minutes 60 --out OUT --resume
    python reliability/soak.py tbptt --segments 10000 --data-dir DIR --out OUT
    python reliability/soak.py report --out OUT --figures docs/figures

``train`` and ``tbptt`` write ``OUT/<name>.json`` (one run, one process, so each RSS curve
is its own); ``tbptt`` trains the ARMIN PTB-character recipe on contiguous streams with the
state carried across segments (the TBPTT batch source), from the PTB copy in ``--data-dir``
(a directory or archive) or, without one, from a synthetic stream written to OUT in the
PTB character format; ``report`` gathers the runs into ``OUT/summary.json`` and draws
the loss and RSS curves.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mannlab import recipes
from mannlab.building import build_run
from mannlab.config import load_config
from mannlab.rundir.checkpoint import load_checkpoint, save_checkpoint
from mannlab.training.loop import batch_source
from mannlab.training.optimizer import make_optimizer

#: the recipe each model is soaked at (a copy task: every model has one)
RECIPES = {
    "ntm": "ntm-copy-lstm",
    "dntm": "dntm-copy-soft",
    "dnc": "table2/dnc-copy",
    "tardis": "tardis-copy-gumbel",
    "armin": "armin-copy",
    "lstm": "table1/lstm-copy",
}
TBPTT_RECIPE = "ptb-char-armin"
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """The resident set size of this process (second field of /proc/self/statm, in pages)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def peak_rss_bytes() -> int | None:
    """The peak resident set size (VmHWM of /proc/self/status), None where it is missing."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def first_non_finite(tensors: list[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first tensor holding a NaN or an infinity, else None. One fused
    norm per call (a NaN or infinity anywhere makes its tensor's norm non-finite); the
    per-tensor search runs only when that fails."""
    if not tensors:
        return None
    norms = torch._foreach_norm([t.detach() for _, t in tensors])
    if bool(torch.isfinite(torch.stack(norms)).all()):
        return None
    for (name, tensor), norm in zip(tensors, norms):
        if not torch.isfinite(norm) or not bool(torch.isfinite(tensor).all()):
            return name
    return None  # the norm overflowed on finite values


class Soak:
    """One model trained ``steps`` steps with every-step checks and periodic RSS samples.
    With ``checkpoint`` (a directory) the run saves its state there and can resume."""

    def __init__(self, config, every: int, checkpoint: Path | None = None):
        self.config, self.cfg, self.every = config, config.train, every
        torch.manual_seed(config.seed)
        self.task, self.model = build_run(config)
        self.optimizer = make_optimizer(self.model, self.cfg)
        self.source = batch_source(config, self.task, self.model)
        self.params = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.checkpoint = checkpoint
        # progress carried over sittings: steps done, samples, pending losses, clocks
        self.done, self.losses = 0, []
        self.rows = [{"step": 0, "rss": rss_bytes(), "loss": None, "sitting": 0}]
        self.wall_before = self.cpu_before = 0.0
        self.sitting = 0

    def resume(self) -> None:
        """Continue from ``checkpoint``: weights, optimizer, RNG, TBPTT state and progress."""
        meta, state = load_checkpoint(self.checkpoint, self.model)
        if meta.get("config") != self.config.to_dict():
            sys.exit(f"{self.checkpoint} was saved by a soak of another config: use another --out or --name")
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng_state"])
        self.source.restore(state, self.model)
        self.done, self.rows, self.losses = state["done"], state["samples"], state["losses"]
        self.wall_before, self.cpu_before = state["wall"], state["cpu"]
        self.sitting = state["sitting"] + 1
        self.rows.append({"step": self.done, "rss": rss_bytes(), "loss": None, "sitting": self.sitting})

    def save(self, wall: float, cpu: float) -> None:
        state = {
            "optimizer": self.optimizer.state_dict(),
            "torch_rng_state": torch.get_rng_state(),
            "done": self.done,
            "samples": self.rows,
            "losses": self.losses,
            "wall": wall,
            "cpu": cpu,
            "sitting": self.sitting,
            **self.source.extra_state(),
        }
        save_checkpoint(self.checkpoint, self.model, {"soak": True, "config": self.config.to_dict()}, state)

    def batch_seed(self, step: int) -> list[int] | None:
        """The seed of step ``step``'s sampled batch (None for a TBPTT segment)."""
        return [self.config.seed, step] if self.source.unit == "step" else None

    def step(self, step: int) -> tuple[float, dict[str, Any] | None]:
        """One training step: (task loss, None) or (loss, the first non-finite found)."""
        loss, task_loss = self.source.losses(self.model, step)
        value = float(task_loss.detach())
        if not math.isfinite(float(loss.detach())) or not math.isfinite(value):
            return value, {"where": "loss", "loss": float(loss.detach())}
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        bad = first_non_finite([(n, p.grad) for n, p in self.params if p.grad is not None])
        if bad is not None:
            return value, {"where": "gradient", "tensor": bad}
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_grad_norm or math.inf)
        self.optimizer.step()
        bad = first_non_finite(self.params)
        if bad is not None:
            return value, {"where": "parameter", "tensor": bad}
        return value, None

    def run(
        self, steps: int, progress_every: int, max_minutes: float = 0.0, save_minutes: float = 0.0
    ) -> dict[str, Any]:
        """Train until ``steps`` steps are done (over all sittings), or for ``max_minutes``
        of wall time (0: no limit); save every ``save_minutes`` (0: only at the end) when
        there is a checkpoint directory."""
        self.model.train()
        non_finite = None
        wall, cpu = time.perf_counter(), time.process_time()
        deadline = wall + 60 * max_minutes if max_minutes > 0 else math.inf
        next_save = wall + 60 * save_minutes if save_minutes > 0 else math.inf
        stopped = "steps"
        for step in range(self.done, steps):
            now = time.perf_counter()
            if now > deadline:
                stopped = "time"
                break
            if self.checkpoint is not None and now > next_save:
                self.save(self.wall_before + now - wall, self.cpu_before + time.process_time() - cpu)
                next_save = now + 60 * save_minutes
            value, bad = self.step(step)
            if bad is not None:
                non_finite = {"step": step, "batch_seed": self.batch_seed(step), **bad}
                stopped = "non-finite"
                break
            self.losses.append(value)
            self.done = step + 1
            if self.done % self.every == 0:
                self._sample()
            if progress_every and self.done % progress_every == 0:
                print(
                    f"{self.config.model}: {self.done}/{steps} {self.source.unit}s, "
                    f"loss {self.rows[-1]['loss']:.4f}, rss {self.rows[-1]['rss'] / 2**20:.1f} MiB, "
                    f"{time.perf_counter() - wall:.0f} s",
                    flush=True,
                )
        if self.losses and not (stopped == "time" and self.checkpoint is not None):
            self._sample()  # a timed-out run with a checkpoint keeps them for its next sitting
        wall_total = self.wall_before + time.perf_counter() - wall
        cpu_total = self.cpu_before + time.process_time() - cpu
        if self.checkpoint is not None and non_finite is None:
            self.save(wall_total, cpu_total)
        rss = [r["rss"] for r in self.rows]
        first = next((r["rss"] for r in self.rows[1:] if r["sitting"] == 0), None)
        return {
            "model": self.config.model,
            "task": self.config.task,
            "unit": self.source.unit,
            "steps_asked": steps,
            "steps_done": self.done,
            "stopped": stopped,
            "max_minutes": max_minutes,
            "sittings": self.sitting + 1,
            "non_finite": non_finite,
            "non_finite_count": 0 if non_finite is None else 1,
            "rss_start": rss[0],
            "rss_after_first_sample": first,
            "rss_end": rss[-1],
            "rss_max": max(rss),
            "peak_rss": peak_rss_bytes(),
            "wall_seconds": round(wall_total, 1),
            "cpu_seconds": round(cpu_total, 1),
            "threads": torch.get_num_threads(),
            "samples": self.rows,
        }

    def _sample(self) -> None:
        loss = float(np.mean(self.losses))
        self.rows.append({"step": self.done, "rss": rss_bytes(), "loss": loss, "sitting": self.sitting})
        self.losses = []


# ------------------------------------------------------------------ commands


def synthetic_ptb(folder: Path, symbols: int = 400_000, seed: int = 0) -> Path:
    """PTB character files (``ptb.char.{train,valid,test}.txt``) of random words, for a run
    without a data directory. Returns ``folder``."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    folder.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", symbols), ("valid", symbols // 10), ("test", symbols // 10)):
        lines, count = [], 0
        while count < size:
            words = ["".join(rng.choice(letters, rng.integers(1, 9))) for _ in range(rng.integers(5, 20))]
            line = " ".join("_".join(words))
            lines.append(line + " \n ")
            count += len(line) // 2 + 1
        (folder / f"ptb.char.{split}.txt").write_text("".join(lines))
    return folder


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def run_name(args) -> str:
    return args.name or (args.model if args.command == "train" else "tbptt")


def soak_to(config, args, asked: int) -> dict[str, Any]:
    """A new soak, or with ``--resume`` the one saved in OUT/<name>.ckpt, run to ``asked``
    steps. Resuming a run that already did them exits without touching its record."""
    soak = Soak(config, args.every, args.out / f"{run_name(args)}.ckpt")
    if args.resume:
        soak.resume()
        if soak.done >= asked:
            print(f"{run_name(args)}: already {soak.done} of {asked} {soak.source.unit}s; nothing to do")
            sys.exit(0)
    return soak.run(asked, args.progress, args.max_minutes, args.save_minutes)


def command_train(args) -> dict[str, Any]:
    recipe = args.recipe or RECIPES[args.model]
    config = load_config(recipes.resolve(recipe), args.set)
    result = soak_to(config, args, args.steps)
    return {"recipe": recipe, "overrides": args.set, **result}


def command_tbptt(args) -> dict[str, Any]:
    if args.data_dir is None:
        data = synthetic_ptb(args.out / "synthetic-ptb")
        stream = "synthetic PTB-format characters"
    else:
        data, stream = Path(args.data_dir), "PTB characters (--data-dir)"
    overrides = [f"task.data_dir={json.dumps(str(data))}", *args.set]
    config = load_config(recipes.resolve(args.recipe), overrides)
    result = soak_to(config, args, args.segments)
    return {"recipe": args.recipe, "overrides": args.set, "stream": stream, **result}


def command_report(args) -> None:
    runs = {p.stem: json.loads(p.read_text()) for p in sorted(args.out.glob("*.json")) if p.stem != "summary"}
    if not runs:
        sys.exit(f"no run files (*.json) in {args.out}")
    summary = {name: {k: v for k, v in run.items() if k != "samples"} for name, run in runs.items()}
    write_json(args.out / "summary.json", summary)
    figures = args.figures or args.out
    figures.mkdir(parents=True, exist_ok=True)
    plot(runs, figures)
    print(
        "| run | recipe | steps asked | steps run | stopped by | non-finite "
        "| RSS start / after first sample / end / max (MiB) | wall s | CPU s |"
    )
    print("|---|---|---:|---:|---|---:|---|---:|---:|")
    for name, run in summary.items():
        mib = [run[k] / 2**20 for k in ("rss_start", "rss_after_first_sample", "rss_end", "rss_max")]
        print(
            f"| {name} ({run['unit']}s) | {run['recipe']} | {run['steps_asked']:,} | {run['steps_done']:,} | "
            f"{run.get('stopped', '')} | {run['non_finite_count']} | {' / '.join(f'{m:.1f}' for m in mib)} | "
            f"{run['wall_seconds']:,.0f} | {run['cpu_seconds']:,.0f} |"
        )


def plot(runs: dict[str, dict[str, Any]], folder: Path) -> None:
    """soak-loss.png (mean task loss per sample interval) and soak-rss.png (RSS) against
    the step, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, ylabel, scale, name in (
        ("loss", "mean task loss (nats)", 1.0, "soak-loss.png"),
        ("rss", "RSS (MiB)", 2**-20, "soak-rss.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4))
        for name_, run in runs.items():
            steps, values, sitting = [], [], 0
            for r in run["samples"]:
                if r.get("sitting", 0) != sitting:  # a new process: break the line
                    steps.append(r["step"])
                    values.append(math.nan)
                    sitting = r["sitting"]
                if r[key] is not None:
                    steps.append(r["step"])
                    values.append(r[key] * scale)
            ax.plot(steps, values, label=f"{name_} ({run['unit']}s)")
        ax.set_xlabel("step (TBPTT: segment)")
        ax.set_ylabel(ylabel)
        if key == "loss":
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("train", "tbptt"):
        sub = commands.add_parser(name)
        sub.add_argument("--out", type=Path, required=True, help="output directory")
        sub.add_argument("--every", type=int, default=100, help="RSS and loss sample interval")
        sub.add_argument("--progress", type=int, default=1000, help="print every N steps (0: never)")
        sub.add_argument("--threads", type=int, default=1, help="torch threads")
        sub.add_argument("--set", action="append", default=[], help="config override, as in mannlab")
        sub.add_argument("--max-minutes", type=float, default=0.0, help="wall-time limit (0: none)")
        sub.add_argument("--name", help="run file name (default: the model, or 'tbptt')")
        sub.add_argument(
            "--save-minutes", type=float, default=10.0, help="save the state every N minutes (0: at the end)"
        )
        sub.add_argument("--resume", action="store_true", help="continue the run saved in OUT/<name>.ckpt")
    train, tbptt = commands.choices["train"], commands.choices["tbptt"]
    train.add_argument("--model", choices=sorted(RECIPES), required=True)
    train.add_argument("--recipe", help="recipe name or file (default: the model's copy recipe)")
    train.add_argument("--steps", type=int, default=10_000)
    tbptt.add_argument("--segments", type=int, default=10_000)
    tbptt.add_argument("--data-dir", help="PTB copy (directory or archive); default: synthetic")
    tbptt.add_argument("--recipe", default=TBPTT_RECIPE)
    report = commands.add_parser("report")
    report.add_argument("--out", type=Path, required=True)
    report.add_argument("--figures", type=Path, help="figure directory (default: --out)")
    args = parser.parse_args(argv)
    if args.command == "report":
        command_report(args)
        return 0
    if args.every < 1:
        parser.error("--every must be at least 1")
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    result = command_train(args) if args.command == "train" else command_tbptt(args)
    write_json(args.out / f"{run_name(args)}.json", result)
    bad = result["non_finite"]
    print(f"non-finite: {bad}" if bad else f"no non-finite value in {result['steps_done']} {result['unit']}s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
