"""#32: docs/architecture.md says where each thing lives; every file it names exists, and every symbol named in a
table cell after a file is found in one of that cell's files (defined, assigned, or a term key), so the page
cannot drift from the code."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TICKS = re.compile(r"`([^`]+)`")
FILE = re.compile(r"^[\w./-]+\.py$")
SYMBOL = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def cells() -> list[str]:
    text = (REPO / "docs" / "architecture.md").read_text()
    return [c for line in text.splitlines() if line.startswith("|") for c in line.split("|")[2:3]]


def test_every_file_and_symbol_on_the_page_exists():
    missing, checked = [], 0
    for cell in cells():
        files: list[Path] = []
        for token in TICKS.findall(cell):
            if FILE.match(token) and "<" not in token:
                path = REPO / token
                if not path.is_file():
                    missing.append(f"file {token}")
                    continue
                files.append(path)
            elif files and SYMBOL.match(token):
                name = token.split(".")[-1]
                if not any(re.search(rf"\b{re.escape(name)}\b", f.read_text()) for f in files):
                    missing.append(f"{token} in {[str(f.relative_to(REPO)) for f in files]}")
                checked += 1
    assert checked > 60 and not missing, missing
