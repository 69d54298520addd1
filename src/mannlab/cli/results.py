"""`mannlab eval`, `plot`, `compare` and `report`: look at finished runs."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from mannlab.cli.arguments import (
    DataDir,
    add_download,
    add_override,
    path,
    positive_int,
    positive_int_list,
    seed,
)

EVAL_HELP = """\
Evaluate a run's best checkpoint (or --checkpoint last) the way its task is scored:
- generated tasks (copy, recall, ...): at the given sequence lengths (the task's size
  parameter: sequence length for copy, items for recall, ...) on fresh sampled batches;
  prints bce, bit error rate and bit errors per sequence per length;
- data-set tasks (bAbI, MNIST, SNLI, strokes): a whole --split, with the error per group
  (bAbI: per task, the mean and the failed tasks, error > 5%; strokes also with the
  predictions fed back), written to RUN/eval-<split>.json (what `mannlab report` reads);
- char-LM tasks (ptb-char, text8, enwik8-char): valid and test bits per character with the
  run's protocol (state carried);
- proposal tasks (proposals-synthetic, thumos14-proposals; SST, ARMIN section 4.3): every
  video of --split run whole (state carried), scored proposals after NMS, recall at 1,000
  proposals (tIoU 0.6, 0.8: ARMIN table 3) and average recall at 50..1,000 proposals;
  writes RUN/eval-<split>.json, RUN/proposals-<split>.json (each video's proposals
  [start, end] with scores and its ground truth, in seconds for THUMOS'14, in steps for the
  synthetic task) and ARMIN figure 2's two plots in RUN/figures (what `mannlab compare
  --proposals` reads).
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

--proposals: ARMIN figure 2 for runs of a proposal task instead, from each run's
eval-<split>.json (run `mannlab eval RUN` first): average recall against the average number
of proposals, and recall at 1,000 proposals against tIoU, one curve per label; runs under
one label (by default the run's model, so a model's seeds) are drawn as their mean with a
min-max band. Writes OUT-ar-vs-proposals.png and OUT-recall-vs-tiou.png (OUT: --out
without .png) and prints table 3's numbers per label.
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
(bAbI: per task, with the mean and the failed tasks, error > 5%), read from each run's
eval-test.json (written by `mannlab eval RUN --split test`), a column per configuration: runs alike but
for the seed, the directory and the bAbI tasks share one (a jointly trained model's seeds, or
the D-NTM paper's one model per bAbI task, e.g. DIR/qa<N>/seed0), named by their common
directory. Runs of proposal tasks get ARMIN table 3's recall at 1,000 proposals and the
average recall, a row per directory of seeds, from their eval-test.json. The markdown is
printed and written to RUNS_DIR/report.md (or --out); when RUNS_DIR is itself one run
directory it is only printed (a run directory holds what training wrote), unless --out.
"""


def add_commands(command) -> None:
    evaluate = command(
        "eval",
        "evaluate a run the way its task is scored",
        EVAL_HELP,
        "examples:\n  mannlab eval runs/ntm-copy-seed0 --lengths 20,40,80 --batches 8\n"
        "  mannlab eval runs/dntm-copy-soft/seed0 --set model.addressing=argmax\n"
        "  mannlab eval runs/babi-dnc-lstm/seed0 --split test --data-dir DIR\n"
        "  mannlab eval runs/ptb-char-lstm/seed0\n",
    )
    evaluate.add_argument(
        "run_dir", type=path, metavar="RUN", help="a run directory (written by train or run)"
    )
    evaluate.add_argument(
        "--lengths",
        type=positive_int_list,
        metavar="L1,L2,...",
        help="lengths to test (default: the training length times train.val_length_multiples)",
    )
    evaluate.add_argument("--batches", type=positive_int, default=4, help="batches per length (default 4)")
    evaluate.add_argument(
        "--batch-size",
        type=positive_int,
        help="sequences per batch (default 32; data-set splits 100; proposal tasks: videos, 16)",
    )
    evaluate.add_argument("--seed", type=seed, help="seed of the evaluation data (default: the run's seed)")
    evaluate.add_argument(
        "--checkpoint",
        choices=("best", "last"),
        default="best",
        help="which checkpoint to load (default best; falls back to last)",
    )
    evaluate.add_argument(
        "--split",
        default="test",
        choices=("train", "valid", "test"),
        help="data-set tasks: the split to evaluate (default test)",
    )
    evaluate.add_argument(
        "--limit",
        type=positive_int,
        help="data-set tasks: only the first N examples (proposal tasks: videos)",
    )
    evaluate.add_argument(
        "--reads",
        action="store_true",
        help="generated tasks, memory models: also where the reads land (read weight on the cell "
        "of the due item and of the items after it, whether that cell was kept)",
    )
    evaluate.add_argument(
        "--json", action="store_true", help="print the result as JSON instead of a table (any task)"
    )
    add_override(evaluate)
    evaluate.add_argument(
        "--data-dir",
        dest="overrides",
        action=DataDir,
        type=path,
        metavar="DIR",
        help="data-set and char-LM tasks: where the data files are (default: the run's task.data_dir)",
    )
    add_download(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    plot = command(
        "plot",
        "draw memory-access and learning-curve figures of a run",
        PLOT_HELP,
        "example:\n  mannlab plot runs/ntm-copy-seed0 --length 40 --out figs/\n",
    )
    plot.add_argument("run_dir", type=path, metavar="RUN", help="a run directory")
    plot.add_argument(
        "--length",
        type=positive_int,
        help="sequence length of the memory-access figure (default: training length)",
    )
    plot.add_argument(
        "--out", type=path, metavar="DIR", help="directory for the figures (default RUN/figures)"
    )
    plot.add_argument(
        "--checkpoint",
        choices=("best", "last"),
        default="best",
        help="which checkpoint to draw (default best; falls back to last)",
    )
    add_override(plot)
    plot.set_defaults(func=cmd_plot)

    compare = command(
        "compare",
        "validation curves of several runs in one figure",
        COMPARE_HELP,
        "examples:\n  mannlab compare ARMIN=runs/ptb/armin/seed0 LSTM=runs/ptb/lstm/seed0 "
        "--x cpu --out ptb.png\n"
        "  mannlab compare runs/ntm-copy/seed0 runs/ntm-copy/seed1 --threshold 0.02\n"
        "  mannlab compare --proposals runs/proposals-synthetic-*/seed* --out figs/synthetic\n",
    )
    compare.add_argument("runs", type=path, metavar="[LABEL=]RUN", nargs="+", help="run directories")
    compare.add_argument(
        "--x",
        choices=("step", "wall", "cpu"),
        default="step",
        help="x axis: training step (default), wall or CPU minutes of training",
    )
    compare.add_argument("--metric", help="validation metric (default: bce, bpc or ce, what the runs log)")
    compare.add_argument("--threshold", type=float, help="draw a dashed line at this value (e.g. 0.02)")
    compare.add_argument("--title", help="figure title")
    compare.add_argument(
        "--proposals",
        action="store_true",
        help="proposal-task runs: ARMIN figure 2 and table 3 from their eval-<split>.json",
    )
    compare.add_argument(
        "--split",
        default="test",
        choices=("train", "valid", "test"),
        help="with --proposals: the evaluated split to read (default test)",
    )
    compare.add_argument(
        "--out",
        type=path,
        metavar="FILE.png",
        default="compare.png",
        help="where to write the figure (default compare.png)",
    )
    compare.set_defaults(func=cmd_compare)

    report = command(
        "report",
        "tables over many runs: bit error rates (Table 2 layout), bAbI errors per task",
        REPORT_HELP,
        "examples:\n  mannlab report runs/table2\n"
        "  mannlab report runs/table2-batched --paper --out docs/table2-batched.md\n"
        "  mannlab report runs/babi-dntm-soft-1step   # bAbI: test error per task\n",
    )
    report.add_argument(
        "runs_dir", type=path, metavar="RUNS_DIR", help="directory searched for run directories"
    )
    report.add_argument(
        "--out",
        type=path,
        metavar="FILE.md",
        help="where to write the markdown (default RUNS_DIR/report.md; a single run: printed only)",
    )
    report.add_argument(
        "--paper",
        action="store_true",
        help="add a row with the paper's Table 2 numbers (10 models per cell) below each task",
    )
    report.set_defaults(func=cmd_report)


def cmd_eval(args: argparse.Namespace) -> int:
    from mannlab.evaluation import evaluate_run
    from mannlab.reporting.text_tables import format_evaluation

    result = evaluate_run(
        args.run_dir,
        args.checkpoint,
        args.overrides,
        lengths=args.lengths,
        batches=args.batches,
        batch_size=args.batch_size,
        seed=args.seed,
        split=args.split,
        limit=args.limit,
        reads=args.reads,
    )
    if result["kind"] == "proposals":  # figure 2 of the curves, in the run's figures/
        from mannlab.reporting.proposal_figures import draw_evaluation_figures

        found = result["result"]
        found["files"].update(draw_evaluation_figures(found, args.run_dir, label=result["model"]))
    print(json.dumps(result, indent=2) if args.json else format_evaluation(result))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from mannlab import tasks
    from mannlab.config import load_config
    from mannlab.errors import DataError
    from mannlab.evaluation import loss_key
    from mannlab.file_kinds import file_problem
    from mannlab.loading import load_run, use_run_threads
    from mannlab.reporting import figures, read_figures
    from mannlab.reporting.run_figures import draw_memory_access
    from mannlab.safe_writes import refuse_link

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir / "figures"
    if not args.out:
        refuse_link(out)  # mannlab's name in the run directory: never written through a link
    saved = run_dir / "config.toml"
    if saved.is_file() and tasks.batching(load_config(saved).task) == "streams":
        # a char-LM run has a learning curve (BPC), no memory picture
        config = load_config(saved)
        figures.learning_curve(
            run_dir / "metrics.jsonl",
            out / "learning_curve.png",
            metric="bpc",
            title=f"{config.model} on {config.task} (bits per character)",
        )
        print(f"learning curve: {out / 'learning_curve.png'}")
        return 0
    config, task, model, meta = load_run(run_dir, args.checkpoint, args.overrides)
    use_run_threads(config)
    length = args.length or task.train_length
    title = f"{config.model} on {config.task}, step {meta.get('step')}, {task.length_name} {length}"
    path = out / ("memory_access.png" if args.length is None else f"memory_access_len{length}.png")
    if draw_memory_access(model, task, path, config.seed, length=length, title=title):
        print(f"memory access: {path}")
    else:
        print(f"memory access: skipped ({config.model} has no read/write weights to show)")
    metrics = run_dir / "metrics.jsonl"
    if not os.path.lexists(metrics):
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}")
    if problem := file_problem(metrics):  # a directory would be read as a run directory
        raise DataError(problem)
    path = out / "learning_curve.png"
    figures.learning_curve(
        metrics,
        path,
        metric=loss_key(task),  # the task's loss ("wbce" for proposal tasks), as training draws it
        title=f"{config.model} on {config.task}",
        threshold=config.train.solve_bce or None,  # 0: no solve threshold (proposal tasks)
    )
    print(f"learning curve: {path}")
    if read_figures.has_read_curves(metrics):
        path = out / "read_targets.png"
        read_figures.read_curves(
            metrics, path, title=f"{config.model} on {config.task}: where the reads land"
        )
        print(f"reads: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    if args.proposals:
        return _compare_proposals(args)
    from mannlab.reporting import figures

    runs = {}
    for spec in args.runs:
        label, _, run = spec.rpartition("=")
        runs[label or run] = run
    figures.compare_curves(
        runs, args.out, metric=args.metric, x=args.x, title=args.title, threshold=args.threshold
    )
    print(f"comparison: {args.out}")
    return 0


def _compare_proposals(args: argparse.Namespace) -> int:
    from mannlab.reporting.proposal_runs import compare_proposals, group_runs

    groups = group_runs(args.runs, args.split)
    paths, table = compare_proposals(groups, args.out, args.split, title=args.title)
    print(table)
    for figure in paths.values():
        print(f"figure: {figure}")
    return 0


# ------------------------------------------------------------------ report


def cmd_report(args: argparse.Namespace) -> int:
    from mannlab.reporting.run_tables import build_report, write_report

    if args.out is None and (Path(args.runs_dir) / "config.toml").is_file():
        print(build_report(args.runs_dir, paper=args.paper), end="")
        print(f"report: printed only ({args.runs_dir} is a run directory; --out FILE.md writes it)")
        return 0
    text, path = write_report(args.runs_dir, out=args.out, paper=args.paper)
    print(text, end="")
    print(f"report: written to {path}")
    return 0
