"""Faults in the non-COCO sources (pipeline/sources.py): CSV quoting and non-UTF-8 bytes are error rows, never a
traceback or U+FFFD."""
from __future__ import annotations

import io
import json

from PIL import Image

from macco.cli import main
from tests_support import CAPTION, png, read_captions as captions, read_errors as errors, write_shard


def test_csv_unclosed_quote_is_an_error_row_and_the_next_rows_are_kept(tmp_path, capsys):
    """The issue: exit 0, one caption swallowed the next line, that row lost, no error row."""
    png(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_text('filepath\ttitle\na.png\t"a red circle\na.png\ta blue square\n'
                                    'a.png\ta green cross\n')
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert [(c["caption_id"], c["caption"]) for c in captions(tmp_path / "T")] == [
        (1, "a blue square"), (2, "a green cross")]
    [e] = errors(tmp_path / "T")
    assert (e["item_id"], e["reason"]) == ("0", "csv_quoting") and "d.tsv: line 2" in e["message"]
    assert "csv_quoting=1" in capsys.readouterr().out


def test_csv_with_non_utf8_bytes_is_an_error_row_not_a_traceback(tmp_path, capsys):
    png(tmp_path / "a.png")
    (tmp_path / "d.tsv").write_bytes(b"filepath\ttitle\na.png\ta caf\xe9 table\na.png\ta blue square\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert [c["caption"] for c in captions(tmp_path / "T")] == ["a blue square"]
    [e] = errors(tmp_path / "T")
    assert e["reason"] == "not_utf8" and "d.tsv: line 2" in e["message"] and "byte 11" in e["message"]
    assert "\ufffd" not in json.dumps(captions(tmp_path / "T"))


def test_webdataset_non_utf8_txt_and_json_are_error_rows_never_u_fffd(tmp_path, capsys):
    """The issue: .txt silently stored with U+FFFD; .json aborted the whole read."""
    buf = io.BytesIO()
    Image.new("RGB", (20, 10)).save(buf, format="PNG")
    img = buf.getvalue()
    shard = write_shard(tmp_path / "s.tar", [
        {"__key__": "a", "png": img, "txt": b"caf\xe9"},
        {"__key__": "b", "png": img, "json": b'{"caption": "caf\xe9"}'},
        {"__key__": "c", "png": img, "txt": CAPTION}])
    assert main(["captions", str(shard), "--source", "webdataset", "--out", str(tmp_path / "T")]) == 0
    assert [c["caption"] for c in captions(tmp_path / "T")] == [CAPTION]
    errs = errors(tmp_path / "T")
    assert [(e["item_id"], e["reason"]) for e in errs] == [("0", "not_utf8"), ("1", "not_utf8")]
    assert "sample a: .txt is not UTF-8" in errs[0]["message"] and "sample b: .json" in errs[1]["message"]
