"""A Lightning checkpoint (``.ckpt``) read without unpickling code, on every supported
PyTorch: the file is read as a regular file of at most MAX_FILE_BYTES (a FIFO is refused,
not waited on) and unpickled with ``torch.load(weights_only=True)`` explicitly, whatever
torch's default (``weights_only`` became the default only in PyTorch 2.6). What cannot be
read is named in one line: an empty file, a safetensors file, pickled code, a file that is
not a checkpoint, one without ``state_dict`` or ``hyper_parameters``."""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from typing import IO, Any, Iterator

import torch

from mannlab.errors import CheckpointError
from mannlab.file_kinds import read_regular
from mannlab.rundir.sums import MAX_FILE_BYTES
from mannlab.rundir.torch_files import load_problem

REMEDY = "MannModule.load_from_checkpoint reads checkpoints a Lightning Trainer saved of a MannModule"


def read_lightning_checkpoint(source: str | os.PathLike | IO[bytes]) -> tuple[bytes, dict[str, Any]]:
    """(the file's bytes, the checkpoint dict) of a Lightning checkpoint of a MannModule:
    a ``state_dict`` of tensors and its ``hyper_parameters``; CheckpointError else."""
    if isinstance(source, (str, os.PathLike)):
        name, data = str(source), read_regular(source, CheckpointError, MAX_FILE_BYTES, REMEDY)
    else:  # an open file, as Lightning accepts
        name, data = "the checkpoint", source.read()
    if not data:
        raise CheckpointError(f"{name} is empty; {REMEDY}")
    try:
        with weights_only_globals(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on foreign pickle protocols: the error says it
            checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for foreign bytes
        raise CheckpointError(f"{name} {load_problem(exc, data)}; {REMEDY}") from None
    check_structure(checkpoint, name)
    return data, checkpoint


def check_structure(checkpoint: Any, name: str) -> None:
    """CheckpointError unless ``checkpoint`` is a dict with a ``state_dict`` of named tensors
    and a ``hyper_parameters`` dict."""
    if not isinstance(checkpoint, dict):
        raise CheckpointError(
            f"{name} holds a {type(checkpoint).__name__}, not a Lightning checkpoint; {REMEDY}"
        )
    state = checkpoint.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{name} has no state_dict (the module's weights): not a Lightning checkpoint; {REMEDY}"
        )
    wrong = [str(k) for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if wrong:
        raise CheckpointError(
            f"{name}: its state_dict holds entries that are not named tensors ({', '.join(wrong[:3])})"
        )
    if not isinstance(checkpoint.get("hyper_parameters"), dict):
        raise CheckpointError(
            f"{name} has no hyper_parameters: it was not saved from a MannModule (which saves the "
            "model and task it builds); pass them again, or load the state_dict yourself"
        )


@contextlib.contextmanager
def weights_only_globals() -> Iterator[None]:
    """The classes a MannModule checkpoint may hold besides tensors and plain containers:
    Lightning's AttributeDict (hyperparameters, in some versions), allowed where torch can
    allow a class for one load (2.5 and later); elsewhere nothing more is allowed."""
    allowed: list[Any] = []
    with contextlib.suppress(ImportError):
        from lightning.fabric.utilities.data import AttributeDict

        allowed.append(AttributeDict)
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None or not allowed:
        yield
        return
    with safe_globals(allowed):
        yield
