"""Faults against ``macco validate`` (pipeline/validate.py): a folder holding another table's manifest is refused."""
from __future__ import annotations

import json
import shutil

from macco.cli import main
from tests_support import captions_and_errors_tables as tables  # noqa: F401 (fixtures)


def test_a_folder_holding_another_tables_manifest_is_refused_not_skipped(tables, capsys):
    """A manifest whose `table` field names another table made validate skip that table's checks and pass."""
    shutil.copytree(tables / "captions", tables / "regions")
    m = json.loads((tables / "regions" / "manifest.json").read_text())
    assert m["table"] == "captions"
    assert main(["validate", str(tables)]) == 2
    assert "the folder 'regions' holds a manifest of table 'captions'" in capsys.readouterr().err
