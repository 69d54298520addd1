"""A model written by mannlab.save, changed afterwards with its sums recomputed (so only the
checks of what the files say can catch it): each change is refused in one CheckpointError
line naming the file and what is wrong, never loaded as a different model."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

import mannlab
from mannlab.errors import CheckpointError, ConfigError
from mannlab.rundir.safetensors_file import MAX_METADATA_BYTES
from mannlab.rundir.sums import sha256


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = mannlab.NTM(3, 2, controller="fnn", controller_size=4, memory_slots=3, memory_width=2)
    return mannlab.save(model, tmp_path / "m")


def reseal(directory):
    sums = {name: sha256(directory / name) for name in ("config.json", "model.safetensors")}
    (directory / "sha256.json").write_text(json.dumps(sums))


def change_weights(directory, change, metadata=None):
    weights = load_file(str(directory / "model.safetensors"))
    change(weights)
    save_file(weights, str(directory / "model.safetensors"), metadata=metadata)
    reseal(directory)


def change_config(directory, change):
    config = json.loads((directory / "config.json").read_text())
    change(config)
    (directory / "config.json").write_text(json.dumps(config))
    reseal(directory)


def retype_header(directory, name, dtype):
    """The header's dtype of tensor ``name`` changed, its bytes kept (same size: F32 -> I32)."""
    data = (directory / "model.safetensors").read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    header[name]["dtype"] = dtype
    text = json.dumps(header, separators=(",", ":")).encode().ljust(length)
    assert len(text) == length
    (directory / "model.safetensors").write_bytes(data[:8] + text + data[8 + length :])
    reseal(directory)


def first_name(directory):
    return sorted(load_file(str(directory / "model.safetensors")))[0]


def load_error(directory):
    with pytest.raises(CheckpointError) as caught:
        mannlab.load(directory)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_a_header_that_reinterprets_the_bytes_as_another_dtype_is_refused(saved):
    name = first_name(saved)
    retype_header(saved, name, "I32")
    assert f"dtype mismatch {name}: checkpoint int32 vs model float32" in load_error(saved)


def test_weights_of_another_dtype_are_refused(saved):
    name = first_name(saved)
    change_weights(saved, lambda w: w.update({name: w[name].double()}))
    assert f"{name}: checkpoint float64 vs model float32" in load_error(saved)


def test_non_finite_weights_are_refused_naming_the_tensor(saved):
    name = first_name(saved)
    change_weights(saved, lambda w: w[name].view(-1).__setitem__(0, float("nan")))
    assert f"non-finite weights (NaN or infinity in {name})" in load_error(saved)


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda c: c.update(run=5), "its run must be a run config"),
        (lambda c: c["model"].update(name=5), "model.name must be a string, got 5"),
        (lambda c: c["model"].update(name=["ntm"]), "model.name must be a string"),
        (lambda c: c["model"].update(args=[1]), "model.args must be a JSON object"),
        (lambda c: c.update(model="ntm"), "its model must be"),
        (lambda c: c["model"]["args"].update(memory_slots="many"), "does not build a model"),
        (
            lambda c: c.update(run={"model": {"name": "lstm"}, "task": {"name": "copy"}}),
            "its model is 'ntm' but its run config's is 'lstm'",
        ),
        (lambda c: c.update(run={"model": {"name": 5}, "task": {"name": "copy"}}), "run config is not valid"),
        (lambda c: c.update(run={"seed": "x", "model": {"name": "ntm"}, "task": {"name": "copy"}}), "seed"),
        (lambda c: c.clear() or c.update(format="mannlab-model", version=1), "names neither a model"),
    ],
)
def test_config_fields_of_the_wrong_kind_are_refused(saved, change, expected):
    change_config(saved, change)
    assert expected in load_error(saved)


def test_a_model_and_a_run_config_that_disagree_in_an_argument_are_refused(saved):
    run = {"model": {"name": "ntm", "memory_slots": 9}, "task": {"name": "copy"}}
    change_config(saved, lambda c: c.update(run=run))
    assert "differ in memory_slots" in load_error(saved)


def test_upper_case_sums_are_sums(saved):
    sums = json.loads((saved / "sha256.json").read_text())
    (saved / "sha256.json").write_text(json.dumps({k: v.upper() for k, v in sums.items()}))
    assert not mannlab.load(saved).training
    (saved / "sha256.json").write_text(json.dumps({k: "xyz" for k in sums}))
    assert "is not a SHA-256" in load_error(saved)


def test_a_huge_metadata_string_is_refused_before_it_is_parsed(saved):
    change_weights(saved, lambda w: None, metadata={"format": "pt", "note": "x" * (MAX_METADATA_BYTES + 1)})
    assert "__metadata__ is larger than" in load_error(saved)
    data = (saved / "model.safetensors").read_bytes()
    (saved / "model.safetensors").write_bytes((1 << 40).to_bytes(8, "little") + data[8:])
    reseal(saved)
    assert "header claims 1,099,511,627,776 bytes" in load_error(saved)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
@pytest.mark.parametrize(
    "kind, said",
    [
        ("fifo", "is a FIFO"),
        ("loop", "is a symbolic link loop"),
        ("directory", "is a directory"),
        ("device", "is a device"),
    ],
)
def test_a_special_file_is_named_as_what_it_is(saved, name, kind, said):
    path = saved / name
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "loop":
        path.symlink_to(name)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    message = load_error(saved)
    assert name in message and said in message and "config.toml" not in message


@pytest.mark.parametrize(
    "device, expected",
    [("banana", "device must be 'cpu', 'cuda'"), ("cuda:7", "device 'cuda:7'"), (5, "device must be")],
)
def test_a_device_this_machine_lacks_is_one_line(saved, device, expected):
    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(ConfigError, match=expected):
        mannlab.load(saved, device=device)
