"""A run is evaluated as it was trained: its config.toml, which a user may edit, is compared
with the config recorded in the checkpoint's meta.json when the checkpoint was saved. A
change that makes the weights mean something else (the model, its arguments, the task or its
parameters) is a ConfigError naming the keys; one that only changes what the evaluation
draws or where it reads (the lengths, their multiples, the seed of the batches, the data's
directory) is a warning. A deliberate
change goes through overrides (``mannlab eval --set``), which are not compared."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mannlab.config import RunConfig
from mannlab.errors import ConfigError, DataError
from mannlab.rundir.checkpoint import META
from mannlab.rundir.files import read_json

log = logging.getLogger("mannlab")

# task parameters that set only what is drawn or where it is read: the lengths (the evaluation
# lengths follow them), the data's directory, how much of a split a char-LM evaluation reads
HARMLESS_TASK_KEYS = (
    "min_length",
    "max_length",
    "min_repeats",
    "max_repeats",
    "min_items",
    "max_items",
    "data_dir",
    "valid_batch_size",
    "test_batch_size",
    "valid_symbols",
    "test_symbols",
)
# train settings an evaluation reads: the default lengths, which multiple 1 means
EVAL_TRAIN_KEYS = ("val_length_multiples", "val_lengths")


def check_recorded_config(run_dir: Path, config: RunConfig, checkpoint: str) -> None:
    """ConfigError if ``config`` (the run's config.toml) differs from the config recorded with
    the checkpoint about to load (``checkpoint``, or "last" where "best" has none) in what
    the weights mean; a warning naming the keys if only in what the evaluation draws. Nothing
    when no recorded config can be read (a checkpoint of an older mannlab; a damaged one,
    which loading it then reports)."""
    recorded = _recorded(run_dir, checkpoint)
    if recorded is None:
        return
    refused, warned = differences(config, recorded[1])
    where = f"{run_dir / 'config.toml'}"
    source = f"the config recorded with its {recorded[0]} checkpoint"
    if refused:
        raise ConfigError(
            f"{where} differs from {source} in {'; '.join(refused)}: the weights were trained as "
            "recorded. Restore config.toml, or pass a deliberate change with --set (overrides)"
        )
    if warned:
        log.warning(
            "mannlab: %s differs from %s in %s; evaluating as config.toml says",
            where,
            source,
            "; ".join(warned),
        )


def differences(config: RunConfig, recorded: RunConfig) -> tuple[list[str], list[str]]:
    """(changes that make the weights mean something else, changes of what is evaluated only),
    each "key: now X, recorded Y"."""
    refused: list[str] = []
    warned: list[str] = []
    for key in ("model", "task"):
        if getattr(config, key) != getattr(recorded, key):
            refused.append(_change(key, getattr(config, key), getattr(recorded, key)))
    for section in ("model", "task"):
        now, then = _plain(getattr(config, f"{section}_args")), _plain(getattr(recorded, f"{section}_args"))
        for key in sorted(set(now) | set(then)):
            if now.get(key) != then.get(key):
                harmless = section == "task" and key in HARMLESS_TASK_KEYS
                (warned if harmless else refused).append(
                    _change(f"{section}.{key}", now.get(key), then.get(key))
                )
    if config.seed != recorded.seed:
        warned.append(_change("seed", config.seed, recorded.seed))
    for key in EVAL_TRAIN_KEYS:
        now, then = _plain(getattr(config.train, key)), _plain(getattr(recorded.train, key))
        if now != then:
            warned.append(_change(f"train.{key}", now, then))
    return refused, warned


def _recorded(run_dir: Path, checkpoint: str) -> tuple[str, RunConfig] | None:
    """(the checkpoint's name, its recorded config) of the checkpoint a load reads first."""
    for name in [checkpoint] + (["last"] if checkpoint == "best" else []):
        try:
            meta = read_json(run_dir / "checkpoints" / name / META)
        except (OSError, DataError):
            continue
        if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
            return None
        try:
            return name, RunConfig.from_dict(meta["config"])
        except ConfigError:
            return None  # loading the checkpoint names what is wrong with its meta.json
    return None


def _plain(value: Any) -> Any:
    """``value`` as JSON stores it (tuples become lists), for comparing a config read from TOML
    with one recorded in JSON."""
    return json.loads(json.dumps(value))


def _change(key: str, now: Any, then: Any) -> str:
    return f"{key}: {_shown(now)} in config.toml, {_shown(then)} recorded"


def _shown(value: Any) -> str:
    return "absent" if value is None else repr(value)
