"""The package's layering (pyproject.toml, [tool.importlinter]): every module imports only
the layers below it, and models never reach up into training, tasks or the CLI."""

import logging
import os
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(monkeypatch):
    monkeypatch.chdir(ROOT)  # the contracts live in the project's pyproject.toml
    assert os.path.isfile("pyproject.toml")
    # lint_imports configures logging with dictConfig, which disables every logger that exists
    # ("mannlab" too): give them back as they were, or later tests in this process hear nothing
    loggers = [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    disabled = [lg.disabled for lg in loggers]
    try:
        assert lint_imports(no_cache=True) == 0
    finally:
        for lg, was in zip(loggers, disabled):
            lg.disabled = was
    assert not logging.getLogger("mannlab").disabled
