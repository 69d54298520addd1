"""The run directory of a training: one writer at a time, refuse to overwrite a run, and
resume one exactly."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import torch
from filelock import lock_descriptor

from mannlab.config import RunConfig
from mannlab.errors import CheckpointError, ConfigError
from mannlab.file_kinds import directory_problem
from mannlab.rundir import load_checkpoint
from mannlab.safe_writes import NOFOLLOW, open_descriptor
from mannlab.training import distributed
from mannlab.training.optimizer import hyperparameters

RUN_ARTIFACTS = (
    "config.toml",
    "metrics.jsonl",
    "summary.json",
    "checkpoints",
    "figures",
    "tensorboard",
    "metrics.csv",
    "wandb",
)
# What must not change when a run is resumed (the rest, like steps or lr, may).
RESUME_INVARIANTS = ("model", "model_args", "task", "task_args", "seed")
LOCK = ".lock"  # in the run directory; kept between runs (removing it would race a new writer)


class RunDirLock:
    """One training writes a run directory at a time: an exclusive OS lock on
    ``run_dir/.lock`` (filelock's, flock on Unix and LockFileEx on Windows), held from
    ``acquire`` to ``release`` (or the end of the ``with`` block). The OS drops it when the
    process ends, a crash or a kill included, so a stale lock never blocks a resume. The
    lock file is never opened through a symbolic link (one planted there would make the
    holder's process id overwrite the file it points to)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.fd: int | None = None

    def acquire(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = self._open()
        try:
            locked = lock_descriptor(fd, blocking=False)
        except OSError:  # no lock on this system or file system: one writer is up to the user
            locked = True
        if not locked:
            os.close(fd)
            raise in_use(self.run_dir, _holder(self.run_dir / LOCK))
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    @staticmethod
    def held(run_dir: Path) -> str | None:
        """What another process holding ``run_dir``'s lock wrote in it (its process id), or
        None if no process holds it. Creates nothing; for a command that must say the
        directory is in use before it gets as far as taking the lock."""
        path = Path(run_dir) / LOCK
        try:
            fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or lock_descriptor(fd, blocking=False):
                return None  # closing the descriptor drops the lock this probe took
            return _holder(path)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _open(self) -> int:
        """The lock file, created if missing; ConfigError if a symbolic link or something else
        is in its place (a FIFO or a device would not hold the holder's process id, a
        directory cannot be opened for writing)."""
        path = self.run_dir / LOCK
        remedy = "; remove it (mannlab makes a new one) or choose another --run-dir"
        try:
            return open_descriptor(path, os.O_RDWR | os.O_CREAT)
        except ConfigError as exc:
            if os.path.islink(path):  # the message names the link and what to do
                raise
            if not os.access(self.run_dir, os.W_OK):
                raise read_only(self.run_dir, exc) from None
            raise ConfigError(f"the lock file of run directory {self.run_dir}: {exc}{remedy}") from None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor drops the lock
            self.fd = None

    def __enter__(self) -> "RunDirLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(path: Path) -> str:
    """What the holder of the lock file ``path`` wrote in it: its process id, or "" where it
    cannot be read (Windows keeps a locked byte from other processes)."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        return os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def read_only(run_dir: Path, exc: Exception) -> ConfigError:
    """The error of a training in a run directory it cannot write (a read-only mount, no
    write permission): removing the lock file is no remedy there."""
    return ConfigError(
        f"run directory {run_dir} is read-only ({exc}): a training "
        "writes its checkpoints and metrics there. Copy the run to a writable directory and "
        "resume it there (--run-dir COPY --resume), or make the directory writable; "
        "`mannlab eval` and mannlab.load read a read-only run as it is"
    )


def in_use(run_dir: Path, holder: str) -> ConfigError:
    """The error of a second training of a run directory that ``holder`` (a process id, or
    other text when unknown) is writing."""
    return ConfigError(
        f"run directory {run_dir} is in use: another training"
        f"{f' (process {holder})' if holder.isdigit() else ''} is writing it. Wait for it "
        "to finish or stop it (then --resume continues the run), or choose another --run-dir"
    )


def check_run_dir(run_dir: Path) -> None:
    """ConfigError if ``run_dir`` (or a parent) exists but is not a directory."""
    for path in (run_dir, *run_dir.parents):
        if os.path.lexists(path):
            if problem := directory_problem(path):
                raise ConfigError(f"run directory {run_dir}: {problem}")
            return


def prepare_run_dir(run_dir: Path, force: bool) -> None:
    """Refuse a directory that holds a run, unless ``force``: then delete only its artifacts."""
    existing = [name for name in RUN_ARTIFACTS if os.path.lexists(run_dir / name)]
    if not existing:
        return
    if not force and not has_checkpoint(run_dir):
        raise ConfigError(
            f"run directory {run_dir} holds a run that stopped before its first checkpoint "
            f"({', '.join(existing)}; nothing to resume): pass --resume or --force to start it "
            "again (its files are replaced), or choose another --run-dir"
        )
    if not force:
        raise ConfigError(
            f"run directory {run_dir} already holds a run ({', '.join(existing)}); "
            "pass --resume to continue it, --force to overwrite it, or choose another --run-dir"
        )
    for name in existing:  # only what a run writes: never delete a user's other files
        target = run_dir / name
        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()


def has_checkpoint(run_dir: Path) -> bool:
    """Whether the run has a last checkpoint (or the complete copy a crashed save left), or
    something else in its place (a link to nowhere, a FIFO) that loading it will name."""
    last = run_dir / "checkpoints" / "last"
    return os.path.lexists(last) or (last.parent / f".{last.name}.old").is_dir()


def checkpoints_problem(run_dir: Path) -> str | None:
    """What is in place of the run's checkpoints directory, if something other than one is."""
    path = run_dir / "checkpoints"
    return directory_problem(path) if os.path.lexists(path) else None


def stopped_before_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run's files but no checkpoint: a run killed before its first
    one, which a --resume starts again (there is nothing to continue). Not a run whose
    checkpoints are damaged: that is for ``restore_last`` to report, not to start over."""
    if checkpoints_problem(run_dir) or has_checkpoint(run_dir):
        return False
    return any(os.path.lexists(run_dir / name) for name in RUN_ARTIFACTS)


# the files a resumed run replaces whole; a directory in the place of one would fail the
# replace only at the end of the training
REPLACED = ("config.toml", "metrics.jsonl", "summary.json")


def check_replaceable(run_dir: Path) -> None:
    """ConfigError if a directory stands where a resumed run will replace one of its files."""
    for name in REPLACED:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():  # a link is replaced, not what it points to
            raise ConfigError(
                f"cannot resume {run_dir}: {path} is a directory, not a regular file; the run "
                "replaces this file: move the directory away, or choose another --run-dir"
            )


def restore_last(
    run_dir: Path, config: RunConfig, model, optimizer, train_invariants: tuple[str, ...] = ("optimizer",)
) -> dict[str, Any]:
    """Load checkpoints/last into model and optimizer after checking that the config may
    resume it (RESUME_INVARIANTS and ``train_invariants`` unchanged) and restore torch's
    RNG. Returns the saved training state (progress, and what a batch source keeps)."""
    last = run_dir / "checkpoints" / "last"
    if problem := checkpoints_problem(run_dir):
        raise CheckpointError(
            f"cannot resume {run_dir}: {problem}; expected its checkpoints (last/, best/). "
            "Restore them from a copy, or start the run again without --resume"
        )
    if not has_checkpoint(run_dir):
        raise CheckpointError(f"cannot resume {run_dir}: it holds no run; start one without --resume")
    check_replaceable(run_dir)
    meta, state = load_checkpoint(last)  # weights only after the config check, for a clearer error
    saved = meta.get("config", {})
    current = json.loads(json.dumps(config.to_dict()))  # compare as stored: tuples become lists
    differ = [key for key in RESUME_INVARIANTS if _section(saved, key) != _section(current, key)]
    differ += [
        f"train.{key}" for key in train_invariants if saved.get("train", {}).get(key) != current["train"][key]
    ]
    if differ:
        raise ConfigError(
            f"cannot resume {run_dir}: {', '.join(differ)} differ from the saved run "
            f"(see {run_dir / 'config.toml'}); start a new run with another --run-dir instead"
        )
    load_checkpoint(last, model)
    missing = [key for key in ("optimizer", "torch_rng_state", "step") if key not in state]
    if missing:
        raise CheckpointError(
            f"{last / 'train_state.pt'} has no {', '.join(missing)} entry; "
            "restore the checkpoint from a copy or start the run again"
        )
    check_saved_step(last / "train_state.pt", state["step"], saved, config)
    try:
        optimizer.load_state_dict(state["optimizer"])
        check_optimizer_shapes(last / "train_state.pt", model, optimizer)
        torch.set_rng_state(state["torch_rng_state"])
        restore_cuda_rng(state.get("cuda_rng_states"))
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise CheckpointError(
            f"{last / 'train_state.pt'}: its optimizer or RNG state does not "
            f"fit this run ({type(exc).__name__}: {exc})"
        ) from None
    for group in optimizer.param_groups:  # a changed lr etc. in the config takes effect
        group.update(hyperparameters(config.train))
    return state


def check_saved_step(path: Path, step: Any, saved_config: dict[str, Any], config: RunConfig) -> None:
    """CheckpointError unless the saved step is an integer from 0 to the run's train.steps (as
    saved, or as now configured, whichever is larger)."""
    most = max(config.train.steps, int(saved_config.get("train", {}).get("steps") or 0))
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= most:
        raise CheckpointError(
            f"{path}: its step {step!r} is not a step of this run (an integer from 0 to "
            f"train.steps = {most}); restore the checkpoint from a copy or start the run again"
        )


def check_optimizer_shapes(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """ValueError naming the first optimizer state (Adam's moments, a momentum buffer) whose
    shape is not its parameter's: load_state_dict accepts it, the first step would fail."""
    names = {id(p): name for name, p in model.named_parameters()}
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                    raise ValueError(
                        f"optimizer state {key!r} of parameter {names.get(id(param), '?')} has shape "
                        f"{tuple(value.shape)}, the parameter {tuple(param.shape)}"
                    )


def cuda_rng_states() -> dict[str, Any]:
    """The RNG state of every CUDA device, for a checkpoint (nothing without CUDA)."""
    if not torch.cuda.is_available():
        return {}
    return {"cuda_rng_states": torch.cuda.get_rng_state_all()}


def restore_cuda_rng(states: list | None) -> None:
    """Set the CUDA devices' RNG states a checkpoint saved. A checkpoint with none (written
    without CUDA) leaves them as seeded; one with CUDA states read where there is no CUDA
    ignores them (the run continues on the CPU), and of more states than devices the first
    ones are used."""
    if not states or not torch.cuda.is_available():
        return
    for index, value in enumerate(states[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(value, index)


def restore_ranks(state: dict[str, Any], config: RunConfig, optimizer) -> None:
    """What ``restore_last`` did on rank 0, on the other ranks of a data-parallel run, from
    the training state rank 0 read: the optimizer state and each rank's RNG stream (the
    weights follow when DDP copies rank 0's at the start). A run resumed on another number
    of processes than it was saved from says what that changes."""
    saved = int(state.get("world_size", 1))
    world, rank = distributed.world_size(), distributed.rank()
    if rank > 0:
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:
            group.update(hyperparameters(config.train))
    if saved == world:
        if rank > 0:
            torch.set_rng_state(state["torch_rng_states"][rank])
        return
    if rank > 0:  # rank 0 goes on with the saved rank 0 stream
        torch.manual_seed(distributed.rank_seed(config.seed, rank, int(state["step"])))
    distributed.say(
        f"resuming a run saved by {saved} process(es) on {world}: the weights, optimizer, "
        f"schedules and data (the global batch of train.batch_size = {config.train.batch_size}, "
        f"now {config.train.batch_size // world} per process) go on unchanged; rank 0 continues "
        "the saved random stream and the other ranks start fresh streams of their own, so a "
        "model that samples (REINFORCE addresses, gumbel noise, dropout) draws other values "
        f"than it would have on {saved} process(es)."
    )


def _section(config_dict: dict[str, Any], key: str) -> Any:
    """RunConfig field ``key`` read from its TOML-shaped dict."""
    if key in ("model", "task"):
        return config_dict.get(key, {}).get("name")
    if key in ("model_args", "task_args"):
        return {k: v for k, v in config_dict.get(key[:-5], {}).items() if k != "name"}
    return config_dict.get(key)
