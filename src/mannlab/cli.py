"""The `mannlab` command: train, run (recipes over seeds), eval and plot.

A thin argparse layer over mannlab.config and mannlab.training; everything it
does is one function call a user can make from Python as well.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

import mannlab
from mannlab.config import RunConfig, default_config_dict, default_run_dir, load_config, read_toml
from mannlab.errors import CheckpointError, ConfigError, DataError

USER_ERRORS = (ConfigError, CheckpointError, DataError, FileNotFoundError)

MAIN_HELP = """\
Memory-augmented neural networks: train, evaluate and plot.

  mannlab train --model ntm --task copy     train one model on one task
  mannlab run recipes/ntm-copy-lstm.toml         run a recipe over several seeds
  mannlab eval runs/ntm-copy-seed0 --lengths 20,40,80
  mannlab plot runs/ntm-copy-seed0
  mannlab simulate wormhole --out runs/wormhole   TARDIS paper figures 3 and 5 (simulated)
  mannlab gradflow lstm ntm --task copy          gradient norm against distance per model

Run `mannlab <command> --help` for the options of each command.
"""

TRAIN_HELP = """\
Train one model on one task. The run directory (default runs/<model>-<task>-seed<seed>)
receives config.toml (the resolved configuration), metrics.jsonl, checkpoints/best and
checkpoints/last, summary.json and figures/. At the end a table shows the validation
metrics at the training length and at the longer lengths of train.val_length_multiples.

Configuration is layered: built-in defaults for the model and task (or --config FILE),
then --set overrides, then the shortcut flags (--seed, --steps, ...).
--set takes dotted keys with TOML values, e.g.
  --set model.controller=fnn --set task.max_length=10 --set train.lr=3e-4
Sections: model (its keyword arguments), task (its parameters), train (see TrainConfig
in mannlab/config.py: optimizer, lr, batch_size, steps, val_every, clip_grad_norm, ...).
"""

TRAIN_EXAMPLES = """\
examples:
  mannlab train --model ntm --task copy
  mannlab train --model lstm --task copy --steps 5000 --set model.hidden_size=256
  mannlab train --config my.toml --seed 3
  mannlab train --run-dir runs/ntm-copy-seed0 --resume --steps 4000   # continue a run
  mannlab train --model dntm --task copy --set train.max_minutes=20 --set train.budget_clock=cpu
      (stop at 20 CPU minutes or train.steps, whichever comes first)
  mannlab train --model armin --task ptb-char --data-dir DIR --set train.max_minutes=30
      (char-level LM with truncated BPTT; tasks ptb-char, text8, enwik8-char; the task
      section takes data_dir, bptt, valid_batch_size, test_batch_size, valid_symbols,
      test_symbols; the model section also embedding_size, input_dropout, output_dropout)
"""

RUN_HELP = """\
Run a recipe (a TOML run config) once per seed, into <run_dir>/seed<k>, then print a table
over seeds (solved or not, steps and wall time to solve, validation bce and bit errors per
sequence at each length) and write it to <run_dir>/summary.md. The seeds come from --seeds,
else the recipe's `seeds = [...]`, else its `seed`. run_dir defaults to runs/<recipe name>.
"""

EVAL_HELP = """\
Evaluate a run's best checkpoint (or --checkpoint last) at the given sequence lengths
(the task's size parameter: sequence length for copy, items for recall, ...) on fresh
sampled batches, and print bce, bit error rate and bit errors per sequence per length.
--set changes the run's config before its weights load, e.g. model.addressing=argmax tests a
soft-trained D-NTM with discrete (argmax) addressing, the D-NTM paper's Discrete† column.
"""

PLOT_HELP = """\
Draw figures of a run: memory_access.png (reads and writes over one sampled sequence of
--length, default the training length; for models with memory) and learning_curve.png
(from metrics.jsonl), into <RUN>/figures or --out, and print their paths. --set changes
the run's config before its weights load (as for eval).
"""

COMPARE_HELP = """\
Draw the validation curves of several runs in one figure (log scale): bce for the
algorithmic tasks (at the training length), bpc for char-LM runs, ce for data-set tasks,
against the training step or the wall or CPU minutes of training (--x). Each RUN is a run
directory, optionally labelled as LABEL=RUN.
"""


REPORT_HELP = """\
Tables over many runs, in the layout of Table 2 of the partially non-recurrent controllers
paper. RUNS_DIR is searched recursively for run directories (config.toml with summary.json,
e.g. <group>/seed<k>/ as `mannlab run` writes them); model, controller and task come from
each run's config.toml. First table: a row per task, a column per (model, controller); a cell
is the mean over seeds of the bit error rate (%) at the training length of the best-by-
validation checkpoint and, in brackets, the number of seeds with 0 bit errors ("37.5 (0)");
"-" where no run finished. Second table: seeds, steps and wall time per cell. Runs of data-set
tasks (bAbI, MNIST, SNLI, strokes) get a table of test error per group instead, one per task
(bAbI: per task, with the mean and the failed tasks, error > 5%), read from each run's eval-test.json (written by
`python -m mannlab.tasks.data_eval RUN --split test`), a column per configuration: runs alike but
for the seed, the directory and the bAbI tasks share one (a jointly trained model's seeds, or
the D-NTM paper's one model per bAbI task, e.g. DIR/qa<N>/seed0), named by their common
directory. The markdown is
printed and written to RUNS_DIR/report.md (or --out).
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `mannlab` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    from mannlab.training import NonFiniteLossError

    try:
        return args.func(args)
    except USER_ERRORS as exc:
        _fail(exc, 2)
    except NonFiniteLossError as exc:
        _fail(exc, 1)
    except KeyboardInterrupt:
        print("\nmannlab: interrupted; continue a run with --resume (from its last checkpoint)",
              file=sys.stderr)
        raise SystemExit(130) from None


def _fail(exc: BaseException, status: int) -> None:
    message = str(exc)
    if isinstance(exc, FileNotFoundError) and exc.filename is not None:  # raised by open()
        message = f"file not found: {exc.filename}"
    print(f"mannlab: error: {message}", file=sys.stderr)
    raise SystemExit(status) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mannlab", description=MAIN_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mannlab {mannlab.__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name: str, summary: str, description: str, epilog: str | None = None):
        sub = commands.add_parser(name, help=summary, description=description, epilog=epilog,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        return sub

    train = command("train", "train one model on one task", TRAIN_HELP, TRAIN_EXAMPLES)
    train.add_argument("--model", help="model name (e.g. ntm, lstm)")
    train.add_argument("--task", help="task name (e.g. copy, repeat_copy, associative_recall, ptb-char)")
    train.add_argument("--config", metavar="FILE.toml", help="start from this run config instead of the defaults")
    _add_set(train)
    train.add_argument("--seed", type=int, help="random seed of initialisation and data (default 0)")
    train.add_argument("--steps", type=int, help="total training steps (train.steps)")
    train.add_argument("--batch-size", type=int, help="sequences per step (train.batch_size)")
    train.add_argument("--lr", type=float, help="learning rate (train.lr)")
    train.add_argument("--run-dir", metavar="DIR", help="where to write the run (default runs/<model>-<task>-seed<seed>)")
    train.add_argument("--resume", action="store_true",
                       help="continue the run in the run directory from checkpoints/last (its config.toml is the base)")
    train.add_argument("--force", action="store_true", help="overwrite an existing run in the run directory")
    train.add_argument("--no-progress", action="store_true", help="no progress bar (train.progress=false)")
    train.set_defaults(func=cmd_train)

    run = command("run", "run a recipe over several seeds", RUN_HELP,
                  "examples:\n  mannlab run recipes/ntm-copy-lstm.toml\n"
                  "  mannlab run recipes/ntm-copy-lstm.toml --seeds 0,1,2 --set train.steps=500\n")
    run.add_argument("recipe", metavar="RECIPE.toml", help="the run config to train")
    _add_set(run)
    run.add_argument("--seeds", type=_int_list, metavar="S1,S2,...", help="seeds to train (overrides the recipe)")
    run.add_argument("--run-dir", metavar="DIR", help="parent directory of the seed runs (default: the recipe's run_dir)")
    run.add_argument("--resume", action="store_true", help="continue seeds that have a checkpoint, start the others")
    run.add_argument("--force", action="store_true", help="overwrite existing seed runs")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.set_defaults(func=cmd_run)

    evaluate = command("eval", "evaluate a run at several sequence lengths", EVAL_HELP,
                       "examples:\n  mannlab eval runs/ntm-copy-seed0 --lengths 20,40,80 --batches 8\n"
                       "  mannlab eval runs/dntm-copy-soft/seed0 --set model.addressing=argmax\n")
    evaluate.add_argument("run_dir", metavar="RUN", help="a run directory (written by train or run)")
    evaluate.add_argument("--lengths", type=_int_list, metavar="L1,L2,...",
                          help="lengths to test (default: the training length times train.val_length_multiples)")
    evaluate.add_argument("--batches", type=int, default=4, help="batches per length (default 4)")
    evaluate.add_argument("--batch-size", type=int, default=32, help="sequences per batch (default 32)")
    evaluate.add_argument("--seed", type=int, help="seed of the evaluation data (default: the run's seed)")
    evaluate.add_argument("--checkpoint", choices=("best", "last"), default="best",
                          help="which checkpoint to load (default best; falls back to last)")
    _add_override(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    plot = command("plot", "draw memory-access and learning-curve figures of a run", PLOT_HELP,
                   "example:\n  mannlab plot runs/ntm-copy-seed0 --length 40 --out figs/\n")
    plot.add_argument("run_dir", metavar="RUN", help="a run directory")
    plot.add_argument("--length", type=int, help="sequence length of the memory-access figure (default: training length)")
    plot.add_argument("--out", metavar="DIR", help="directory for the figures (default RUN/figures)")
    plot.add_argument("--checkpoint", choices=("best", "last"), default="best",
                      help="which checkpoint to draw (default best; falls back to last)")
    _add_override(plot)
    plot.set_defaults(func=cmd_plot)

    compare = command("compare", "validation curves of several runs in one figure", COMPARE_HELP,
                      "examples:\n  mannlab compare ARMIN=runs/ptb/armin/seed0 LSTM=runs/ptb/lstm/seed0 "
                      "--x cpu --out ptb.png\n"
                      "  mannlab compare runs/ntm-copy/seed0 runs/ntm-copy/seed1 --threshold 0.02\n")
    compare.add_argument("runs", metavar="[LABEL=]RUN", nargs="+", help="run directories")
    compare.add_argument("--x", choices=("step", "wall", "cpu"), default="step",
                         help="x axis: training step (default), wall or CPU minutes of training")
    compare.add_argument("--metric", help="validation metric (default: bce, bpc or ce, what the runs log)")
    compare.add_argument("--threshold", type=float, help="draw a dashed line at this value (e.g. 0.02)")
    compare.add_argument("--title", help="figure title")
    compare.add_argument("--out", metavar="FILE.png", default="compare.png", help="where to write the figure "
                         "(default compare.png)")
    compare.set_defaults(func=cmd_compare)

    report = command("report", "tables over many runs: bit error rates (Table 2 layout), bAbI errors per task",
                     REPORT_HELP,
                     "examples:\n  mannlab report runs/table2\n"
                     "  mannlab report runs/table2-batched --paper --out docs/table2-batched.md\n"
                     "  mannlab report runs/babi-dntm-soft-1step   # bAbI: test error per task\n")
    report.add_argument("runs_dir", metavar="RUNS_DIR", help="directory searched for run directories")
    report.add_argument("--out", metavar="FILE.md", help="where to write the markdown (default RUNS_DIR/report.md)")
    report.add_argument("--paper", action="store_true",
                        help="add a row with the paper's Table 2 numbers (10 models per cell) below each task")
    report.set_defaults(func=cmd_report)
    _add_analysis_commands(command)
    return parser


def _add_override(parser: argparse.ArgumentParser,
                  help_text: str = "change the run's config before loading its weights, e.g. "
                              "model.addressing=argmax (repeatable)") -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help_text)


def _add_set(parser: argparse.ArgumentParser) -> None:
    _add_override(parser, "override a config value, e.g. train.lr=3e-4 or model.controller=fnn (repeatable)")
    parser.add_argument("--data-dir", dest="overrides", action=_DataDir, metavar="DIR",
                        help="where data-set tasks (babi, mnist, strokes, ...) find their files: "
                             "same as --set task.data_dir=DIR (default $MANNLAB_DATA, else ~/.cache/mannlab)")


class _DataDir(argparse.Action):
    """--data-dir DIR appends the override task.data_dir="DIR"."""

    def __call__(self, parser, namespace, value, option_string=None):
        overrides = list(getattr(namespace, self.dest) or [])  # never mutate the shared default
        setattr(namespace, self.dest, overrides + [f"task.data_dir={json.dumps(value)}"])


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


# ------------------------------------------------------------------- train

def cmd_train(args: argparse.Namespace) -> int:
    config = train_config(args)
    config.build()  # a typo in a model or task argument fails now, before any file is written
    print(f"training {config.model} on {config.task} (seed {config.seed}) into {config.run_dir}"
          + (" (resuming)" if args.resume else ""))
    train, describe, _ = _trainer(config)
    summary = train(config, resume=args.resume, force=args.force)
    print(describe(summary))
    return 0


def _trainer(config: RunConfig):
    """(train, describe, seeds_table) for the run: the char-LM tasks (ptb-char, text8,
    enwik8-char) train with truncated BPTT (training/tbptt.py), the others with loop.py."""
    from mannlab.training import tbptt
    if tbptt.is_tbptt_run(config):
        return tbptt.train, tbptt.describe, tbptt.seeds_table
    from mannlab.training import train
    return train, describe_summary, seeds_table


def train_config(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of `mannlab train` from its arguments (see TRAIN_HELP for the layers)."""
    if args.config:
        base = read_toml(args.config)
    else:
        run_dir = args.run_dir
        if run_dir is None and args.model and args.task:
            run_dir = str(Path("runs") / f"{args.model}-{args.task}-seed{args.seed or 0}")
        saved = Path(run_dir) / "config.toml" if run_dir else None
        if args.resume and saved is not None and saved.is_file():
            base = read_toml(saved)
        elif args.model and args.task:
            base = default_config_dict(args.model, args.task)
        else:
            raise ConfigError("give --model and --task (or --config FILE, or --run-dir DIR --resume)"
                              + _valid_names_hint())
    for section in ("model", "task"):
        name = getattr(args, section)
        if name and base.get(section, {}).get("name") != name:
            base[section] = {"name": name}  # the other model's (task's) arguments would not fit
    config = RunConfig.from_dict(base).with_overrides(args.overrides)
    changes: dict[str, Any] = {}
    if args.seed is not None:
        changes["seed"] = args.seed
    if args.run_dir is not None:
        changes["run_dir"] = args.run_dir
    train_changes = {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr}
    train_changes = {k: v for k, v in train_changes.items() if v is not None}
    if args.no_progress:
        train_changes["progress"] = False
    if train_changes:
        changes["train"] = type(config.train).from_dict({**config.train.to_dict(), **train_changes})
    config = config.replace(**changes)
    if config.run_dir is None:
        config = config.replace(run_dir=default_run_dir(config))
    return config


def _valid_names_hint() -> str:
    try:
        from mannlab.models import MODELS
        from mannlab.tasks import names
        return f"; models: {', '.join(sorted(MODELS))}; tasks: {', '.join(sorted(names()))}"
    except ImportError:
        return ""


def describe_summary(summary: dict[str, Any]) -> str:
    """What `mannlab train` prints at the end: solve status, the per-length table, file paths."""
    from mannlab.tasks.dataset import format_group_errors
    from mannlab.training import format_table

    lines = []
    if summary["solved"]:
        lines.append(f"solved (val bce < {summary['solve_bce']:g}) at step {summary['solved_at_step']} "
                     f"after {_duration(summary['solved_at_seconds'])}")
    else:
        best = summary["best_val"]
        key = best.get("metric", "bce")  # "ce" for data-set tasks (summaries before it: "bce")
        best_text = f"{best[key]:.4g} at step {best['step']}" if best.get(key) is not None else "none"
        lines.append(f"not solved (val {key} < {summary['solve_bce']:g}); best val {key} {best_text}")
    cpu = summary.get("cpu_seconds")  # absent in summaries written before it was recorded
    cpu_text = f" ({_duration(cpu)} of CPU)" if cpu is not None else ""
    stop = " (the time budget ran out)" if summary.get("stopped_by") == "time" else ""
    lines.append(f"{summary['steps']} steps{stop} in {_duration(summary['wall_seconds'])}{cpu_text}; "
                 f"validation at step {summary['steps']}:")
    lines.append(format_table(summary["final_val"] or []))
    groups = format_group_errors((summary["best_val"].get("rows") or [{}])[0])
    if groups:  # data-set tasks with groups: the error per bAbI task (MNIST digit, SNLI label)
        lines.append(f"validation error per group, best checkpoint (step {summary['best_val']['step']}): "
                     f"{groups}")
    run_dir = Path(summary["run_dir"])
    lines.append(f"checkpoints: {run_dir / 'checkpoints'} (best, last)")
    for name, path in summary.get("figures", {}).items():
        lines.append(f"{name.replace('_', ' ')}: {path}")
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


# --------------------------------------------------------------------- run

def cmd_run(args: argparse.Namespace) -> int:
    recipe = Path(args.recipe)
    config = load_config(recipe, args.overrides)
    config.build()  # fail on a typo before the first seed starts
    train, _, table_of_seeds = _trainer(config)
    seeds = args.seeds or list(config.seeds or [config.seed])
    parent = Path(args.run_dir or config.run_dir or Path("runs") / recipe.stem)
    if args.no_progress:
        config = config.replace(train=type(config.train).from_dict(
            {**config.train.to_dict(), "progress": False}))
    summaries = []
    for seed in seeds:
        seed_dir = parent / f"seed{seed}"
        resume = args.resume and (seed_dir / "checkpoints" / "last").is_dir()
        # with --resume, a seed that never reached a checkpoint simply starts over
        force = args.force or (args.resume and not resume)
        print(f"[{recipe.name}] seed {seed}: {'resuming' if resume else 'training'} into {seed_dir}")
        seed_config = config.replace(seed=seed, seeds=None, run_dir=str(seed_dir))
        summaries.append(train(seed_config, resume=resume, force=force))
    table = table_of_seeds(summaries)
    header = (f"# {recipe.name}: {config.model} on {config.task}\n\n"
              f"Recipe `{recipe}`, seeds {', '.join(map(str, seeds))}; runs in `{parent}`.\n\n")
    (parent / "summary.md").write_text(header + table + "\n")
    print(table)
    print(f"summary: {parent / 'summary.md'}")
    return 0


def seeds_table(summaries: list[dict[str, Any]]) -> str:
    """Markdown table over seeds, then how many solved and the median cost of solving.

    Metrics are those of the best checkpoint (selected by validation bce at the training
    length, as the papers do); "stayed solved" counts the validations after the first
    solve that were still below the threshold, and "final bce" is the last validation.
    """
    def best_rows(s):
        return s["best_val"].get("rows") or s["final_val"] or []

    lengths = [(row["length"], row.get("multiple")) for row in best_rows(summaries[0])]
    key = summaries[0]["best_val"].get("metric", "bce")  # the loss: "ce" for data-set tasks
    # categorical (data-set) tasks report the fraction of scored steps wrong instead of bit errors
    second = "error" if any("error" in row for row in best_rows(summaries[0])) else "seq_bit_errors"
    header = ["seed", "solved", "steps to solve", "time to solve", "stayed solved"]
    for length, multiple in lengths:
        suffix = f"{length}" + (" (train)" if multiple == 1 else "")
        header += [f"{key} @{suffix}", f"{'error' if second == 'error' else 'bit errors/seq'} @{suffix}"]
    header += [f"final {key} @train", "steps"]
    grouped = "mean_group_error" in (best_rows(summaries[0]) or [{}])[0]  # bAbI: error per task
    if grouped:
        header += ["mean group error %", "failed groups"]
    rows = []
    for s in summaries:
        by_length = {row["length"]: row for row in best_rows(s)}
        after = s.get("after_solve")
        cells = [str(s["seed"]), "yes" if s["solved"] else "no",
                 "-" if s["solved_at_step"] is None else str(s["solved_at_step"]),
                 _duration(s["solved_at_seconds"]),
                 "-" if not after else f"{after['solved']}/{after['validations']}"]
        for length, _ in lengths:
            row = by_length.get(length, {})
            cells += [_number(row.get(key)), _number(row.get(second))]
        final = (s["final_val"] or [{}])[0]
        cells += [_number(final.get(key)), str(s["steps"])]
        if grouped:
            best = (best_rows(s) or [{}])[0]
            mean, failed = best.get("mean_group_error"), best.get("failed_groups")
            cells += ["-" if mean is None else f"{100 * mean:.1f}",
                      "-" if failed is None else str(int(failed))]
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    solved = [s for s in summaries if s["solved"]]
    note = f"\nSolved: {len(solved)}/{len(summaries)} seeds"
    if solved:
        note += (f"; median {statistics.median(s['solved_at_step'] for s in solved):g} steps, "
                 f"{_duration(statistics.median(s['solved_at_seconds'] for s in solved))} to solve")
    return "\n".join(lines) + "\n" + note + "."


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


# -------------------------------------------------------------- eval, plot

def cmd_eval(args: argparse.Namespace) -> int:
    from mannlab.training import evaluate, format_table, load_run
    from mannlab.training.evaluate import use_run_threads

    if _is_charlm_run(args.run_dir):
        return _eval_charlm(args)
    config, task, model, meta = load_run(args.run_dir, args.checkpoint, args.overrides)
    use_run_threads(config)
    lengths = args.lengths or [task.train_length * m for m in config.train.val_length_multiples]
    rows = evaluate((model, task), lengths, batches=args.batches, batch_size=args.batch_size,
                    seed=config.seed if args.seed is None else args.seed)
    print(f"{config.model} on {config.task}, {meta.get('kind', args.checkpoint)} checkpoint "
          f"(step {meta.get('step')}), {args.batches} x {args.batch_size} sequences per length "
          f"({task.length_name}):")
    print(format_table(rows, train_length=task.train_length))
    return 0


def _is_charlm_run(run_dir: str | Path) -> bool:
    from mannlab.tasks.charlm import is_charlm_task
    path = Path(run_dir) / "config.toml"
    return path.is_file() and is_charlm_task(read_toml(path).get("task", {}).get("name"))


def _eval_charlm(args: argparse.Namespace) -> int:
    """`mannlab eval` of a char-LM run: valid and test BPC with the run's protocol."""
    from mannlab.training.evaluate import use_run_threads
    from mannlab.training.tbptt import evaluate_run

    use_run_threads(load_config(Path(args.run_dir) / "config.toml"))
    result = evaluate_run(args.run_dir, args.checkpoint)
    print(f"{args.run_dir}, {result['checkpoint']} checkpoint (step {result['step']}), state carried:")
    for split in ("valid", "test"):
        row = result[split]
        print(f"  {split}: {row['bpc']:.4f} BPC ({row['symbols']:,} symbols, "
              f"{row['batch_size']} stream(s))")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from mannlab import plot
    from mannlab.training import load_run
    from mannlab.training.evaluate import use_run_threads
    from mannlab.training.loop import draw_memory_access

    run_dir = Path(args.run_dir)
    if _is_charlm_run(run_dir):  # a char-LM run has a learning curve (BPC), no memory picture
        out = Path(args.out) if args.out else run_dir / "figures"
        config = load_config(run_dir / "config.toml")
        plot.learning_curve(run_dir / "metrics.jsonl", out / "learning_curve.png", metric="bpc",
                            title=f"{config.model} on {config.task} (bits per character)")
        print(f"learning curve: {out / 'learning_curve.png'}")
        return 0
    config, task, model, meta = load_run(run_dir, args.checkpoint, args.overrides)
    use_run_threads(config)
    out = Path(args.out) if args.out else run_dir / "figures"
    length = args.length or task.train_length
    title = f"{config.model} on {config.task}, step {meta.get('step')}, {task.length_name} {length}"
    path = out / ("memory_access.png" if args.length is None else f"memory_access_len{length}.png")
    if draw_memory_access(model, task, path, config.seed, length=length, title=title):
        print(f"memory access: {path}")
    else:
        print(f"memory access: skipped ({config.model} has no read/write weights to show)")
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}")
    path = out / "learning_curve.png"
    plot.learning_curve(metrics, path, title=f"{config.model} on {config.task}",
                        threshold=config.train.solve_bce)
    print(f"learning curve: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from mannlab import plot

    runs = {}
    for spec in args.runs:
        label, _, run = spec.rpartition("=")
        runs[label or run] = run
    plot.compare_curves(runs, args.out, metric=args.metric, x=args.x, title=args.title,
                        threshold=args.threshold)
    print(f"comparison: {args.out}")
    return 0


# ------------------------------------------------------------------ report

def cmd_report(args: argparse.Namespace) -> int:
    from mannlab.report import write_report

    text, path = write_report(args.runs_dir, out=args.out, paper=args.paper)
    print(text, end="")
    print(f"report: {path}")
    return 0


# ---------------------------------------------------- simulate, gradflow

SIMULATE_HELP = """\
Simulations of the analyses of the papers. Available: wormhole (TARDIS paper, section 6).
"""

WORMHOLE_HELP = """\
Simulate the read/write heads of untrained MANNs that pick memory cells uniformly at random
(TARDIS paper, section 6), vectorised over simulations, for three schemes:
  tardis  sequential writes for the first k steps, then write into the cell just read
  umann   independent uniform read and write heads
  urmann  sequential writes (wrapping round when k < T), uniform reads
Writes into --out:
  wormhole-lengths.png/.csv  figure 3: eq. 40 wormhole path length stored in each cell
                             over time (T = --steps, k = --cells) for TARDIS and uMANN,
                             beside the analytic t/k - 1
  wormhole-paths.png/.csv    figure 5: expected shortest path from h_t1 back to h_t0 over
                             recurrent edges and wormholes, and its length outside
                             wormholes, for each memory size of --memory-sizes
A read of a cell not yet written (--unwritten; the paper is silent): "empty" reads the
initial memory, which holds no micro-state (no wormhole); "written" picks uniformly among
the written cells only. Figure 5 draws one line per policy.
"""

GRADFLOW_HELP = """\
Gradient flow through time (TARDIS paper, section 5): for each model, the norm of the
Jacobian of the output at the last step t1 with respect to the input at t0
(--quantity output, Frobenius norm of dy_t1/dx_t0) or of the loss at t1
(--quantity loss, ||dL_t1/dx_t0||), against the distance t1 - t0 = 0..--max-distance,
averaged over --samples sequences of --task. Each MODEL is a model name (freshly
initialised with --seed; options after a colon, e.g. dntm:addressing=argmax or
ntm:memory_slots=32,controller=fnn) or a run directory (its best checkpoint).
Models run in eval mode (discrete reads as argmax) on a float64 copy. Writes a PNG (--out)
and a CSV with the same stem (model, distance, mean, sem, median).
"""


def _add_analysis_commands(command) -> None:
    """The `simulate` and `gradflow` subcommands (analysis logic in mannlab.analysis)."""
    from mannlab.analysis.reports import DEFAULT_MEMORY_SIZES

    simulate = command("simulate", "simulations of the papers' analyses (wormhole paths)",
                       SIMULATE_HELP)
    kinds = simulate.add_subparsers(title="simulations", metavar="KIND")
    wormhole = kinds.add_parser("wormhole", help="wormhole path lengths (TARDIS figures 3, 5)",
                                description=WORMHOLE_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="example:\n  mannlab simulate wormhole --out runs/wormhole\n"
                                       "  mannlab simulate wormhole --t0 10 --t1 100 "
                                       "--memory-sizes 5,10,20,50,100\n")
    wormhole.add_argument("--steps", type=int, default=200, help="figure 3: sequence length T (default 200)")
    wormhole.add_argument("--cells", type=int, default=50, help="figure 3: memory size k (default 50)")
    wormhole.add_argument("--simulations", type=int, default=100, help="figure 3: simulations (default 100)")
    wormhole.add_argument("--t0", type=int, default=5, help="figure 5: step depended on (default 5)")
    wormhole.add_argument("--t1", type=int, default=50, help="figure 5: dependent step (default 50)")
    wormhole.add_argument("--path-simulations", type=int, default=200,
                          help="figure 5: simulations per point (default 200)")
    wormhole.add_argument("--memory-sizes", type=_int_list, metavar="K1,K2,...",
                          default=list(DEFAULT_MEMORY_SIZES),
                          help=f"figure 5: memory sizes (default {','.join(map(str, DEFAULT_MEMORY_SIZES))})")
    wormhole.add_argument("--schemes", type=_name_list, default=["tardis", "umann", "urmann"],
                          metavar="S1,...", help="figure 5: schemes (default tardis,umann,urmann)")
    wormhole.add_argument("--unwritten", type=_name_list, default=["empty", "written"], metavar="P1,...",
                          help="figure 5: policies for unwritten cells (default empty,written)")
    wormhole.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    wormhole.add_argument("--out", metavar="DIR", default="runs/wormhole",
                          help="output directory (default runs/wormhole)")
    wormhole.set_defaults(func=cmd_simulate_wormhole)

    gradflow = command("gradflow", "Jacobian norm against distance for several models", GRADFLOW_HELP,
                       "examples:\n  mannlab gradflow lstm ntm dnc --task copy --out gradflow.png\n"
                       "  mannlab gradflow runs/ntm-copy-seed0 lstm --max-distance 100 --samples 16\n")
    gradflow.add_argument("models", nargs="+", metavar="MODEL",
                          help="model names (e.g. lstm, ntm, dnc) or run directories")
    gradflow.add_argument("--task", help="task name (default: the task of the first run directory, else copy)")
    gradflow.add_argument("--length", type=int,
                          help="the task's length parameter (default: the smallest giving > max distance steps)")
    gradflow.add_argument("--max-distance", type=int, default=200, help="largest t1 - t0 (default 200)")
    gradflow.add_argument("--samples", type=int, default=32, help="sequences averaged over (default 32)")
    gradflow.add_argument("--batch-size", type=int, default=16, help="sequences per batch (default 16)")
    gradflow.add_argument("--quantity", choices=("output", "loss"), default="output",
                          help="dy_t1/dx_t0 (default) or dL_t1/dx_t0")
    gradflow.add_argument("--seed", type=int, default=0, help="seed of initialisation and data (default 0)")
    gradflow.add_argument("--checkpoint", choices=("best", "last"), default="best",
                          help="checkpoint of run directories (default best)")
    gradflow.add_argument("--chunk", type=int, default=16,
                          help="sequences per forward/backward pass; each sample counts once per output "
                               "unit (default 16; the DNC needs about 75 MB per sequence of 200 steps)")
    gradflow.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    gradflow.add_argument("--out", metavar="FILE.png", help="figure path (default runs/gradflow/gradflow-<task>.png)")
    gradflow.set_defaults(func=cmd_gradflow)


def _name_list(text: str) -> list[str]:
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated names")
    return names


def cmd_simulate_wormhole(args: argparse.Namespace) -> int:
    from mannlab.analysis.reports import wormhole_report

    try:
        result = wormhole_report(args.out, args.steps, args.cells, args.simulations, args.t0, args.t1,
                                 args.path_simulations, args.memory_sizes, args.schemes,
                                 args.unwritten, args.seed)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    for scheme, (mean, sem, analytic) in result["final_lengths"].items():
        print(f"{scheme}: mean path length in a cell at T={args.steps}: {mean:.3f} "
              f"(sem {sem:.3f}); T/k - 1 = {analytic:g}")
    print(f"shortest path {args.t1} -> {args.t0} (mean over {args.path_simulations} simulations):")
    for row in result["path_rows"]:
        print(f"  {row['scheme']:7s} unwritten={row['unwritten']:8s} k={row['cells']:<4d} "
              f"total {row['total_mean']:6.2f}  outside wormholes {row['outside_mean']:6.2f}")
    print("\n".join(f"wrote {path}" for path in result["files"]))
    return 0


def cmd_gradflow(args: argparse.Namespace) -> int:
    import torch

    from mannlab.analysis.reports import gradflow_report

    torch.set_num_threads(max(args.threads, 1))
    if args.task:
        task = mannlab.tasks.make(args.task)
    else:
        runs = [Path(m) for m in args.models if Path(m).is_dir()]
        task = load_config(runs[0] / "config.toml").build()[0] if runs else mannlab.tasks.make("copy")
    out = Path(args.out) if args.out else Path("runs") / "gradflow" / f"gradflow-{task.name}.png"
    try:
        result = gradflow_report(args.models, task, out, args.max_distance, args.samples,
                                 args.batch_size, args.seed, args.length, args.quantity, args.checkpoint,
                                 args.chunk)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    print(f"{task.name}, {task.length_name} {result['length']}, {args.samples} samples, "
          f"norm of {args.quantity} gradient at distance:")
    for label, flow in result["results"].items():
        picks = [d for d in (0, 1, 10, 50, 100, 200) if d <= args.max_distance]
        values = "  ".join(f"d={d}: {flow.mean[d]:.3g}" for d in picks)
        print(f"  {label}: {values}  ({_duration(result['seconds'][label])})")
    print("\n".join(f"wrote {path}" for path in result["files"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
