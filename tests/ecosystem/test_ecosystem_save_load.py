"""mannlab.save / mannlab.load for any model: config, safetensors weights and SHA-256 sums in
a directory; the same outputs back, on the CPU unless device= says otherwise, in the saved
dtype; damaged files are errors."""

import json

import pytest
import torch

import mannlab
from mannlab.config import RunConfig
from mannlab.errors import CheckpointError
from mannlab.models import MODELS
from mannlab.ops import use_kernels
from mannlab.wrappers import model_for_task

SMALL = {
    "ntm": {"controller_size": 8, "memory_slots": 6, "memory_width": 4, "controller": "fnn"},
    "dnc": {"controller_size": 8, "memory_slots": 6, "memory_width": 4},
    "dntm": {"controller_size": 8, "memory_slots": 6, "addressing": "soft"},
    "lstm": {"hidden_size": 8},
    "gru": {"hidden_size": 8},
    "tardis": {"hidden_size": 8, "memory_slots": 6},
    "armin": {"hidden_size": 8, "memory_slots": 6},
}


def same_outputs(a, b, x):
    a.eval(), b.eval()
    with torch.no_grad(), use_kernels(False):
        return torch.equal(a(x)[0], b(x)[0])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_comes_back_the_same(tmp_path, name):
    assert set(SMALL) == set(MODELS)
    torch.manual_seed(0)
    model = mannlab.build_model(name, 5, 3, **SMALL[name])
    mannlab.save(model, tmp_path / name)
    assert sorted(p.name for p in (tmp_path / name).iterdir()) == [
        "config.json",
        "model.safetensors",
        "sha256.json",
    ]
    loaded = mannlab.load(tmp_path / name)
    assert type(loaded) is type(model) and not loaded.training
    assert next(loaded.parameters()).device == torch.device("cpu")
    assert same_outputs(model, loaded, torch.rand(2, 4, 5))


def test_a_model_built_directly_keeps_its_arguments_through_copies(tmp_path):
    import copy
    import pickle

    model = mannlab.NTM(4, 2, controller="gru", controller_size=6, memory_slots=5, memory_width=3)
    expected = {
        "input_size": 4,
        "output_size": 2,
        "controller": "gru",
        "controller_size": 6,
        "memory_slots": 5,
        "memory_width": 3,
    }
    assert model.constructor_args == expected
    assert copy.deepcopy(model).constructor_args == expected
    assert pickle.loads(pickle.dumps(model)).constructor_args == expected
    mannlab.save(model, tmp_path / "ntm")
    assert json.loads((tmp_path / "ntm" / "config.json").read_text())["model"] == {
        "name": "ntm",
        "args": expected,
    }


def test_dtype_and_device(tmp_path):
    model = mannlab.LSTM(3, 2, hidden_size=4).double()
    mannlab.save(model, tmp_path / "m")
    assert next(mannlab.load(tmp_path / "m").parameters()).dtype == torch.float64
    on_meta = mannlab.load(tmp_path / "m", device="meta")  # any device torch knows
    assert all(p.device.type == "meta" for p in on_meta.parameters())
    assert next(mannlab.load(tmp_path / "m", device=torch.device("cpu")).parameters()).is_cpu


def test_a_model_behind_a_task_adapter_is_rebuilt_from_its_run_config(tmp_path):
    task_args = {"train_videos": 2, "valid_videos": 1, "test_videos": 1, "video_steps": 128}
    task = mannlab.tasks.make("proposals-synthetic", **task_args)
    model = model_for_task(task, "gru", hidden_size=8)
    with pytest.raises(TypeError, match="registered model"):
        mannlab.save(model, tmp_path / "sst")  # an adapter keeps no arguments of its own
    model.config = RunConfig(
        model="gru", task="proposals-synthetic", model_args={"hidden_size": 8}, task_args=task_args
    )
    mannlab.save(model, tmp_path / "sst")
    loaded = mannlab.load(tmp_path / "sst")
    assert loaded.config.model_args == {"hidden_size": 8} and loaded.config.run_dir is None
    assert same_outputs(model, loaded, torch.rand(1, 6, task.input_size))


def test_damaged_or_foreign_files_are_errors(tmp_path):
    mannlab.save(mannlab.GRU(3, 2, hidden_size=4), tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256") as error:
        mannlab.load(tmp_path / "m")
    assert "--resume" not in str(error.value)
    (tmp_path / "m" / "sha256.json").unlink()
    with pytest.raises(CheckpointError, match="sha256.json is missing"):
        mannlab.load(tmp_path / "m")
    with pytest.raises(TypeError, match="Linear is neither"):
        mannlab.save(torch.nn.Linear(2, 2), tmp_path / "linear")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        mannlab.save(mannlab.GRU(3, 2), tmp_path / "file")
