"""The fields of a checkpoint's meta.json, checked as they are read: a step that is not a
count, a kind that is neither checkpoint, or a recorded config that a fresh config would
fail (a garbage ``config.model``) is an error naming the field, never a value passed on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mannlab.config import RunConfig
from mannlab.errors import CheckpointError, ConfigError

KINDS = ("best", "last")
TEXT_FIELDS = ("model", "task", "mannlab_version")


def check_meta(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """``meta`` unchanged if its fields are of their kinds (every field is optional: a
    checkpoint of an older mannlab may lack one); else CheckpointError naming the field."""
    problem = _problem(meta)
    if problem:
        raise CheckpointError(
            f"{path}: {problem}; the file was changed after mannlab wrote it. Restore the "
            "checkpoint from a copy, or load the other checkpoint"
        )
    return meta


def _problem(meta: dict[str, Any]) -> str:
    step = meta.get("step")
    if "step" in meta and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        return f"its step must be a count of steps (an integer >= 0), got {step!r}"
    if "kind" in meta and meta["kind"] not in KINDS:
        return f"its kind must be 'best' or 'last', got {meta['kind']!r}"
    for key in TEXT_FIELDS:
        if key in meta and not isinstance(meta[key], str):
            return f"its {key} must be a string, got {meta[key]!r}"
    if "config" in meta:
        if not isinstance(meta["config"], dict):
            return f"its config must be a run config (a JSON object), got {meta['config']!r}"
        try:
            config = RunConfig.from_dict(meta["config"])
        except ConfigError as exc:
            return f"its recorded run config is not valid ({exc})"
        for key in ("model", "task"):
            if key in meta and meta[key] != getattr(config, key):
                return f"its {key} is {meta[key]!r} but its recorded config's is {getattr(config, key)!r}"
    return ""
