"""RunConfig / TrainConfig: TOML round trip, overrides, and errors that name the valid keys."""

import pytest

from mannlab.building import build_run
from mannlab.config import (
    DEFAULTS,
    RunConfig,
    TrainConfig,
    apply_overrides,
    default_config_dict,
    default_run_dir,
    load_config,
    parse_override,
)
from mannlab.errors import ConfigError
from mannlab.rundir import save_config

RECIPE = """
seed = 4
seeds = [4, 5]
run_dir = "runs/x"

[model]
name = "ntm"
controller = "fnn"
memory_slots = 16

[task]
name = "copy"
max_length = 5

[train]
lr = 3e-4
batch_size = 8
val_length_multiples = [1, 3]
stop_after_solve = 100
"""


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "recipe.toml"
    path.write_text(RECIPE)
    return path


def test_load_recipe(recipe):
    config = load_config(recipe)
    assert (config.model, config.task, config.seed, config.seeds) == ("ntm", "copy", 4, (4, 5))
    assert config.model_args == {"controller": "fnn", "memory_slots": 16}
    assert config.task_args == {"max_length": 5}
    assert config.train.lr == 3e-4 and config.train.batch_size == 8
    assert config.train.val_length_multiples == (1, 3)
    assert config.train.optimizer == "rmsprop"  # default kept


def test_toml_round_trip(recipe, tmp_path):
    config = load_config(recipe)
    save_config(config, tmp_path / "config.toml")
    assert load_config(tmp_path / "config.toml") == config
    # None values are left out of the file (TOML has no null) and come back as None
    plain = RunConfig(model="lstm", task="copy", train=TrainConfig(clip_grad_norm=None))
    assert plain.train.clip_grad_norm == 0.0  # "off" has one spelling
    save_config(plain, tmp_path / "plain.toml")
    text = (tmp_path / "plain.toml").read_text()
    assert "stop_after_solve" not in text and "run_dir" not in text
    assert load_config(tmp_path / "plain.toml") == plain


def test_overrides(recipe):
    config = load_config(
        recipe,
        [
            "model.controller=lstm",
            "train.lr=1e-3",
            "task.max_length=10",
            "seed=3",
            "train.stop_after_solve=none",
            "train.tensorboard=true",
            "train.val_length_multiples=[1, 2]",
        ],
    )
    assert config.model_args["controller"] == "lstm"
    assert config.train.lr == 1e-3 and config.task_args["max_length"] == 10 and config.seed == 3
    assert config.train.stop_after_solve is None and config.train.tensorboard is True
    assert config.train.val_length_multiples == (1, 2)
    assert config.with_overrides(["train.steps=7"]).train.steps == 7


def test_parse_override_values():
    assert parse_override("train.lr=3e-4") == (["train", "lr"], 3e-4)
    assert parse_override("model.controller=fnn") == (["model", "controller"], "fnn")
    assert parse_override("run_dir=runs/a b") == (["run_dir"], "runs/a b")
    assert parse_override('task.name="copy"') == (["task", "name"], "copy")
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("train.lr")
    with pytest.raises(ConfigError, match="section.key"):
        parse_override("a.b.c=1")


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lrr=1", "train.lrr.*valid keys: optimizer, lr"),
        ("optim.lr=1", "unknown section 'optim'.*model, task, train"),
        ("sed=1", "unknown key 'sed'.*seed, seeds"),
        ("train=1", "is a section"),
    ],
)
def test_unknown_keys_name_the_valid_ones(recipe, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(recipe, [override])


def test_unknown_section_in_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[model]\nname = "ntm"\n[task]\nname = "copy"\n[optimiser]\nlr = 1\n')
    with pytest.raises(ConfigError, match="'optimiser'.*valid keys"):
        load_config(path)


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=fast", "train.lr must be a float"),
        ("train.steps=1.5", "train.steps must be a int"),
        ("train.progress=1", "train.progress must be a bool"),
        ("train.optimizer=sgd", "rmsprop, adam"),
        ("train.val_length_multiples=[2, 4]", "including 1"),
        ("train.batch_size=0", "batch_size must be >= 1"),
        ("seed=x", "seed must be a int"),
    ],
)
def test_bad_values(recipe, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(recipe, [override])


def test_missing_name_and_bad_toml(tmp_path):
    path = tmp_path / "noname.toml"
    path.write_text("[model]\nmemory_slots = 3\n[task]\nname = 'copy'\n")
    with pytest.raises(ConfigError, match=r"\[model\] needs a 'name'.*lstm, ntm"):
        load_config(path)
    path.write_text("[model\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)
    with pytest.raises(FileNotFoundError, match="config file not found"):
        load_config(tmp_path / "missing.toml")


def test_build_validates_model_and_task_arguments():
    with pytest.raises(ConfigError, match="controler.*valid options"):
        build_run(RunConfig(model="ntm", task="copy", model_args={"controler": "fnn"}))
    with pytest.raises(ConfigError, match="max_lenght.*valid parameters"):
        build_run(RunConfig(model="ntm", task="copy", task_args={"max_lenght": 3}))
    with pytest.raises(ConfigError, match="valid models: .*lstm, ntm"):
        build_run(RunConfig(model="nmt", task="copy"))
    task, model = build_run(
        RunConfig(model="lstm", task="copy", model_args={"hidden_size": 4}, task_args={"width": 3})
    )
    assert model.input_size == task.input_size == 4


def test_defaults_table_and_run_dir():
    d = default_config_dict("ntm", "copy")
    assert d["model"]["name"] == "ntm" and d["task"]["name"] == "copy"
    assert d["train"]["batch_size"] == DEFAULTS[("*", "*")]["train"]["batch_size"]
    config = RunConfig.from_dict(d)
    assert default_run_dir(config.replace(seed=2)).replace("\\", "/") == "runs/ntm-copy-seed2"
    # the table is never mutated by building a config from it
    apply_overrides(d, ["train.batch_size=99"])
    assert default_config_dict("ntm", "copy")["train"]["batch_size"] != 99
