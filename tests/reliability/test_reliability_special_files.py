"""Special files in place of a config or a data file: a FIFO (which would block a read
forever), a device (/dev/zero never ends), a directory, and a config too large to be one, are
each refused at once with a message saying what was expected. A UTF-8 BOM is not an error."""

import os
from pathlib import Path

import pytest

from fuzzing import no_hang
from mannlab.config import MAX_CONFIG_BYTES, load_config, read_toml
from mannlab.errors import ConfigError, DataError
from mannlab.tasks.charlm import load_corpus

CONFIG = '[model]\nname = "lstm"\n[task]\nname = "copy"\n'


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def test_a_fifo_config_is_refused_without_waiting(fifo):
    with no_hang(20), pytest.raises(ConfigError, match="is a FIFO, not a regular file"):
        read_toml(fifo)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_config_is_refused_unread(device):
    if not Path(device).exists():
        pytest.skip(f"no {device} here")
    with no_hang(20), pytest.raises(ConfigError, match="is a device, not a regular file"):
        read_toml(device)


def test_directories_and_oversized_configs(tmp_path):
    with pytest.raises(ConfigError, match="is a directory; expected a TOML file"):
        read_toml(tmp_path)
    big = tmp_path / "big.toml"
    big.write_text(CONFIG + "#" * MAX_CONFIG_BYTES)
    with pytest.raises(ConfigError, match="is larger than 1,048,576 bytes"):
        read_toml(big)
    with pytest.raises(FileNotFoundError, match="config file not found"):
        read_toml(tmp_path / "missing.toml")


def test_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + ("seed = 3\n" + CONFIG).encode())
    assert load_config(path).seed == 3


def test_a_fifo_data_file_is_refused_without_waiting(tmp_path):
    ptb = tmp_path / "ptb"
    ptb.mkdir()
    os.mkfifo(ptb / "ptb.train.txt")
    for split in ("valid", "test"):
        (ptb / f"ptb.{split}.txt").write_text(" a b \n")
    with no_hang(30), pytest.raises(DataError, match="ptb.train.txt is a FIFO, not a regular file"):
        load_corpus("ptb-char", source=ptb)
