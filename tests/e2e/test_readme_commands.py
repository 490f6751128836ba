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



def test_the_open_clip_block_loads_the_first_hours_export(tmp_path, monkeypatch):
    """After the first hour's world and train lines, the README's "Loading an export in open_clip" block runs as
    written in a process that imports nothing of the project (the unit test runs it on a random export)."""
    import os
    import subprocess
    import sys

    lines = [ln for ln in first_hour_lines() if ln.split()[1] in {"world", "captions", "parse", "ground", "masks"}
             or ln.startswith("macco train ")]
    lines = [ln for ln in lines if "--preview" not in ln]
    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0, line
    text = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text[text.index("## Loading an export in open_clip"):], flags=re.S)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    probs = eval(run.stdout.strip().splitlines()[-1])
    assert len(probs) == 2 and abs(sum(probs.values()) - 1) < 1e-4
