"""What a file that ``torch.load(weights_only=True)`` cannot read is, in words for an
error: torch's own refusal advises loading it again with ``weights_only=False``, which runs
whatever code the file pickled; mannlab never does, and says what the file is instead."""

from __future__ import annotations


def load_problem(exc: Exception, data: bytes = b"") -> str:
    """What a file that ``torch.load(weights_only=True)`` refused (with ``exc``) is, as the
    rest of a sentence after its name; never torch's advice to load it with
    ``weights_only=False``. ``data``: its bytes, where at hand (to recognise safetensors)."""
    if _is_safetensors(data):
        return "is a safetensors file (weights without their model), not a PyTorch checkpoint"
    text = str(exc)
    if "Unsupported global" in text or "GLOBAL" in text:
        return (
            "holds pickled objects other than tensors and plain containers (classes or code); "
            "mannlab never unpickles code, so it does not load this file"
        )
    if "WeightsUnpickler" in text or "Weights only load failed" in text:
        return (
            "is not a checkpoint torch.save wrote (other bytes, or a pickle that only running "
            "code would read; mannlab never unpickles code)"
        )
    first = text.splitlines()[0][:200] if text else ""
    return f"is truncated or not a PyTorch checkpoint ({type(exc).__name__}: {first})"


def _is_safetensors(data: bytes) -> bool:
    if len(data) < 10:
        return False
    length = int.from_bytes(data[:8], "little")
    return 0 < length <= len(data) - 8 and data[8:9] == b"{"
