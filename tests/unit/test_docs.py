"""The documentation site (mkdocs.yml, docs/): it builds strictly (no broken link or anchor), its CLI reference is
generated from the parsers and lists every verb, every ``macco`` line of its pages parses with the real CLI, the
nav and the README's "Where to read on" name every page, and what the README shows (run as written by other tests)
is the same text on the site."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_readme import DOC_PAGES, README, REPO, assert_parses, shell_lines


def verbs() -> list[str]:
    from macco.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in nav_pages(v)]
    return [p for v in node for p in nav_pages(v)]


def section(path: Path, heading: str) -> str:
    """The text under the line ``heading``, up to the next heading outside a fenced block."""
    lines = path.read_text().splitlines()
    out, fence = [], False
    for ln in lines[lines.index(heading) + 1:]:
        if ln.startswith("```"):
            fence = not fence
        elif not fence and ln.startswith("#"):
            break
        out.append(ln)
    return "\n".join(out).strip()


def test_the_site_builds_strictly_and_its_cli_page_lists_every_verb(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    for page in DOC_PAGES:
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), page.name
    cli = (site / "cli" / "index.html").read_text()
    names = verbs()
    assert len(names) >= 15
    for verb in names:
        assert f'id="macco-{verb}"' in cli and f"usage: macco {verb}" in cli, verb


@pytest.mark.parametrize("line", [ln for ln in shell_lines(DOC_PAGES) if ln.startswith("macco ")])
def test_every_macco_line_of_the_docs_parses_with_the_cli(line):
    assert_parses(line)


def test_the_docs_pages_have_macco_lines():
    assert len([ln for ln in shell_lines(DOC_PAGES) if ln.startswith("macco ")]) >= 20


def test_the_nav_and_the_readme_name_every_page():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = nav_pages(config["nav"])
    assert len(nav) == len(set(nav))
    assert set(nav) == {p.name for p in DOC_PAGES} | {"cli.md"}
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", README.read_text()))
    assert linked >= {p.name for p in DOC_PAGES} - {"index.md"}, sorted({p.name for p in DOC_PAGES} - linked)
    for page in DOC_PAGES:  # links from a page reach pages (mkdocs --strict checks them); repository files are code
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            assert not target.startswith("..") and (REPO / "docs" / target).exists(), (page.name, target)


def test_what_the_readme_shows_is_the_same_text_on_the_site():
    """The README's tested blocks (the first hour, the DuckDB inspection) are run from the README; the site's copies
    must be the same text, and every code line and table row of the README is on a docs page."""
    start = REPO / "docs" / "getting-started.md"
    assert section(README, "## Installation") == section(start, "## Installation")
    first_hour = "## A first hour: every stage by hand on a tiny world"
    assert section(README, first_hour).startswith(section(start, first_hour))
    loading = "## Loading an export in open_clip"
    assert section(README, loading) == section(start, loading)
    assert section(README, "## Citation") == section(REPO / "docs" / "index.md", "## Citation")
    duckdb = "Inspecting the mask tables in DuckDB"
    assert section(README, f"### {duckdb}") == section(REPO / "docs" / "tables.md", f"## {duckdb}")
    readme = README.read_text()
    doc_lines = {ln for p in DOC_PAGES for ln in p.read_text().splitlines()}
    for block in re.findall(r"```\w*\n(.*?)```", readme, flags=re.S):  # the README's Prefect block is a short version
        for line in block.splitlines():
            assert line in doc_lines, line
    for row in (ln for ln in readme.splitlines() if ln.startswith("|")):
        assert row in doc_lines, row


def test_images_are_found():
    for page in [README, *DOC_PAGES]:
        for image in re.findall(r"!\[[^]]*\]\(([^)]+)\)", page.read_text()):
            base = REPO if page == README else REPO / "docs"
            assert (base / image).is_file(), (page.name, image)
