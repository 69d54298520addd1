"""A safetensors file of weights, read with its header checked first: the header (a JSON
object of every tensor's name, dtype, shape and offsets, and a free ``__metadata__`` table)
is at most MAX_HEADER_BYTES and its metadata at most MAX_METADATA_BYTES, so a file whose
header claims megabytes of text is refused before any of it is parsed."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from mannlab.errors import CheckpointError
from mannlab.file_kinds import open_regular
from mannlab.rundir.sums import MAX_FILE_BYTES

# a tensor's entry is about 100 bytes: thousands of tensors fit, a model has at most hundreds
MAX_HEADER_BYTES = 16 << 20
# mannlab writes {"format": "pt"}
MAX_METADATA_BYTES = 64 << 10


def read_safetensors(path: Path, remedy: str) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``; CheckpointError (ending in ``remedy``)
    if it is not a regular file, its header is too large or malformed, or safetensors
    cannot read it."""
    header = _header(path, remedy)
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    if metadata is not None and len(json.dumps(metadata)) > MAX_METADATA_BYTES:
        raise CheckpointError(
            f"{path}: its safetensors __metadata__ is larger than {MAX_METADATA_BYTES:,} bytes "
            f"(a model's is a few words): the file is damaged or not a model's. {remedy}"
        )
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path} is truncated or not a safetensors file ({exc}). {remedy}") from None


def _header(path: Path, remedy: str) -> object:
    with open_regular(path, CheckpointError, MAX_FILE_BYTES, remedy) as fh:
        size = fh.read(8)
        if len(size) < 8:
            raise CheckpointError(
                f"{path} is truncated or not a safetensors file ({len(size)} bytes). {remedy}"
            )
        length = int.from_bytes(size, "little")
        if length > MAX_HEADER_BYTES:
            raise CheckpointError(
                f"{path}: its safetensors header claims {length:,} bytes, more than the "
                f"{MAX_HEADER_BYTES:,} any model's needs: the file is damaged or not a model's. {remedy}"
            )
        text = fh.read(length)
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(
            f"{path} is truncated or not a safetensors file (its header is not JSON). {remedy}"
        ) from None
