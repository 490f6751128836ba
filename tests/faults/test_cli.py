"""Faults at the CLI (macco/cli.py): a missing input file or table is one line; programming errors are not swallowed."""
import pytest

from macco.cli import main
from tests_support import CAPTION as GOOD, coco_json, strict_one_line_error as one_line_error


def test_missing_input_file_and_missing_tables_are_one_line(tmp_path, capsys):
    assert main(["parse", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.json: file not found" in one_line_error(capsys, "parse")
    (tmp_path / "empty").mkdir()
    assert main(["ground", str(tmp_path / "empty")]) == 2
    assert "table captions" in one_line_error(capsys, "ground")


def test_programming_errors_are_not_swallowed(tmp_path, monkeypatch):
    import pipeline.captions

    def broken(*a, **k):
        raise ValueError("a bug, not an input problem")

    monkeypatch.setattr(pipeline.captions, "read_caption_file", broken, raising=False)
    monkeypatch.setattr(pipeline.captions, "read_coco_captions", broken)
    src = coco_json(tmp_path / "captions_train2014.json", [{"id": 1, "image_id": 1, "caption": GOOD}])
    with pytest.raises(ValueError, match="a bug"):
        main(["parse", str(src), "--out", str(tmp_path / "o")])
