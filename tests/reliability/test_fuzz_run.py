"""Fuzz corpus of the run-level surfaces: generated config files, command lines, damaged run
directories (checkpoints, config, metrics, summary) and model inputs.

Every case must succeed or end in a clear error of the project's own kinds (ConfigError,
CheckpointError, DataError, a missing file, a diverged run, argparse's usage error; for the
models' inputs TypeError or ValueError with a message): no other exception, no crash, no
hang, and nothing written outside the case's own directory. The commands run with --debug,
so an error that the CLI would only have turned into its one-line "unexpected" message
fails the case with its traceback.

At CI size each target runs MANNLAB_FUZZ_EXAMPLES cases (default 25, derandomized):

    MANNLAB_FUZZ_EXAMPLES=1000 pytest tests/reliability/test_fuzz_run.py -s -n 0     # prints the counts
"""

import collections
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import tomli_w
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import SMALL
from fuzzing import corrupt, files_under, fuzz_settings, no_hang
from mannlab.cli import USER_ERRORS, main
from mannlab.config import TrainConfig
from mannlab.models import build_model
from mannlab.training import DivergedError, loop

FUZZ = fuzz_settings(25, seconds=60)
COUNTS = collections.defaultdict(collections.Counter)  # target -> cases, ok, clear, other
CLEAR_RUN = (*USER_ERRORS, DivergedError)
MODEL_NAMES = sorted(SMALL)

# A tiny copy run: two steps, one small validation, a checkpoint at each.
TRAIN = {
    "steps": 2,
    "batch_size": 2,
    "val_every": 1,
    "val_batch_size": 2,
    "val_batches": 1,
    "val_length_multiples": [1],
    "checkpoint_every": 1,
    "progress": False,
}
TASK = {"name": "copy", "width": 2, "min_length": 1, "max_length": 2}


def tiny_config(model: str) -> dict:
    return {"seed": 0, "model": {"name": model, **SMALL[model]}, "task": dict(TASK), "train": dict(TRAIN)}


def tiny_argv(model: str) -> list[str]:
    sets = [f"model.{k}={v}" for k, v in SMALL[model].items()]
    sets += [f"task.{k}={v}" for k, v in TASK.items() if k != "name"]
    sets += [f"train.{k}={tomli_w.dumps({'v': v})[4:].strip()}" for k, v in TRAIN.items()]
    return ["--model", model, "--task", "copy", *[a for s in sets for a in ("--set", s)]]


# ------------------------------------------------------------------ values a user might type

HOSTILE_TEXT = [
    "",
    " ",
    "nan",
    "inf",
    "-inf",
    "1e999",
    "-1",
    "0",
    "99999999999999999999",
    "abc",
    "lstm",
    "copy",
    "cuda",
    "cuda:7",
    "mps",
    "16-mixed",
    "bf16-mixed",
    "tensorboard",
    "wandb",
    "csv,csv",
    "../outside",
    "/",
    "\x00",
    "é\u202e",
    "[",
    "x" * 300,
]
SCALARS = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([0, -1, 2**31, 2**63 - 1, -(2**63), 10**12]),
    st.floats(width=64),
    st.sampled_from([0.0, -0.0, 5e-324, 1e308, math.nan, math.inf, -math.inf]),
    st.booleans(),
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=12),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=4),
    st.dictionaries(st.text(max_size=6), SCALARS, max_size=3),
)


def known_keys(model: str) -> dict[str, list[str]]:
    return {
        "": ["seed", "seeds", "run_dir", "model", "task", "train", "extra"],
        "model": ["name", *SMALL[model], "controller", "batch_first", "fused", "unknown"],
        "task": ["name", "width", "min_length", "max_length", "data_dir", "unknown"],
        "train": [f.name for f in TrainConfig.__dataclass_fields__.values()] + ["unknown"],
    }


@st.composite
def config_case(draw):
    """A tiny run config with one to three entries set to hostile values or removed."""
    model = draw(st.sampled_from(MODEL_NAMES))
    values = tiny_config(model)
    keys = known_keys(model)
    for _ in range(draw(st.integers(1, 3))):
        section = draw(st.sampled_from(sorted(keys)))
        key = draw(st.sampled_from(keys[section]) | st.text(min_size=1, max_size=8))
        table = values if section == "" else values.setdefault(section, {})
        if not isinstance(table, dict):
            continue
        if draw(st.integers(0, 5)) == 0:
            table.pop(key, None)
        else:
            table[key] = draw(VALUES)
    return values


# ------------------------------------------------------------------ running a case


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The directory holding every case's directory; the counts are printed at the end."""
    root = tmp_path_factory.mktemp("fuzzrun")
    home = Path.home()
    cache = home / ".cache" / "mannlab"
    cache_before = cache.exists() and files_under(cache)
    yield root
    assert files_under(root) == set(), "a case left files behind"
    assert (cache.exists() and files_under(cache)) == cache_before, "a case wrote to the cache"
    total = collections.Counter()
    for target, counts in sorted(COUNTS.items()):
        total.update(counts)
        print(f"\nfuzz {target:<12} {dict(counts)}", end="")
    print(f"\nfuzz {'total':<12} {dict(total)}")


@pytest.fixture(autouse=True)
def quiet_runs(monkeypatch, offline):
    # offline: a data-set task fails at once instead of trying the network
    # the figures take seconds and are fuzzed by the plot cases instead
    monkeypatch.setattr(loop._Trainer, "_figures", lambda self: {})
    monkeypatch.setenv("MANNLAB_DATA", "data-dir-of-the-case")


def run_case(target, base, prepare, act, clear=CLEAR_RUN, seed_dir=None):
    """In a fresh directory (a copy of ``seed_dir`` if given) ``prepare()`` lays out the case
    and ``act()`` runs it: success or one of ``clear``, nothing else, and no file appears
    outside the directory."""
    counts = COUNTS[target]
    counts["cases"] += 1
    with tempfile.TemporaryDirectory(dir=base) as folder:
        folder = Path(folder)
        if seed_dir is not None:
            shutil.copytree(seed_dir, folder, dirs_exist_ok=True)
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            prepare()
            with no_hang(120):
                act()
            counts["ok"] += 1
        except SystemExit as exit_info:  # argparse: usage error, status 2
            counts["clear" if exit_info.code == 2 else "other"] += 1
            assert exit_info.code in (0, 2), f"exit status {exit_info.code}"
        except clear as error:
            assert str(error).strip(), f"{type(error).__name__} without a message"
            counts["clear"] += 1
        except BaseException:
            counts["other"] += 1
            raise
        finally:
            os.chdir(cwd)
        assert {p.parts[0] for p in files_under(base)} <= {folder.name}, "a case wrote outside its directory"


def command(argv):
    def act():
        status = main(["--debug", *argv])
        assert status in (0, 1, 2), status

    return act


# ------------------------------------------------------------------ targets


@FUZZ
@given(values=config_case())
def test_generated_configs(base, values):
    def prepare():
        Path("config.toml").write_text(tomli_w.dumps(values))

    run_case("config", base, prepare, command(["train", "--config", "config.toml", "--run-dir", "run"]))


FLAGS = {
    "--seed": st.sampled_from(HOSTILE_TEXT) | st.integers(-5, 5).map(str),
    "--steps": st.sampled_from(["-1", "0", "3", "nan", "1.5", "", "99999999999999999999999"]),
    "--batch-size": st.sampled_from(["-1", "0", "3", "nan", "", "x"]),
    "--lr": st.sampled_from(HOSTILE_TEXT + ["1e-3", "10.0", "10.5", "0"]),
    "--set": st.sampled_from(HOSTILE_TEXT)
    | st.builds(
        lambda section, key, value: f"{section}{key}={value}",
        st.sampled_from(["model.", "task.", "train.", "", "model.x.", "."]),
        st.sampled_from(["lr", "steps", "hidden_size", "width", "max_length", "name", "threads", "x", ""]),
        st.sampled_from(["0", "-1", "nan", "1e999", "[", "[1", '"a"', "{a=1}", "true", "2", "[[1]]"]),
    ),
    "--device": st.sampled_from(HOSTILE_TEXT + ["cpu", "auto"]),
    "--precision": st.sampled_from(HOSTILE_TEXT + ["32"]),
    "--logger": st.sampled_from(HOSTILE_TEXT + ["csv"]),
    "--data-dir": st.sampled_from(["", "missing", "run", "\x00", "x" * 300]),
    "--config": st.sampled_from(["", "missing.toml", "run", ".", "\x00"]),
    "--model": st.sampled_from(HOSTILE_TEXT + ["ntm", "dnc"]),
    "--task": st.sampled_from(HOSTILE_TEXT + ["babi", "ptb-char", "mnist", "repeat_copy"]),
    "--resume": st.none(),
    "--force": st.none(),
    "--bogus": st.none(),
}


@st.composite
def command_line(draw):
    """``train`` of a tiny run with one to four hostile options appended."""
    argv = ["train", *tiny_argv(draw(st.sampled_from(MODEL_NAMES))), "--steps", "2", "--run-dir", "run"]
    for _ in range(draw(st.integers(1, 4))):
        flag = draw(st.sampled_from(sorted(FLAGS)))
        value = draw(FLAGS[flag])
        argv += [flag] if value is None else [flag, value]
    return argv


@FUZZ
@given(argv=command_line())
def test_generated_command_lines(base, argv):
    run_case("command line", base, lambda: None, command(argv))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished tiny NTM run (its directory's parent holds nothing else)."""
    folder = tmp_path_factory.mktemp("finished")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        loop._Trainer._figures, saved = (lambda self: {}), loop._Trainer._figures
        assert main(["train", *tiny_argv("ntm"), "--run-dir", "run"]) == 0
    finally:
        loop._Trainer._figures = saved
        os.chdir(cwd)
    return folder


RUN_FILES = [
    "run/config.toml",
    "run/metrics.jsonl",
    "run/summary.json",
    "run/checkpoints/last/weights.safetensors",
    "run/checkpoints/last/meta.json",
    "run/checkpoints/last/train_state.pt",
    "run/checkpoints/best/weights.safetensors",
    "run/checkpoints/best/meta.json",
    "run/checkpoints/best/train_state.pt",
]
RUN_COMMANDS = [
    ["eval", "run", "--batches", "1", "--lengths", "2"],
    ["train", "--run-dir", "run", "--resume", "--steps", "3"],
    ["plot", "run", "--length", "2"],
    ["report", "."],
]


@FUZZ
@given(
    victims=st.lists(st.sampled_from(RUN_FILES), min_size=1, max_size=2, unique=True),
    argv=st.sampled_from(RUN_COMMANDS),
    data=st.data(),
)
def test_damaged_run_directories(base, finished_run, victims, argv, data):
    damage = {
        path: None
        if data.draw(st.integers(0, 7)) == 0
        else data.draw(corrupt((finished_run / path).read_bytes()))
        for path in victims
    }

    def prepare():
        for path, content in damage.items():
            if content is None:
                Path(path).unlink()
            else:
                Path(path).write_bytes(content)

    run_case("run files", base, prepare, command(argv), seed_dir=finished_run)


DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.bool,
    torch.complex64,
]


@st.composite
def model_input(draw):
    """A model and an input of hostile shape, dtype or values for it."""
    name = draw(st.sampled_from(MODEL_NAMES))
    shape = draw(
        st.sampled_from([(2, 3, 5), (1, 1, 5)])
        | st.lists(st.integers(0, 6), min_size=0, max_size=4).map(tuple)
    )
    dtype = draw(st.sampled_from(DTYPES))
    fill = draw(st.sampled_from(["rand", "nan", "inf", "huge", "zero"]))
    return name, shape, dtype, fill, draw(st.booleans()), draw(st.booleans())


def make_input(shape, dtype, fill, transpose):
    x = torch.rand(shape, dtype=torch.float64)
    if fill == "nan" and x.numel():
        x.view(-1)[0] = math.nan
    elif fill == "inf" and x.numel():
        x.view(-1)[-1] = math.inf
    elif fill == "huge":
        x = x * 1e30
    elif fill == "zero":
        x = torch.zeros(shape, dtype=torch.float64)
    x = x.to(dtype)
    return x.transpose(0, -1).contiguous().transpose(0, -1) if transpose and x.dim() > 1 else x


MODELS = {name: build_model(name, 5, 4, **SMALL[name]).double().eval() for name in MODEL_NAMES}


@FUZZ
@given(case=model_input())
def test_generated_model_inputs(base, case):
    name, shape, dtype, fill, transpose, one_step = case
    model = MODELS[name]
    x = make_input(shape, dtype, fill, transpose)

    def act():
        with torch.no_grad():
            if one_step and hasattr(model, "cell"):  # the LSTM has no one-step cell
                out, _ = model.cell(x)
            else:
                out, _ = model(x)
        assert torch.isfinite(out).all(), "a model returned non-finite output without an error"

    run_case("model input", base, lambda: None, act, clear=(TypeError, ValueError))
