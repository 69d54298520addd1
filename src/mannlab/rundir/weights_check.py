"""Whether a file's tensors fit the model they are loaded into: every name, shape and dtype
the model's, and (where asked) every value finite. ``load_state_dict`` copies a tensor of
another dtype by converting its values, so a header that says I32 where the model holds F32
(the same bytes, read as other numbers) would load without a word: it is refused here,
naming the tensor."""

from __future__ import annotations

from typing import Mapping

import torch

from mannlab.errors import CheckpointError


def weight_problems(expected: Mapping[str, torch.Tensor], found: Mapping[str, torch.Tensor]) -> list[str]:
    """What keeps ``found`` from loading into a model whose state dict is ``expected``, a
    phrase per kind of problem ("missing keys a, b", "shape mismatch ...", "dtype mismatch
    ..."); empty when it fits."""
    missing = sorted(k for k in expected if k not in found)
    unexpected = sorted(k for k in found if k not in expected)
    not_tensors = [k for k in found if k in expected and not isinstance(found[k], torch.Tensor)]
    both = [k for k in expected if k in found and k not in not_tensors]
    wrong_shape = [
        f"{k}: checkpoint {tuple(found[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in both
        if found[k].shape != expected[k].shape
    ]
    wrong_dtype = [
        f"{k}: checkpoint {_dtype(found[k])} vs model {_dtype(expected[k])}"
        for k in both
        if found[k].dtype != expected[k].dtype
    ]
    problems = []
    for what, items in (
        ("missing keys", missing),
        ("unexpected keys", unexpected),
        ("not tensors", not_tensors),
        ("shape mismatch", wrong_shape),
        ("dtype mismatch", wrong_dtype),
    ):
        if items:
            problems.append(f"{what} {short(items)}")
    return problems


def nonfinite(found: Mapping[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors holding a NaN or an infinity."""
    return [
        k
        for k, v in found.items()
        if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]


def check_finite(found: Mapping[str, torch.Tensor], source: str) -> None:
    """CheckpointError naming the tensors of ``found`` (read from ``source``) that are not
    finite: a model that diverged, or a damaged file, never a model to use."""
    if bad := nonfinite(found):
        raise CheckpointError(
            f"{source} holds non-finite weights (NaN or infinity in {short(bad, 3)}): the model "
            "diverged before it was saved, or the file was changed; nothing to load"
        )


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def short(items: list[str], limit: int = 5) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
