"""Faults at the data verbs (macco/commands_data.py): each verb counts and replaces only its own error rows."""
from __future__ import annotations

import json

from data_schemas import TABLES, write_table
from macco.cli import main
from tests_support import CAPTION, png, read_errors as errors


def test_parse_of_a_clean_file_drops_an_earlier_files_input_errors(tmp_path, capsys):
    """`macco parse FILE --out P` replaces P/captions with FILE's rows: the captions-stage errors of the file
    parsed there before are not FILE's and go with it (parse's own rows are rewritten as always)."""
    png(tmp_path / "a.png")
    good = json.dumps({"id": 2, "image_id": 1, "caption": CAPTION, "file_name": "a.png"})
    (tmp_path / "bad.jsonl").write_bytes(b'{"id": 1, "image_id": 1, "caption": "caf\xe9"}\n' + good.encode() + b"\n")
    (tmp_path / "good.jsonl").write_text(good + "\n")
    for name, reasons in (("bad.jsonl", ["not_utf8"]), ("good.jsonl", [])):
        assert main(["parse", str(tmp_path / name), "--images", str(tmp_path), "--out", str(tmp_path / "P"),
                     "--model", "macco-micro"]) == 0
        assert [e["reason"] for e in errors(tmp_path / "P") if e["stage"] == "captions"] == reasons, name
    assert "errors: 0" in capsys.readouterr().out


def test_captions_into_a_used_folder_counts_its_own_errors(tmp_path, capsys):
    """`macco captions` printed the errors table's row count, other stages' rows included, and its 'no image
    found' check compared this stage's missing images with that count."""
    png(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text("filepath\ttitle\nnope.png\ta red circle\n")
    spec = TABLES["errors"]
    write_table(spec, tmp_path / "T" / "errors",
                spec.from_rows([dict(stage="parse", item_id="9", reason="empty_caption", message="x")]))
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 2
    assert "none of the 1 captions' images" in capsys.readouterr().err  # its own row, not the parse stage's
    assert len(errors(tmp_path / "T")) == 2  # both kept


def test_parse_checks_every_output_before_writing_captions(tmp_path, capsys):
    """#48 items 8, 9: `macco parse FILE --out T` wrote T/captions, then refused a file at T/scene_graphs; `--out`
    an existing file was a FileExistsError traceback."""
    png(tmp_path / "a.png")
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": 2, "image_id": 1, "caption": CAPTION, "file_name": "a.png"})
                                      + "\n")
    (tmp_path / "T").mkdir()
    (tmp_path / "T" / "scene_graphs").write_text("mine")
    args = ["parse", str(tmp_path / "c.jsonl"), "--images", str(tmp_path), "--model", "macco-micro", "--out"]
    assert main([*args, str(tmp_path / "T")]) == 2
    assert "T/scene_graphs: is a file, not a table folder" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "T").iterdir()) == ["scene_graphs"]  # no captions, no lock
    (tmp_path / "afile").write_text("mine")
    assert main([*args, str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "afile: is a file, not a folder" in err
    assert (tmp_path / "afile").read_text() == "mine"
