"""--device auto: the fastest path the machine has for the model, said in one line; the
kernels switch and its Triton setting. A GPU is faked where the choice is all that is tested."""

import pytest
import torch

from mannlab.models import base, build_model
from mannlab.ops import dispatch, use_kernels
from mannlab.training import device as devices


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_auto_without_a_gpu_is_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    device, why = devices.auto_device(build_model("ntm", 3, 2))
    assert device.type in ("cpu", "mps") and why


def test_auto_sends_plain_rnns_to_the_gpu(fake_gpu):
    device, why = devices.auto_device(build_model("lstm", 3, 2))
    assert device.type == "cuda" and "cuDNN" in why


@pytest.mark.parametrize("name", ["ntm", "dnc", "dntm", "tardis", "armin"])
def test_auto_keeps_memory_models_without_gpu_kernels_on_the_cpu_below_their_batch(
    fake_gpu, monkeypatch, name
):
    model = build_model(name, 3, 2)
    monkeypatch.setattr(type(model), "kernel_backends", lambda self: ("numba",))
    device, why = devices.auto_device(model, devices.GPU_MIN_BATCH_TENSOR - 1)
    assert device.type == "cpu" and "--device cuda" in why
    assert devices.auto_device(model, devices.GPU_MIN_BATCH_TENSOR)[0].type == "cuda"


def test_auto_takes_the_gpu_where_triton_kernels_cover_the_model(fake_gpu, monkeypatch):
    model = build_model("armin", 3, 2)
    monkeypatch.setattr(type(model), "kernel_backends", lambda self: ("numba", "triton"))
    device, why = devices.auto_device(model, devices.GPU_MIN_BATCH_TRITON)
    assert device.type == "cuda" and "Triton" in why
    # the quick start's batch (16) trains faster on the CPU kernels
    assert devices.auto_device(model, 16)[0].type == "cpu"


def test_resolve_auto_with_the_model_follows_the_policy(fake_gpu, monkeypatch):
    model = build_model("ntm", 3, 2)
    monkeypatch.setattr(type(model), "kernel_backends", lambda self: ("numba",))
    assert devices.resolve_device("auto", model, 16).type == "cpu"
    assert devices.resolve_device("auto").type == "cuda"  # without a model: CUDA when present


def test_the_choice_is_said_once(fake_gpu, monkeypatch, capsys):
    model = build_model("lstm", 3, 2)
    monkeypatch.setattr(devices, "_said", set())
    devices.say_auto_choice(model)
    devices.say_auto_choice(model)
    err = capsys.readouterr().err
    assert err.count("--device auto chose cuda") == 1


def test_plain_models_list_no_kernels():
    assert build_model("lstm", 3, 2).kernel_backends() == ()
    assert "numba" in build_model("dnc", 3, 2).kernel_backends()


def test_triton_runs_below_its_batch_limit_and_always_when_forced(monkeypatch):
    model = build_model("armin", 3, 2)
    monkeypatch.setattr(dispatch, "triton_applies", lambda name, x: True)
    small, large = torch.zeros(2, 3, 3), torch.zeros(dispatch.TRITON_MAX_BATCH, 1, 3)
    with torch.no_grad():
        assert base.sequence_backend(model.cell, small) == "triton"
        assert not base.sequence_backend(model.cell, large)
        with use_kernels("triton"):
            assert base.sequence_backend(model.cell, large) == "triton"


def test_kernels_switch_settings():
    assert dispatch.kernels_mode() in dispatch.MODES
    with use_kernels(False):
        assert dispatch.kernels_mode() == "off" and not dispatch.kernels_enabled()
    with use_kernels("triton"):
        assert dispatch.kernels_mode() == "triton" and dispatch.kernels_enabled()
        # forced Triton never runs the numba kernels
        assert not dispatch.kernels_apply("ntm", torch.zeros(1))
    with pytest.raises(ValueError, match="triton"):
        with use_kernels("cuda"):
            pass


def test_without_triton_the_gpu_takes_the_tensor_path_and_says_so_once(monkeypatch, caplog):
    import builtins

    from mannlab.ops import notice

    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("No module named 'triton'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    monkeypatch.setattr(notice, "_triton_said", False)
    dispatch.load_triton.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="mannlab"):
            assert dispatch.load_triton("armin") is None
            assert dispatch.load_triton("ntm") is None
        said = [r.getMessage() for r in caplog.records if "Triton unavailable" in r.getMessage()]
        assert len(said) == 1 and 'pip install "mannlab[gpu]"' in said[0]
        assert not build_model("armin", 3, 2).kernel_backends().count("triton")
    finally:
        dispatch.load_triton.cache_clear()


def test_kernels_not_checked_on_a_gpu_run_only_when_forced():
    pytest.importorskip("triton")
    from mannlab.ops.dntm import triton_kernels

    assert not triton_kernels.GPU_CHECKED
    assert not dispatch.triton_checked("dntm")
    model = build_model("dntm", 3, 2)
    assert "triton" not in model.kernel_backends()  # so auto never sends it to the GPU for them
    with dispatch.use_kernels("triton"):
        assert dispatch.triton_applies("dntm", torch.zeros(1, 3))
