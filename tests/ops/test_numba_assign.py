"""numba_math.assign, the array copy of the kernels: it copies any layout and dtype of one
shape and refuses two shapes; and the kernels copy arrays through it, never by assigning an
array to a slice (numba compiles the formatting of that assignment's error message into every
kernel that uses it, a third of each family's first compile)."""

import ast
import pathlib

import numpy as np
import pytest

import mannlab

pytest.importorskip("numba")

from mannlab.ops.numba_math import assign  # noqa: E402 (needs numba)

OPS = pathlib.Path(mannlab.__file__).parent / "ops"


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_assign_copies_views_of_any_layout_and_casts_to_the_target_dtype(shape):
    values = np.random.default_rng(0).random(shape[::-1]).T  # a transposed (strided) view
    out = np.zeros((2, *shape), np.float32)[1]
    assign(out, values)
    assert (out == values.astype(np.float32)).all()


def test_assign_refuses_two_shapes():
    with pytest.raises(ValueError, match="shapes differ"):
        assign(np.zeros((2, 3)), np.zeros((3, 2)))


def _slice_assignments(path: pathlib.Path) -> list[str]:
    """`x[a:b] = value` (or `x[:, i] = ...`) with a value other than a number: the slice
    assignments that may take an array."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Assign):
            continue
        targets = [t for target in node.targets for t in getattr(target, "elts", [target])]
        for target in targets:
            if not isinstance(target, ast.Subscript):
                continue
            index = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
            is_number = isinstance(node.value, ast.Constant) or (
                isinstance(node.value, ast.UnaryOp) and isinstance(node.value.operand, ast.Constant)
            )
            if any(isinstance(i, ast.Slice) for i in index) and not is_number:
                found.append(f"{path.parent.name}/{path.name}:{node.lineno}")
    return found


def test_kernels_copy_arrays_through_assign_not_slice_assignment():
    kernel_files = [OPS / "numba_math.py", *sorted(OPS.glob("*/kernels.py"))]
    assert len(kernel_files) == 6
    found = [where for path in kernel_files for where in _slice_assignments(path)]
    assert not found, f"slice assignments (use numba_math.assign): {found}"
