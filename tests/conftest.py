"""Test-wide settings and the small helpers several model test files share."""

import os
import time

import pytest
import torch

# Without a GPU, Triton kernels run in Triton's interpreter on CPU tensors: that is how the GPU
# kernels are tested here (the variable must be set before triton is imported).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from mannlab.models import base, build_model
from mannlab.models.warm_up import warm_up

# The models under test are made of many small operations: on a 2-core machine a
# second intra-op thread only adds contention (a learning check ran 3x slower).
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def numba_kernels_warm_up(request):
    """Under pytest-xdist each worker warms the numba kernels up (float32 and float64, the
    dtypes the tests use) before its first test. mannlab.models.warm_up shares the families
    between the workers under a file lock: each compiles some and loads the others from numba's
    disk cache, where otherwise every worker compiled every kernel at the same time. Its time
    is the setup of each worker's first test in --durations, and the summary has a line for
    it. In one process each kernel compiles once anyway, at its first use: nothing to do.
    MANNLAB_TEST_WARM_UP=0 leaves it out, for a run of tests that use few or none of the numba
    kernels (benchmarks/gpu_check.sh's Triton tests), where it would cost minutes."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) < 2:
        return
    if os.environ.get("MANNLAB_TEST_WARM_UP") == "0":
        return
    start = time.perf_counter()
    families = warm_up(dtypes=(torch.float32, torch.float64))
    seconds = {"total": time.perf_counter() - start, **families}
    request.config.workeroutput["kernels_warm_up"] = {k: round(v, 1) for k, v in seconds.items()}


_WARM_UPS = pytest.StashKey[dict]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist, on the controller: keep each worker's warm-up seconds for the summary."""
    seconds = getattr(node, "workeroutput", {}).get("kernels_warm_up")
    if seconds:
        node.config.stash.setdefault(_WARM_UPS, {})[node.gateway.id] = seconds


def pytest_terminal_summary(terminalreporter, config):
    for worker, seconds in sorted(config.stash.get(_WARM_UPS, {}).items()):
        families = ", ".join(f"{k} {v} s" for k, v in seconds.items() if k != "total")
        terminalreporter.write_line(f"numba kernels warm-up, {worker}: {seconds['total']} s ({families})")


# A small configuration of every registered model, for fast float64 checks.
SMALL = {
    "ntm": dict(controller_size=6, memory_slots=7, memory_width=3, shift_range=1),
    "dnc": dict(controller_size=6, memory_slots=7, memory_width=3),
    "dntm": dict(controller_size=6, memory_slots=5, address_size=2, content_size=3),
    "lstm": dict(hidden_size=8),
    "gru": dict(hidden_size=8),
    "tardis": dict(
        hidden_size=8, memory_slots=4, address_size=3, content_size=5, read_mlp_size=4, fusion_size=6
    ),
    "armin": dict(hidden_size=6, memory_slots=4),
}


def small_model(name, input_size, output_size, **kw):
    """The registered model ``name`` in its SMALL configuration (kw override it), float64,
    its parameters drawn after torch.manual_seed(0)."""
    torch.manual_seed(0)
    return build_model(name, input_size, output_size, **{**SMALL[name], **kw}).double()


def float64_seq(b, t, i, sample=torch.rand):
    """A (b, t, i) float64 input, the same for the same sizes (its own generator, seed 1)."""
    return sample(b, t, i, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def leaves(value):
    """The tensors of a (nested) state, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in leaves(item)]


@pytest.fixture
def offline(monkeypatch):
    """Data loaders may not touch the network: a download attempt fails at once."""
    from mannlab.data import download

    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


def tiny_ntm_args(val_every: int = 3) -> list[str]:
    """CLI options of a tiny NTM on copy (seconds per run), shared by the CLI tests."""
    sets = [
        "model.controller_size=8",
        "model.memory_slots=8",
        "model.memory_width=4",
        "task.max_length=3",
        "task.width=3",
        f"train.val_every={val_every}",
        "train.val_batch_size=4",
        "train.val_batches=1",
    ]
    return [
        "--model",
        "ntm",
        "--task",
        "copy",
        "--batch-size",
        "4",
        "--no-progress",
        *[arg for kv in sets for arg in ("--set", kv)],
    ]


def triton_device() -> str:
    """The device the Triton kernels' tests run on: CUDA where present, else the CPU (in
    Triton's interpreter); skips the test when Triton is not installed."""
    pytest.importorskip("triton")
    return "cuda" if torch.cuda.is_available() else "cpu"


def triton_setup() -> tuple[str, torch.dtype, float]:
    """(device, dtype, tolerance) of a Triton kernel's run against a float64 reference here:
    float64 in the interpreter, float32 on a GPU."""
    device = triton_device()
    return (device, torch.float32, 2e-4) if device == "cuda" else (device, torch.float64, 1e-10)


#: batch rows per program the Triton kernels' tests force (MANNLAB_TRITON_ROWS), with a batch
#: of 5: one row a program, a tail tile of 1 behind a full one, one tile of 16 with 11 empty rows
TRITON_ROWS = (1, 4, 16)
TRITON_ROWS_BATCH = 5


def force_triton_rows(monkeypatch, launcher, rows: int) -> list[int]:
    """Force ``rows`` per program through MANNLAB_TRITON_ROWS; the list fills with the rows each
    launch of ``launcher`` (a family's triton_sequence module) took."""
    from mannlab.ops import triton_math

    monkeypatch.setenv(triton_math.ROWS_VARIABLE, str(rows))
    taken: list[int] = []

    def spy(*args):
        taken.append(triton_math.rows_per_program(*args))
        return taken[-1]

    monkeypatch.setattr(launcher, "rows_per_program", spy)
    return taken


def on_device(records, device, dtype):
    """The records (NamedTuples of tensors, None or nested tuples of them) as fresh leaves on
    ``device`` in ``dtype`` (the draws and counts as values)."""

    def move(value):
        if value is None:
            return None
        if isinstance(value, tuple):  # a record inside a record, or a controller's state
            return type(value)(*map(move, value)) if hasattr(value, "_fields") else tuple(map(move, value))
        moved = value.detach().to(device, dtype if value.is_floating_point() else value.dtype)
        return moved.requires_grad_() if value.requires_grad else moved

    return tuple(type(r)(*map(move, r)) for r in records)


def assert_triton_equals_step_loop(model, x, tol):
    """A model routed to its Triton kernels (forced) against its own step loop, from the same
    draws (torch.manual_seed(5) before each): outputs, trace, final state and every parameter's
    gradient (the same parameters reached)."""
    from mannlab.ops import use_kernels

    def outputs_and_grads(kernels):
        model.zero_grad()
        torch.manual_seed(5)
        with use_kernels(kernels):
            assert base.sequence_backend(model.cell, x, None, True) == ("triton" if kernels else "")
            y, state, trace = model(x, return_trace=True)
        values = [y, *leaves(state), *(t for t in trace if isinstance(t, torch.Tensor))]
        loss = sum((v * v.sin()).sum() for v in values if v.is_floating_point())
        loss.backward()
        return values, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    values, grads = outputs_and_grads("triton")
    ref_values, ref_grads = outputs_and_grads(False)
    for a, b in zip(values, ref_values, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    assert grads.keys() == ref_grads.keys()
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=tol, rtol=tol, msg=lambda m: f"{name}: {m}")


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def tiny_lstm_run(run_dir, steps: int = 2, **train_args):
    """A RunConfig of a 4-unit LSTM on copy of lengths 1-2 (under a second a run), validating
    every step; ``train_args`` override its TrainConfig."""
    from mannlab.config import RunConfig, TrainConfig

    args = dict(steps=steps, batch_size=2, val_every=1, val_batch_size=2, val_batches=1, progress=False)
    return RunConfig(
        model="lstm",
        task="copy",
        model_args={"hidden_size": 4},
        task_args={"width": 2, "max_length": 2},
        train=TrainConfig(**{**args, **train_args}),
        run_dir=str(run_dir),
    )


@pytest.fixture
def no_figures(monkeypatch):
    """Runs draw no figures (matplotlib is most of a tiny run's time)."""
    from mannlab.training import loop

    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
