"""What a stranger reads and installs: the release builds and passes `twine check`, the
install claims agree with pyproject.toml, and no link points to a site or file that is not
there."""

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.skipif(
    importlib.util.find_spec("build") is None or importlib.util.find_spec("twine") is None,
    reason="the release tools are in the test extra: pip install -e '.[test]'",
)
def test_the_release_builds_and_passes_twine_check(tmp_path):
    # the README's publishing steps, all but the upload
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    built = sorted(path.name for path in tmp_path.iterdir())
    assert built == ["mannlab-0.1.0-py3-none-any.whl", "mannlab-0.1.0.tar.gz"], built
    check = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, tmp_path.iterdir())],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    with zipfile.ZipFile(tmp_path / built[0]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read("mannlab-0.1.0.dist-info/METADATA").decode()
    assert "mannlab/py.typed" in names and "mannlab/recipes/ntm-copy-lstm.toml" in names
    assert "License-Expression: MIT" in metadata and "Requires-Dist: torch>=2.4" in metadata


def test_license_is_an_spdx_string_and_the_torch_floor_is_the_documented_one():
    project = pyproject()["project"]
    assert project["license"] == "MIT"
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639: one or the other
    assert "torch>=2.4" in project["dependencies"]
    for page in ("README.md", "docs/getting-started.md", "docs/index.md"):
        text = (ROOT / page).read_text()
        assert "PyTorch 2.4 or newer" in text, page
        assert "pip install mannlab" not in text, page  # not on an index


def test_no_link_to_a_site_or_file_that_does_not_exist():
    dead = ("github.com/mannlab", "mannlab.github.io")
    for path in [*PAGES, ROOT / "pyproject.toml", ROOT / "mkdocs.yml"]:
        text = path.read_text()
        assert not any(site in text for site in dead), path
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file = target.split("#")[0]
            assert (page.parent / file).exists(), f"{page.relative_to(ROOT)} links to missing {target}"


def test_the_install_lines_give_pytorch_the_way_its_install_page_does():
    readme = (ROOT / "README.md").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme
    assert re.search(r"--index-url https://download.pytorch.org/whl/cu1\d\d", readme)
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in quick.splitlines() if line.startswith("    ")]
    assert commands == [
        'pip install -e ".[fast]" && mannlab train --model ntm --task copy',
        'pip install -e ".[test]" && pytest',
    ]


def test_the_version_has_one_source():
    import mannlab

    project = pyproject()["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mannlab.__version__"}
    assert importlib.metadata.version("mannlab") == mannlab.__version__  # the installed metadata agrees
