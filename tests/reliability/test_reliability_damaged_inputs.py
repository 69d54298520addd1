"""Damaged inputs that used to end in an internal error or pass silently: a bAbI file with
facts and no questions, a NUL byte inside a bAbI line or a PTB text, a config nested
thousands of tables deep. Each is one line naming the file (and the line) and what is wrong."""

import pytest

from data_files import QA1, write_archive, write_ptb_words
from mannlab.config import read_toml
from mannlab.data import babi
from mannlab.errors import ConfigError, DataError
from mannlab.tasks.charlm import load_corpus

FACTS_ONLY = "1 Mary moved to the bathroom.\n2 John went to the hallway.\n"


def test_a_babi_file_without_questions(tmp_path):
    archive = write_archive(tmp_path / "a.tar.gz", tasks_text={1: ("single-supporting-fact", FACTS_ONLY)})
    with pytest.raises(DataError, match=r"qa1_single-supporting-fact_train\.txt: no questions"):
        babi.load_babi([1], "en-10k", str(archive))


def test_a_nul_byte_in_a_babi_line(tmp_path):
    damaged = QA1.replace("John went", "John\x00went")
    archive = write_archive(tmp_path / "a.tar.gz", tasks_text={1: ("single-supporting-fact", damaged)})
    with pytest.raises(DataError, match=r"_train\.txt, line 2: a NUL byte"):
        babi.load_babi([1], "en-10k", str(archive))


def test_a_nul_byte_in_the_ptb_training_text(tmp_path):
    folder = write_ptb_words(tmp_path / "ptb")
    (folder / "ptb.train.txt").write_text(" the cat sat \n on the\x00mat \n")
    with pytest.raises(DataError, match=r"ptb\.train\.txt, line 2: a NUL byte"):
        load_corpus("ptb-char", folder)


@pytest.mark.parametrize(
    "deep",
    [
        "[" + ".".join(["a"] * 10_000) + "]\nx = 1\n",  # headers parse; copying the table recursed
        "x = " + "{a = " * 10_000 + "1" + "}" * 10_000 + "\n",  # the parser itself recursed
        "x = " + "[" * 10_000 + "]" * 10_000 + "\n",
    ],
    ids=["headers", "inline-tables", "arrays"],
)
def test_a_config_nested_too_deep(tmp_path, deep):
    path = tmp_path / "deep.toml"
    path.write_text('model = "lstm"\ntask = "copy"\n' + deep)
    with pytest.raises(ConfigError, match="deep.toml is too deeply nested"):
        read_toml(path)


def test_a_recipe_nests_a_few_levels(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text('[model]\nname = "ntm"\n[train]\nlr = 1e-3\n[a.b.c]\nd = [[1, 2], [3]]\n')
    assert read_toml(path)["a"]["b"]["c"]["d"] == [[1, 2], [3]]
