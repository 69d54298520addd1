"""Checkpoints: round trip, atomic replacement, clear errors, and no arbitrary unpickling."""

import json

import pytest
import torch
from torch import nn

import mannlab.rundir.checkpoint as checkpoint
from mannlab.errors import CheckpointError
from mannlab.rundir.checkpoint import load_checkpoint, save_checkpoint


class Tiny(nn.Module):
    def __init__(self, hidden=3):
        super().__init__()
        self.a = nn.Linear(2, hidden)
        self.b = nn.Linear(hidden, 1)


class NotATensor:  # a class torch.load(weights_only=True) must refuse to build
    pass


CONFIG = {"model": {"name": "lstm"}, "task": {"name": "copy"}}


def _save(path, model, step):
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9)
    model.b(model.a(torch.ones(4, 2))).sum().backward()
    opt.step()  # so the optimizer state holds tensors
    save_checkpoint(
        path,
        model,
        {"step": step, "config": CONFIG},
        {
            "step": step,
            "optimizer": opt.state_dict(),
            "rng": torch.get_rng_state(),
            "best": None,
            "elapsed": 1.5,
        },
    )


def test_round_trip(tmp_path):
    model = Tiny()
    _save(tmp_path / "ck", model, 7)
    fresh = Tiny()
    meta, state = load_checkpoint(tmp_path / "ck", fresh)
    assert meta == {"step": 7, "config": CONFIG}
    assert state["step"] == 7 and state["best"] is None and state["elapsed"] == 1.5
    assert state["rng"].dtype == torch.uint8 and set(state["optimizer"]["state"]) == {0, 1, 2, 3}
    for (k, v), (k2, v2) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no temp dirs left


def test_replace_and_failed_save_keeps_old(tmp_path, monkeypatch):
    model = Tiny()
    _save(tmp_path / "ck", model, 1)
    _save(tmp_path / "ck", model, 2)  # replacing works
    assert load_checkpoint(tmp_path / "ck")[0]["step"] == 2

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        _save(tmp_path / "ck", Tiny(), 3)
    monkeypatch.undo()
    fresh = Tiny()
    assert load_checkpoint(tmp_path / "ck", fresh)[0]["step"] == 2
    assert torch.equal(fresh.a.weight, model.a.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_crash_between_renames_recovers_old_copy(tmp_path):
    _save(tmp_path / "ck", Tiny(), 5)
    (tmp_path / "ck").rename(tmp_path / ".ck.old")  # as if the process died mid-swap
    assert load_checkpoint(tmp_path / "ck")[0]["step"] == 5
    _save(tmp_path / "ck", Tiny(), 6)  # the next save completes the swap and cleans up
    assert load_checkpoint(tmp_path / "ck")[0]["step"] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_missing_directory_and_file(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nothing")
    _save(tmp_path / "ck", Tiny(), 1)
    (tmp_path / "ck" / "meta.json").unlink()
    with pytest.raises(CheckpointError, match="meta.json is missing"):
        load_checkpoint(tmp_path / "ck")


@pytest.mark.parametrize(
    "name, match",
    [
        ("weights.safetensors", "weights.safetensors is truncated"),
        ("train_state.pt", "train_state.pt is truncated"),
        ("meta.json", "meta.json is truncated"),
    ],
)
def test_truncated_files(tmp_path, name, match):
    _save(tmp_path / "ck", Tiny(), 1)
    path = tmp_path / "ck" / name
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(CheckpointError, match=f"{name} does not match its SHA-256"):
        load_checkpoint(tmp_path / "ck", Tiny())
    (tmp_path / "ck" / checkpoint.SUMS).unlink()
    with pytest.raises(CheckpointError, match="sha256.json is missing"):
        load_checkpoint(tmp_path / "ck", Tiny())
    checkpoint.seal_checkpoint(tmp_path / "ck")  # as a trusted checkpoint from before the sums
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(tmp_path / "ck", Tiny())


def test_a_flipped_bit_in_the_weights_is_caught(tmp_path):
    model = Tiny()
    _save(tmp_path / "ck", model, 1)
    path = tmp_path / "ck" / "weights.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x10  # the last byte of the last tensor: still a valid safetensors file
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="weights.safetensors does not match its SHA-256"):
        load_checkpoint(tmp_path / "ck", Tiny())
    (tmp_path / "ck" / checkpoint.SUMS).unlink()  # deleting the sums does not turn the check off
    with pytest.raises(CheckpointError, match=r"sha256.json is missing.*seal_checkpoint"):
        load_checkpoint(tmp_path / "ck", Tiny())


def test_weights_that_do_not_match(tmp_path):
    _save(tmp_path / "ck", Tiny(hidden=3), 1)
    with pytest.raises(
        CheckpointError, match=r"shape mismatch a.weight: checkpoint \(3, 2\) vs model \(5, 2\)"
    ):
        load_checkpoint(tmp_path / "ck", Tiny(hidden=5))
    with pytest.raises(CheckpointError, match="unexpected keys a.bias, a.weight, b.bias, b.weight"):
        load_checkpoint(tmp_path / "ck", nn.Sequential())
    other = nn.Module()
    other.a, other.b, other.c = Tiny().a, Tiny().b, nn.Linear(1, 1)
    with pytest.raises(CheckpointError, match="missing keys c.bias, c.weight"):
        load_checkpoint(tmp_path / "ck", other)


def test_train_state_is_loaded_with_weights_only(tmp_path, monkeypatch):
    _save(tmp_path / "ck", Tiny(), 1)
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "load", spy)
    load_checkpoint(tmp_path / "ck")
    assert calls == [True]
    monkeypatch.undo()
    # a pickle with an arbitrary class is refused, not executed (even with sums that match it)
    (tmp_path / "ck" / checkpoint.SUMS).unlink()
    torch.save({"step": 1, "evil": NotATensor()}, tmp_path / "ck" / "train_state.pt")
    checkpoint.seal_checkpoint(tmp_path / "ck")
    with pytest.raises(
        CheckpointError, match="train_state.pt holds pickled objects other than tensors"
    ) as caught:
        load_checkpoint(tmp_path / "ck")
    assert "weights_only=False" not in str(caught.value)  # torch's advice to run the pickled code


def test_meta_is_json(tmp_path):
    _save(tmp_path / "ck", Tiny(), 3)
    assert json.loads((tmp_path / "ck" / "meta.json").read_text())["step"] == 3


def test_sums_are_mandatory(tmp_path):
    """A checkpoint without sha256.json, or whose sums leave a file out, is refused by every
    reader: load_checkpoint (resume), load_run (eval) and mannlab.load; sealing is once only."""
    _save(tmp_path / "ck", Tiny(), 1)
    assert set(json.loads((tmp_path / "ck" / checkpoint.SUMS).read_text())) == set(checkpoint.FILES)
    sums = json.loads((tmp_path / "ck" / checkpoint.SUMS).read_text())
    del sums["weights.safetensors"]
    (tmp_path / "ck" / checkpoint.SUMS).write_text(json.dumps(sums))
    with pytest.raises(CheckpointError, match="has no sum for weights.safetensors"):
        load_checkpoint(tmp_path / "ck", Tiny())
    with pytest.raises(CheckpointError, match="exists already"):
        checkpoint.seal_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / checkpoint.SUMS).write_text("[]")
    with pytest.raises(CheckpointError, match="has no sum"):
        load_checkpoint(tmp_path / "ck", Tiny())
