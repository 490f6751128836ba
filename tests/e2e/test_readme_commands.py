"""#31: the README's "A first hour" block runs as written: every `macco` line of it, in order, in a fresh folder
(with the repo's configs/), each exiting 0 and leaving what the next line reads. So the README cannot drift from
the CLI; the other blocks' lines are parsed by tests/unit/test_readme.py."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from macco.cli import main

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def first_hour_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## A first hour"):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_the_first_hour_block_runs_as_written(tmp_path, monkeypatch, capsys):
    lines = first_hour_lines()
    assert len(lines) >= 10 and all(ln.startswith("macco ") for ln in lines)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0, (line, capsys.readouterr().err[-2000:])
    out = capsys.readouterr()
    assert "initialised randomly" in out.err and "first-try" in out.out
    for made in ("tiny/preview.png", "tiny/masks.png", "tiny/run/export.pt", "tiny/eval.json",
                 "tiny/report/results.md", "tiny/eval_results/manifest.json"):
        assert (tmp_path / made).is_file(), made
