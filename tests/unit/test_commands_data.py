"""macco/commands_data.py: the data verbs' own messages."""
from __future__ import annotations

from data_schemas import TABLES, read_table
from macco.cli import main


def test_csv_whose_images_are_all_missing_says_so(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.tsv").write_text("filepath\ttitle\nimgs/a.png\ta red circle\nimgs/b.png\ta cat\n")
    assert main(["captions", str(tmp_path / "sub" / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 2
    err = capsys.readouterr().err
    assert "none of the 2 captions' images was found under" in err and "--image-root" in err
    assert len(read_table(TABLES["errors"], tmp_path / "T" / "errors")) == 2  # the rows are still there
