"""The documentation site: docstrings read as Markdown (no raw Sphinx roles, aligned blocks
kept), the cells' kernel plumbing out of the API reference, and MathJax served from the site
itself so that the equations render offline."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def hooks():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location(
        "griffe_blocks", ROOT / "docs" / "hooks" / "griffe_blocks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sphinx_roles_become_code_spans():
    plain = hooks().plain_roles
    assert plain("an :class:`NTMTrace` stacked") == "an `NTMTrace` stacked"
    assert plain(":func:`run_sequence` and :meth:`~x.Y.z`") == "`run_sequence` and `x.Y.z`"


def test_indented_blocks_are_separated_but_sections_are_left_to_griffe():
    separate = hooks().separate_indented_blocks
    assert separate("Glossary\n    x  input") == "Glossary\n\n    x  input"
    assert separate("Args:\n    x (int): input.") == "Args:\n    x (int): input."


def test_mathjax_is_bundled_and_internal_methods_are_filtered():
    config = (ROOT / "mkdocs.yml").read_text()
    scripts = config.split("extra_javascript:", 1)[1].split("\n\n", 1)[0]
    assert "http" not in scripts  # nothing fetched from a CDN
    assert "javascripts/mathjax/tex-svg.js" in scripts
    bundled = ROOT / "docs" / "javascripts" / "mathjax" / "tex-svg.js"
    assert bundled.stat().st_size > 1_000_000 and (bundled.parent / "LICENSE").is_file()
    for internal in ("op_options", "op_weights", "run_op", "precompute"):
        assert internal in config.split("filters:", 1)[1].split("\n\n", 1)[0]
