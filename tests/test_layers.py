"""The package's layering (pyproject.toml, [tool.importlinter]): every module imports only
the layers below it, and models never reach up into training, tasks or the CLI."""

import os
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(monkeypatch):
    monkeypatch.chdir(ROOT)  # the contracts live in the project's pyproject.toml
    assert os.path.isfile("pyproject.toml")
    assert lint_imports(no_cache=True) == 0
