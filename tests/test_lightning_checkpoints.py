"""MannModule.load_from_checkpoint on files that are not what they should be: each is refused
in one CheckpointError line naming the file and the problem, a FIFO is not waited on, and a
pickled payload never runs, also where torch.load's default is weights_only=False (PyTorch
before 2.6, simulated here by forcing that default). Lightning is optional: these skip
without it."""

import copy
import importlib.util
import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from mannlab import tasks
from mannlab.errors import CheckpointError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None,
    reason="lightning is not installed: pip install 'mannlab[lightning]'",
)


class Payload:
    """What a crafted checkpoint pickles: unpickling it creates the file ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def saved(tmp_path):
    """(a tiny MannModule, the checkpoint dict a Trainer would save of it)."""
    import lightning as L

    from mannlab.lightning import MannModule

    torch.manual_seed(0)
    module = MannModule("lstm", tasks.make("copy", width=2, max_length=2), hidden_size=3)
    checkpoint = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "pytorch-lightning_version": L.__version__,
        "epoch": 0,
        "global_step": 1,
    }
    return module, checkpoint


def load(path, **kwargs):
    from mannlab.lightning import MannModule

    return MannModule.load_from_checkpoint(path, **kwargs)


def changed(checkpoint, change):
    out = copy.deepcopy(checkpoint)
    change(out)
    return out


def first(state):
    return next(iter(state))


CASES = {
    "empty": (lambda p, c: p.write_bytes(b""), "is empty"),
    "random bytes": (lambda p, c: p.write_bytes(os.urandom(300)), "not a checkpoint torch.save wrote"),
    "a plain pickle": (
        lambda p, c: p.write_bytes(pickle.dumps({"a": 1})),
        "not a checkpoint torch.save wrote",
    ),
    "safetensors": (lambda p, c: save_file({"a": torch.zeros(2)}, str(p)), "is a safetensors file"),
    "no state_dict": (lambda p, c: torch.save(changed(c, lambda x: x.pop("state_dict")), p), "no state_dict"),
    "no hyper_parameters": (
        lambda p, c: torch.save(changed(c, lambda x: x.pop("hyper_parameters")), p),
        "no hyper_parameters",
    ),
    "another model": (
        lambda p, c: torch.save(changed(c, lambda x: x["hyper_parameters"].update(model="ntm")), p),
        "do not build a MannModule|do not fit",
    ),
    "another size": (
        lambda p, c: torch.save(changed(c, lambda x: x["hyper_parameters"].update(hidden_size=5)), p),
        "shape mismatch",
    ),
    "a tensor of another shape": (
        lambda p, c: torch.save(
            changed(c, lambda x: x["state_dict"].update({first(x["state_dict"]): torch.zeros(7)})), p
        ),
        "shape mismatch",
    ),
    "a tensor of another dtype": (
        lambda p, c: torch.save(
            changed(c, lambda x: x["state_dict"].update({k: v.double() for k, v in x["state_dict"].items()})),
            p,
        ),
        "dtype mismatch .*float64 vs model float32",
    ),
    "NaN weights": (
        lambda p, c: torch.save(
            changed(c, lambda x: x["state_dict"][first(x["state_dict"])].fill_(float("nan"))), p
        ),
        "non-finite weights",
    ),
    "a learning rate that is text": (
        lambda p, c: torch.save(changed(c, lambda x: x["hyper_parameters"].update(lr="abc")), p),
        "train.lr must be a float",
    ),
    "a model that is a number": (
        lambda p, c: torch.save(changed(c, lambda x: x["hyper_parameters"].update(model=5)), p),
        "model must be",
    ),
    "a task that is a list": (
        lambda p, c: torch.save(changed(c, lambda x: x["hyper_parameters"].update(task=["copy"])), p),
        "task must be",
    ),
    "a FIFO": (lambda p, c: os.mkfifo(p), "is a FIFO"),
    "a directory": (lambda p, c: p.mkdir(), "is a directory"),
    "a loop of links": (lambda p, c: p.symlink_to(p.name), "symbolic link loop"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_that_is_not_a_mannmodule_checkpoint_is_refused_in_one_line(tmp_path, saved, case):
    make, expected = CASES[case]
    path = tmp_path / "model.ckpt"
    make(path, saved[1])
    with pytest.raises(CheckpointError, match=expected) as caught:
        load(path)
    message = str(caught.value)
    assert "\n" not in message and "model.ckpt" in message and "weights_only=False" not in message


def test_a_valid_checkpoint_loads_the_same_module(tmp_path, saved):
    module, checkpoint = saved
    torch.save(checkpoint, tmp_path / "model.ckpt")
    loaded = load(tmp_path / "model.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), module.state_dict().values()))
    with pytest.raises(ValueError, match="never unpickles code"):
        load(tmp_path / "model.ckpt", weights_only=False)


def test_a_pickled_payload_never_runs_even_where_torch_load_defaults_to_unpickling(
    tmp_path, saved, monkeypatch
):
    marker = tmp_path / "payload-ran"
    path = tmp_path / "model.ckpt"
    torch.save({**saved[1], "extra": Payload(marker)}, path)
    real_load = torch.load

    def old_default(*args, weights_only=False, **kwargs):  # torch.load before PyTorch 2.6
        return real_load(*args, weights_only=weights_only, **kwargs)

    monkeypatch.setattr(torch, "load", old_default)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    torch.load(path)  # the simulation has teeth: the old default runs the payload
    assert marker.exists()
    marker.unlink()
    with pytest.raises(CheckpointError, match="never unpickles code") as caught:
        load(path)
    assert not marker.exists() and "weights_only=False" not in str(caught.value)
    torch.save(saved[1], path)
    assert isinstance(load(path).model, torch.nn.Module)  # a clean checkpoint still loads
