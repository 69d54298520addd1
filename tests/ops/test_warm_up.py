"""mannlab.models.warm_up compiles every numba kernel of the models for each dtype asked for,
and the compile lock it takes keeps a second process out until the first lets go."""

import subprocess
import sys

import pytest
import torch

from mannlab.models.warm_up import FAMILIES, warm_up
from mannlab.ops import dispatch
from mannlab.ops.numba_cache import compile_lock

numba = pytest.importorskip("numba")


def kernel_entry_points(kernels):
    """The kernels a module defines for its callers (its compiled functions not named _...)."""
    return {
        name: value
        for name, value in vars(kernels).items()
        if isinstance(value, numba.core.registry.CPUDispatcher)
        and value.py_func.__module__ == kernels.__name__
        and not name.startswith("_")
    }


def first_array_dtype(types):
    for value in types:
        if isinstance(value, numba.types.Array):
            return value.dtype
        if isinstance(value, numba.types.BaseTuple):
            found = first_array_dtype(value.types)
            if found is not None:
                return found
    return None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_warm_up_compiles_every_kernel_for_the_dtype(dtype):
    seconds = warm_up(dtypes=(dtype,))
    assert set(seconds) == set(FAMILIES)
    wanted = numba.from_dtype(torch.empty(0, dtype=dtype).numpy().dtype)
    for family in FAMILIES:
        entry_points = kernel_entry_points(dispatch.load(family))
        assert entry_points, family
        for name, kernel in entry_points.items():
            compiled = {first_array_dtype(signature) for signature in kernel.signatures}
            assert wanted in compiled, f"{family}.{name} not compiled for {dtype}"


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown kernel families"):
        warm_up(families=["lstm"])


HOLD = """
import sys
from mannlab.ops import dispatch
from mannlab.ops.numba_cache import compile_lock
with compile_lock(dispatch.load("armin")):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_compile_lock_keeps_a_second_process_out_until_released():
    kernels = dispatch.load("armin")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with compile_lock(kernels, blocking=False) as held:
            assert not held
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
        with compile_lock(kernels, blocking=False) as held:
            assert held
    finally:
        holder.kill()
