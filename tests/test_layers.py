"""The package's layering (pyproject.toml, [tool.importlinter]): every module imports only
the layers below it, and models never reach up into training, tasks or the CLI."""

import ast
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


def _imports_torch_distributed(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.startswith("torch.distributed") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("torch.distributed"):
                return True
            if node.module == "torch" and any(a.name == "distributed" for a in node.names):
                return True
    return False


def test_only_training_talks_to_other_processes():
    """Collectives are the trainer's: the layers below it compute on the tensors they are given
    (a model's batch statistics take the trainer's reducer). import-linter cannot forbid a
    subpackage of torch, so this reads the imports."""
    package = ROOT / "src" / "mannlab"
    found = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if package / "training" not in path.parents and _imports_torch_distributed(path)
    ]
    assert found == []
