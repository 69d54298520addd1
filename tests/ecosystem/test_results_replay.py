"""The row of docs/RESULTS.md that the suite replays: its printed command, run as written
(into a temporary directory), gives the numbers the row records, bit for bit. A change of the
code's arithmetic, of the command or of the recorded numbers fails here."""

import json
import re
import shlex
from pathlib import Path

from mannlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "RESULTS.md"
HEADING = "### A row the tests replay"


def replayed_row() -> tuple[str, int, str, int]:
    """The row under HEADING: its command, solved-at step, best validation BCE as printed
    (Python's shortest round-trip form of the float) and that validation's step."""
    text = RESULTS.read_text(encoding="utf-8")
    assert HEADING in text, f"docs/RESULTS.md has no section {HEADING!r}"
    section = text[text.index(HEADING) + len(HEADING) :].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and "`mannlab " in line]
    assert len(rows) == 1, f"expected one table row with a command under {HEADING!r}, found {len(rows)}"
    _, solved, best, command = (cell.strip() for cell in rows[0].strip().strip("|").split("|"))
    bce, step = re.fullmatch(r"(\S+) \(step ([\d,]+)\)", best).groups()
    return command.strip("`"), int(solved.replace(",", "")), bce, int(step.replace(",", ""))


def test_the_replayed_row_gives_its_numbers_bit_for_bit(tmp_path):
    command, solved_at, bce, step = replayed_row()
    argv = shlex.split(command)
    assert argv[:2] == ["mannlab", "train"], command
    run_dir = tmp_path / "run"
    assert main([*argv[1:], "--run-dir", str(run_dir), "--no-progress"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    best = summary["best_val"]
    assert (summary["solved_at_step"], best["step"], repr(best["bce"])) == (solved_at, step, bce)
