"""The command line as a stranger meets it: a closed pipe ends quietly, mistyped commands and
options get close matches, recipes are described whole, eval prints JSON for any task,
report does not write into a run directory, and a precision this machine lacks is refused
before anything is said or written."""

import json
import subprocess
import sys

import pytest
import torch

from conftest import tiny_ntm_args
from mannlab.cli import main


def test_a_closed_pipe_ends_quietly():
    listing = subprocess.Popen(
        [sys.executable, "-m", "mannlab", "recipes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    listing.stdout.close()  # the reader is gone before the first line, as `| head -0`
    error = listing.stderr.read().decode()
    assert listing.wait() == 141, error  # 128 + SIGPIPE, as Unix tools end
    assert error == ""


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["trian"], "did you mean train?"),
        (["train", "--modle", "ntm"], "--modle: did you mean --model?"),
        (["eval", "run", "--lenghts", "3"], "did you mean --lengths?"),
        (["simulate", "wormhol"], "did you mean wormhole?"),
    ],
)
def test_mistyped_commands_and_options_get_close_matches(capsys, argv, hint):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert hint in capsys.readouterr().err


def test_recipes_are_described_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["recipes"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("table2/dnc-copy ")]
    assert len(lines) == 1 and "(Toy tasks): DNC on copy (output a_1 .. a_T)." in lines[0]


def test_eval_json_report_and_precision(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *tiny_ntm_args(val_every=2), "--steps", "2", "--run-dir", "run"]) == 0
    capsys.readouterr()
    assert main(["eval", "run", "--json", "--lengths", "3,6", "--batches", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "lengths" and [row["length"] for row in result["rows"]] == [3, 6]

    assert main(["report", "run"]) == 0
    assert "printed only" in capsys.readouterr().out
    assert not (tmp_path / "run" / "report.md").exists()  # a run directory keeps what training wrote

    if torch.cuda.is_available():
        return  # 16-mixed is refused where there is no CUDA device
    with pytest.raises(SystemExit) as stopped:
        main(["train", *tiny_ntm_args(), "--steps", "1", "--run-dir", "half", "--precision", "16-mixed"])
    assert stopped.value.code == 2
    said = capsys.readouterr()
    assert "16-mixed' needs a CUDA device" in said.err and "training" not in said.out
    assert not (tmp_path / "half").exists()
