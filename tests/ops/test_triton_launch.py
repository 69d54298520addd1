"""The launch helpers the Triton kernels share (mannlab.ops.triton_math): the batch rows per
program chosen from the batch and the GPU's SMs, the switch that forces them, and the int64
offsets (``wide``) checked in Triton's interpreter past 2**31."""

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from mannlab.errors import ConfigError  # noqa: E402
from mannlab.ops import triton_math  # noqa: E402

H100_SMS = 132


@pytest.mark.parametrize(
    "batch, rows",
    [(1, 1), (32, 1), (132, 1), (133, 2), (512, 4), (1000, 8), (2048, 16), (4096, 16), (100_000, 16)],
)
def test_rows_fill_the_multiprocessors(batch, rows, monkeypatch):
    monkeypatch.delenv(triton_math.ROWS_VARIABLE, raising=False)
    monkeypatch.setattr(triton_math, "multiprocessors", lambda device: H100_SMS)
    assert triton_math.rows_per_program(batch, torch.device("cpu")) == rows


def test_off_a_gpu_few_multiprocessors_so_tests_take_several_rows(monkeypatch):
    monkeypatch.delenv(triton_math.ROWS_VARIABLE, raising=False)
    cpu = torch.device("cpu")
    assert [triton_math.rows_per_program(b, cpu) for b in (1, 2, 3, 5, 9, 64)] == [1, 1, 2, 4, 8, 16]


def test_the_switch_forces_the_rows(monkeypatch):
    monkeypatch.setenv(triton_math.ROWS_VARIABLE, "4")
    assert triton_math.rows_per_program(4096, torch.device("cpu")) == 4
    for bad in ("3", "32", "0", "four", "-1"):
        monkeypatch.setenv(triton_math.ROWS_VARIABLE, bad)
        with pytest.raises(ConfigError, match=r"MANNLAB_TRITON_ROWS takes one of \[1, 2, 4, 8, 16\]"):
            triton_math.rows_per_program(32, torch.device("cpu"))


def test_older_triton_on_a_gpu_keeps_sixteen_rows(monkeypatch):
    monkeypatch.setenv(triton_math.ROWS_VARIABLE, "2")
    monkeypatch.setattr(triton_math, "INTERPRETED", False)
    monkeypatch.setattr(triton, "__version__", "3.8.1")
    assert triton_math.rows_per_program(32, torch.device("cpu")) == 16
    monkeypatch.setattr(triton, "__version__", "3.9.0+git1234")
    assert triton_math.rows_per_program(32, torch.device("cpu")) == 2


@triton.jit
def _record_offset(out, t, B, W: tl.constexpr):
    B = triton_math.wide(B)
    tl.store(out, t * B * W)


def test_wide_offsets_pass_two_to_the_31():
    # (T + 1) B width of a long, wide batch: 784 x 4096 x 1024 > 2**31 (an int32 product wraps,
    # in the interpreter as on a GPU)
    from conftest import triton_device

    out = torch.zeros(1, dtype=torch.int64, device=triton_device())
    _record_offset[(1,)](out, 784, 4096, 1024)
    assert out.item() == 784 * 4096 * 1024 > 2**31
    _record_offset[(1,)](out, 3, 1, 2)  # B == 1 is a constant to Triton: widened all the same
    assert out.item() == 6


@pytest.mark.parametrize("family", ["ntm", "dnc", "dntm", "tardis"])
def test_every_kernel_widens_the_batch_before_any_offset(family):
    """Each whole-sequence kernel's offsets multiply B: B is widened before its first use (a
    kernel that lost the line would index past 2**31 elements wrongly, which no test the
    interpreter can run shows)."""
    import importlib
    import inspect
    import re

    kernels = importlib.import_module(f"mannlab.ops.{family}.triton_kernels")
    launched = [f for name, f in vars(kernels).items() if name.endswith("_kernel")]
    assert len(launched) == 2  # the forward and the backward
    for kernel in launched:
        body = inspect.getsource(kernel.fn).split("\n):\n", 1)[1]  # past the signature
        first_use = re.search(r"\bB\b", body)
        assert first_use and body[first_use.start() :].startswith("B = _wide(B)"), kernel.__name__


def test_armin_draws_step_offset_is_wide():
    """ARMIN's rows are int64 throughout; its one time x batch x width product is the draws'."""
    import inspect

    from mannlab.ops.armin import triton_kernels

    assert "_wide(t) * B * width" in inspect.getsource(triton_kernels._step_draws.fn)
