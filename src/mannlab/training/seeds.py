"""One run config trained once per seed, into ``<parent>/seed<k>`` (what `mannlab run` does).

The seeds share one task (built once: a data set is read once) and one process group; each
seed's model is built from its own seed, as a run of that seed alone builds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from mannlab.config import RunConfig
from mannlab.errors import ConfigError
from mannlab.training import distributed
from mannlab.training.loop import finished_run, train
from mannlab.training.prepared import prepare_run

# (seed, what happens: "training", "resuming" or "finished", its run directory, the summary
# of a finished seed or None)
SeedReport = Callable[[int, str, Path, "dict[str, Any] | None"], None]


def seed_config(config: RunConfig, seed: int, parent: str | Path) -> RunConfig:
    """The run config of ``seed`` in ``parent``."""
    return config.replace(seed=seed, seeds=None, run_dir=str(Path(parent) / f"seed{seed}"))


def train_seeds(
    config: RunConfig,
    seeds: Sequence[int],
    parent: str | Path,
    resume: bool = False,
    force: bool = False,
    report: SeedReport | None = None,
) -> list[dict[str, Any]]:
    """Train ``config`` once per seed into ``parent/seed<k>`` and return the summaries in the
    order of ``seeds``. ``resume`` continues the seeds that have a checkpoint and starts the
    others; a finished seed is not trained again. ``report`` hears of each seed before it
    trains (on every rank under torchrun). A bad name or argument fails before the first seed."""
    if not seeds:
        raise ConfigError("train_seeds needs at least one seed")
    # the first seed's run: names and arguments checked, the process group open, the task built
    first = prepare_run(seed_config(config, seeds[0], parent))
    summaries = []
    for index, seed in enumerate(seeds):
        run = seed_config(config, seed, parent)
        assert run.run_dir is not None  # seed_config names it
        seed_dir = Path(run.run_dir)
        # rank 0's files decide (the other ranks may not see them)
        resumed = distributed.from_main(resume and (seed_dir / "checkpoints" / "last").is_dir())
        if resumed and (done := distributed.main_only(lambda: finished_run(run))) is not None:
            if report:
                report(seed, "finished", seed_dir, done)
            summaries.append(done)
            continue
        if report:
            report(seed, "resuming" if resumed else "training", seed_dir, None)
        prepared = first if index == 0 else prepare_run(run, task=first.task)
        # with resume, a seed that never reached a checkpoint simply starts over
        restart = force or (resume and not resumed)
        summaries.append(train(run, resume=resumed, force=restart, prepared=prepared))
    return summaries
