"""The README's Python snippet, and the "Your own training loop" and "Lightning" snippets of
docs/python.md, run as written (fewer steps)."""

import importlib.util
import re
from pathlib import Path

import pytest

from mannlab.ops import use_kernels

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PYTHON_PAGE = ROOT / "docs" / "python.md"


def snippet(heading, page=PYTHON_PAGE):
    """The first python block after ``heading`` in ``page``."""
    text = page.read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text[text.index(heading) :], re.DOTALL).group(1)


def test_readme_snippet_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # it writes copy.png
    namespace = {}
    with use_kernels(False):
        exec(snippet("## Use it from Python", README), namespace)
    assert (tmp_path / "copy.png").is_file() and namespace["loss"].isfinite()


def test_own_loop_snippet_runs():
    code = snippet("## Your own training loop").replace("range(1000)", "range(2)")
    namespace = {}
    with use_kernels(False):
        exec(code, namespace)
    assert namespace["step"] == 1 and namespace["loss"].isfinite()


@pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None,
    reason="lightning is not installed: pip install 'mannlab[lightning]'",
)
def test_lightning_snippet_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # lightning_logs/ and checkpoints land here
    code = snippet("## Lightning").replace(
        "max_steps=5000, val_check_interval=500",
        "max_steps=2, val_check_interval=1, enable_progress_bar=False",
    )
    assert "max_steps=2" in code
    namespace = {}
    with use_kernels(False):
        exec(code, namespace)
    assert namespace["trainer"].global_step == 2
    # the snippet reloads the best checkpoint and saves its model: both ran
    assert isinstance(namespace["module"], namespace["MannModule"])
    assert (tmp_path / "my-ntm").is_dir()
