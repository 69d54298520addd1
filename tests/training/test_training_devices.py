"""train.device and train.precision on a CPU-only machine: auto falls back to the CPU, a
missing GPU is a clear error, --device cpu changes nothing, bf16 autocast trains the LSTM."""

import json

import pytest
import torch

from conftest import tiny_ntm_args
from mannlab import tasks
from mannlab.cli import main
from mannlab.errors import ConfigError
from mannlab.models import build_model
from mannlab.training import device as devices
from mannlab.training import loop

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")

TINY = ["train", *tiny_ntm_args(val_every=2), "--steps", "3"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})


@no_gpu
def test_auto_is_the_cpu_here_and_a_missing_gpu_is_a_clear_error(capsys):
    if not devices._mps_available():
        assert devices.resolve_device("auto") == torch.device("cpu")
    assert devices.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="train.device must be one of auto, cpu, cuda, mps"):
        devices.resolve_device("tpu")
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY, "--device", "cuda", "--run-dir", "gpu"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "train.device is 'cuda' but CUDA is not available here" in err
    assert "--device cpu" in err and "Traceback" not in err


def test_device_cpu_is_bit_identical_to_no_flag_on_a_machine_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # what "no GPU here" means
    assert main([*TINY, "--run-dir", "plain"]) == 0
    assert main([*TINY, "--run-dir", "cpu", "--device", "cpu"]) == 0
    for name in ("best", "last"):
        weights = [
            (tmp_path / run / "checkpoints" / name / "weights.safetensors").read_bytes()
            for run in ("plain", "cpu")
        ]
        assert weights[0] == weights[1]

    def rows(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k not in ("wall", "cpu")} for line in lines]

    assert rows("plain") == rows("cpu")


def test_bf16_mixed_trains_the_lstm_with_a_float32_loss(tmp_path):
    task = devices.OnDevice(tasks.make("copy", width=3, max_length=3), torch.device("cpu"))
    torch.manual_seed(0)
    # fused=False: torch's own nn.LSTM fails under CPU bf16 autocast where oneDNN lacks bf16
    # (no avx512_bf16, as on this machine); the cell loop runs everywhere
    model = build_model("lstm", 4, 3, hidden_size=8, fused=False)
    x, y, mask = task.sample(4, 0)
    with devices.autocast("bf16-mixed", torch.device("cpu")):
        logits, _ = model(x)
        loss = task.loss(logits, y, mask)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    # and one run of the trainer
    lstm = [
        "train",
        "--model",
        "lstm",
        "--task",
        "copy",
        "--set",
        "model.hidden_size=8",
        "--set",
        "model.fused=false",
        "--set",
        "task.max_length=3",
        "--set",
        "task.width=3",
        "--batch-size",
        "4",
        "--set",
        "train.val_every=2",
        "--set",
        "train.val_batch_size=4",
        "--set",
        "train.val_batches=1",
        "--steps",
        "2",
        "--no-progress",
        "--precision",
        "bf16-mixed",
        "--run-dir",
        "bf16",
    ]
    assert main(lstm) == 0
    saved = (tmp_path / "bf16" / "config.toml").read_text()
    assert 'precision = "bf16-mixed"' in saved
    losses = [json.loads(line) for line in (tmp_path / "bf16" / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(row["bce"])) for row in losses if "bce" in row)


def test_16_mixed_needs_cuda_and_precision_names_are_checked(capsys):
    with pytest.raises(ConfigError, match="'16-mixed' needs a CUDA device"):
        devices.check_precision("16-mixed", torch.device("cpu"))
    with pytest.raises(ConfigError, match="train.precision must be one of 32, bf16-mixed"):
        devices.check_precision("fp8", torch.device("cpu"))
    with pytest.raises(SystemExit):
        main([*TINY, "--device", "cpu", "--set", "train.precision=16-mixed", "--run-dir", "fp16"])
    assert "needs a CUDA device" in capsys.readouterr().err
    # --set train.precision=32 (a TOML number) is the string "32"
    assert main([*TINY, "--set", "train.precision=32", "--run-dir", "p32"]) == 0


def test_a_grad_scaler_skips_an_overflowing_step_instead_of_failing():
    # the 16-mixed update path (a GradScaler on CUDA), run with torch's CPU scaler
    from mannlab.training.update import apply_update

    torch.manual_seed(0)
    layer = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    before = [p.detach().clone() for p in layer.parameters()]
    huge = layer(torch.full((1, 2), 3e38)).sum()  # finite loss, gradients overflow
    apply_update(layer, optimizer, huge, clip=10.0, scaler=scaler)
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
    assert scaler.get_scale() < 2.0**10  # the scale went down
    apply_update(layer, optimizer, layer(torch.ones(1, 2)).sum(), clip=10.0, scaler=scaler)
    assert not all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
