"""The public API as a type checker sees it: pyright (in the test extra) reads a user's script
and finds mannlab.load, mannlab.save and mannlab.plot (loaded lazily at run time) callable with
their real signatures, not `Any | ModuleType`."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

USER_SCRIPT = """
from pathlib import Path
from typing import assert_type

import torch

import mannlab

model = mannlab.load("runs/ntm-copy-seed0", device="cpu")
assert_type(model, torch.nn.Module)
assert_type(mannlab.save(model, "my-ntm"), Path)
mannlab.plot.memory_access
mannlab.training.train
assert_type(mannlab.NTM(9, 8), mannlab.NTM)
assert_type(mannlab.tasks.names(), list[str])
mannlab.load("x", devise="cpu")  # pyright: ignore[reportCallIssue] -- a typo must be an error
"""


@pytest.mark.skipif(shutil.which("pyright") is None, reason="pyright is in the test extra")
def test_pyright_sees_the_public_api_typed(tmp_path):
    (tmp_path / "user.py").write_text(textwrap.dedent(USER_SCRIPT))
    config = {
        "extraPaths": [str(SRC)],
        "pythonVersion": f"{sys.version_info.major}.{sys.version_info.minor}",
        "typeCheckingMode": "standard",
        "reportUnnecessaryTypeIgnoreComment": "error",  # the typo above must stay an error
    }
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    done = subprocess.run(
        ["pyright", "--pythonpath", sys.executable, "user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
