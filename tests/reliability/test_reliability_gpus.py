"""torchrun with more processes on a node than it has GPUs, under device "auto" or "cuda": a
clear error saying what to do, not CUDA's "invalid device ordinal" (the device count is faked)."""

import pytest
import torch

from mannlab.errors import ConfigError
from mannlab.training import distributed


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("WORLD_SIZE", "3")


def test_a_process_without_a_gpu_of_its_own_is_refused(two_gpus, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ConfigError, match=r"has 2 GPU\(s\).*--nproc-per-node 2.*--device cpu"):
        distributed.place(torch.device("cuda"))


def test_processes_with_a_gpu_each_get_their_own(two_gpus, monkeypatch):
    for rank in (0, 1):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        assert distributed.place(torch.device("cuda")) == torch.device("cuda", rank)
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert distributed.place(torch.device("cpu")) == torch.device("cpu")  # the CPU: any number
