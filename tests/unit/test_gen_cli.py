"""docs/gen_cli.py: the CLI reference (docs/cli.md) is generated from the parsers, current after a write, and shows
values and plain words: no source expressions (``arch = DEFAULT_ARCH``) and no reStructuredText markup."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def gen_cli(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gen_cli", REPO / "docs" / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "PAGE", tmp_path / "cli.md")
    return module


def test_the_page_is_written_and_then_current(gen_cli):
    assert gen_cli.write() is True
    assert gen_cli.PAGE.read_text() == gen_cli.render()
    assert gen_cli.write() is False  # nothing changed: not rewritten


def test_the_page_shows_values_not_source(gen_cli):
    page = gen_cli.render()
    assert '  arch = "ViT-B-32"' in page and "DEFAULT_ARCH" not in page
    assert not re.search(r"= (unkeyed|asdict|field)\(", page)


def test_the_page_has_no_rst_markup(gen_cli):
    text = re.sub(r"```\w*", "", gen_cli.render())  # the page's own Markdown fences
    assert "``" not in text
    assert not re.search(r":(class|func|meth|mod|attr|ref|data|obj):`", text)
    assert "macco: one verb per stage" in text


def test_plain_strips_roles_and_literals():
    from macco.cli import plain

    assert plain("``x`` and :class:`~a.B` or :func:`f`") == "x and a.B or f"
    assert plain(None) is None
