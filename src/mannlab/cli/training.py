"""`mannlab train` and `mannlab run`: a run config from the command line, trained."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from mannlab import recipes
from mannlab.cli import arguments
from mannlab.cli.arguments import (
    add_compute,
    add_device,
    add_logger,
    add_set,
    int_list,
    path,
    positive_int,
    shortcut_changes,
)
from mannlab.config import (
    RunConfig,
    config_toml,
    default_config_dict,
    default_run_dir,
    load_config,
    read_toml,
)
from mannlab.errors import ConfigError
from mannlab.file_kinds import directory_problem
from mannlab.reporting.summaries import describe, seeds_table
from mannlab.rundir import write_atomic

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
in mannlab/config.py: optimizer, lr, batch_size, steps, val_every, clip_grad_norm,
lr_decay_steps (the lr times lr_decay_factor, 0.1, after each of those steps), ...;
device and precision, also --device and --precision; threads, the torch threads, default 1:
these small recurrent models run fastest on one CPU thread, also --threads; max_minutes, a
time budget, also --max-minutes). --print-config shows the result without training.
"""

TRAIN_EXAMPLES = """\
examples:
  mannlab train --model ntm --task copy
  mannlab train --model lstm --task copy --steps 5000 --set model.hidden_size=256
  mannlab train --config my.toml --seed 3
  mannlab train --model ntm --task copy --print-config > my.toml   # every option, to edit
  mannlab train --run-dir runs/ntm-copy-seed0 --resume --steps 4000   # continue a run
  mannlab train --model dntm --task copy --max-minutes 20 --set train.budget_clock=cpu
      (stop at 20 CPU minutes or train.steps, whichever comes first)
  mannlab train --model armin --task ptb-char --data-dir DIR --max-minutes 30
      (char-level LM with truncated BPTT; tasks ptb-char, text8, enwik8-char; the task
      section takes data_dir, bptt, valid_batch_size, test_batch_size, valid_symbols,
      test_symbols; the model section also embedding_size, input_dropout, output_dropout)
  mannlab train --model armin --task proposals-synthetic --set model.projection_size=64
      (temporal action proposals, SST over any model; also thumos14-proposals with
      --data-dir DIR; the model section also projection_size, input_dropout,
      output_dropout; train.epochs and train.lr_decay_epochs count epochs of windows;
      then `mannlab eval RUN` for recall at 1,000 proposals and the proposals JSON)
"""

RUN_HELP = """\
Run a recipe (a TOML run config) once per seed, into <run_dir>/seed<k>, then print a table
over seeds (solved or not, steps and wall time to solve, validation bce and bit errors per
sequence at each length) and write it to <run_dir>/summary.md. The seeds come from --seeds,
else the recipe's `seeds = [...]`, else its `seed`. run_dir defaults to runs/<recipe name>.
"""


def add_commands(command) -> None:
    from mannlab.models import MODELS
    from mannlab.tasks import names as task_names

    train = command("train", "train one model on one task", TRAIN_HELP, TRAIN_EXAMPLES)
    train.add_argument("--model", help=f"model name: {', '.join(sorted(MODELS))}")
    train.add_argument(
        "--task",
        help=f"task name ('-' and '_' are the same: repeat-copy is repeat_copy): {', '.join(task_names())}",
    )
    train.add_argument(
        "--config", type=path, metavar="FILE.toml", help="start from this run config instead of the defaults"
    )
    add_set(train)
    train.add_argument(
        "--seed", type=arguments.seed, help="random seed of initialisation and data (default 0)"
    )
    train.add_argument("--steps", type=int, help="total training steps (train.steps)")
    train.add_argument("--batch-size", type=positive_int, help="sequences per step (train.batch_size)")
    train.add_argument("--lr", type=float, help="learning rate (train.lr)")
    train.add_argument(
        "--run-dir",
        type=path,
        metavar="DIR",
        help="where to write the run (default runs/<model>-<task>-seed<seed>)",
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in the run directory from checkpoints/last (its config.toml is the base)",
    )
    train.add_argument("--force", action="store_true", help="overwrite an existing run in the run directory")
    train.add_argument("--no-progress", action="store_true", help="no progress bar (train.progress=false)")
    add_logger(train)
    add_device(train)
    add_compute(train)
    train.set_defaults(func=cmd_train)

    run = command(
        "run",
        "run a recipe over several seeds",
        RUN_HELP,
        "examples:\n  mannlab run ntm-copy-lstm\n"
        "  mannlab run recipes/ntm-copy-lstm.toml --seeds 0,1,2 --set train.steps=500\n",
    )
    run.add_argument(
        "recipe",
        metavar="RECIPE",
        help="a run config file (.toml), or the name of a packaged recipe (`mannlab recipes` lists them)",
    )
    add_set(run)
    run.add_argument(
        "--seeds", type=int_list, metavar="S1,S2,...", help="seeds to train (overrides the recipe)"
    )
    run.add_argument(
        "--run-dir",
        type=path,
        metavar="DIR",
        help="parent directory of the seed runs (default: the recipe's run_dir)",
    )
    run.add_argument(
        "--resume", action="store_true", help="continue seeds that have a checkpoint, start the others"
    )
    run.add_argument("--force", action="store_true", help="overwrite existing seed runs")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_logger(run)
    add_device(run)
    add_compute(run)
    run.set_defaults(func=cmd_run)


def _say(*lines: str) -> None:
    """Print on rank 0 only: under torchrun every process runs this command."""
    from mannlab.training import distributed

    if distributed.is_main():
        print(*lines, sep="\n")


def cmd_train(args: argparse.Namespace) -> int:
    from mannlab.training import distributed, prepare_run, train
    from mannlab.training.loop import finished_run
    from mannlab.training.run_dir import prepare_run_dir

    config = train_config(args)
    if args.print_config:
        print(config_toml(config), end="")
        return 0
    # built once, for the run: a typo in a model or task argument, or a device or precision this
    # machine lacks, fails now, before any file is written; under torchrun the process group opens
    prepared = prepare_run(config)
    if args.resume and (done := distributed.main_only(lambda: finished_run(config))) is not None:
        _say(finished_line(config.run_dir or default_run_dir(config), done))
        return 0
    if not (args.resume or args.force):  # refuse a directory holding a run before announcing it
        distributed.main_only(lambda: prepare_run_dir(Path(config.run_dir or default_run_dir(config)), False))
    _say(
        f"training {config.model} on {config.task} (seed {config.seed}) into {config.run_dir}"
        + (" (resuming)" if args.resume else "")
        + (f" on {distributed.world_size()} processes" if distributed.active() else "")
    )
    summary = train(config, resume=args.resume, force=args.force, prepared=prepared)
    _say(describe(summary))
    return 0


def finished_line(run_dir: str | Path, summary: dict[str, Any]) -> str:
    return (
        f"{run_dir} is finished ({summary['steps']} steps, stopped by "
        f"{summary.get('stopped_by', 'steps')}); nothing to do (raise --steps to continue)"
    )


def train_config(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of `mannlab train` from its arguments (see TRAIN_HELP for the layers)."""
    if args.task:
        args.task = canonical_task(args.task)
    if args.config:
        base = read_toml(args.config)
    else:
        run_dir = args.run_dir
        if run_dir is None and args.model and args.task:
            run_dir = str(Path("runs") / f"{args.model}-{args.task}-seed{args.seed or 0}")
        saved = Path(run_dir) / "config.toml" if run_dir else None
        if args.resume and run_dir and os.path.lexists(run_dir) and (problem := directory_problem(run_dir)):
            raise ConfigError(f"cannot resume {run_dir}: {problem}; expected a run directory")
        if args.resume and run_dir and not os.path.lexists(run_dir) and not (args.model and args.task):
            raise ConfigError(
                f"cannot resume {run_dir}: the directory does not exist (a run stopped before it "
                "wrote anything leaves none); start the run without --resume: mannlab train "
                f"--model MODEL --task TASK (or --config FILE) --run-dir {run_dir}"
            )
        if args.resume and saved is not None and os.path.lexists(saved):  # read_toml names a non-file
            base = read_toml(saved)
        elif args.resume and saved is not None and saved.parent.is_dir() and not (args.model and args.task):
            from mannlab.training.run_dir import RunDirLock, in_use

            if (holder := RunDirLock.held(saved.parent)) is not None:  # it has not written config.toml yet
                raise in_use(saved.parent, holder)
            raise ConfigError(
                f"cannot resume {run_dir}: its config.toml is missing, so the run's model and task "
                "are unknown; give the same --model and --task (or --config FILE) with --resume"
            )
        elif args.model and args.task:
            base = default_config_dict(args.model, args.task)
        else:
            raise ConfigError(
                "give --model and --task (or --config FILE, or --run-dir DIR --resume)" + _valid_names_hint()
            )
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
    train_changes.update(shortcut_changes(args))
    if train_changes:
        changes["train"] = type(config.train).from_dict({**config.train.to_dict(), **train_changes})
    config = config.replace(task=canonical_task(config.task), **changes)
    if config.run_dir is None:
        config = config.replace(run_dir=default_run_dir(config))
    return config


def canonical_task(name: str) -> str:
    """The registered spelling of task ``name`` ("repeat-copy" -> "repeat_copy"); an unknown
    name unchanged, for the config's own error that lists the valid ones."""
    from mannlab.tasks.registry import BY_KEY, key

    found = BY_KEY.get(key(name) or "")
    return found.name if found is not None else name


def _valid_names_hint() -> str:
    try:
        from mannlab.models import MODELS
        from mannlab.tasks import names

        return f"; models: {', '.join(sorted(MODELS))}; tasks: {', '.join(sorted(names()))}"
    except ImportError:
        return ""


def cmd_run(args: argparse.Namespace) -> int:
    from mannlab.training import distributed
    from mannlab.training.seeds import train_seeds

    recipe = recipes.resolve(args.recipe)
    config = load_config(recipe, args.overrides)
    config = config.replace(task=canonical_task(config.task))
    seeds = args.seeds or list(config.seeds or [config.seed])
    parent = Path(args.run_dir or config.run_dir or Path("runs") / recipe.stem)
    run_changes = {**({"progress": False} if args.no_progress else {}), **shortcut_changes(args)}
    if run_changes:
        config = config.replace(train=type(config.train).from_dict({**config.train.to_dict(), **run_changes}))
    if args.print_config:
        print(config_toml(config.replace(seeds=tuple(seeds), run_dir=str(parent))), end="")
        return 0

    def report(seed: int, what: str, seed_dir: Path, done: dict[str, Any] | None) -> None:
        if what == "training" and not args.force:  # refuse a seed's earlier run before announcing it
            from mannlab.training.run_dir import prepare_run_dir

            distributed.main_only(lambda: prepare_run_dir(seed_dir, False))
        line = finished_line(seed_dir, done) if done is not None else f"{what} into {seed_dir}"
        _say(f"[{recipe.name}] seed {seed}: {line}")

    summaries = train_seeds(config, seeds, parent, resume=args.resume, force=args.force, report=report)
    table = seeds_table(summaries)
    header = (
        f"# {recipe.name}: {config.model} on {config.task}\n\n"
        f"Recipe `{args.recipe}`, seeds {', '.join(map(str, seeds))}; runs in `{parent}`.\n\n"
    )
    if distributed.is_main():
        write_atomic(parent / "summary.md", header + table + "\n")
    _say(table, f"summary: {parent / 'summary.md'}")
    return 0
