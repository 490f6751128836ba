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


def test_text_that_is_not_valid_unicode_is_an_error_row_in_every_source(tmp_path, capsys):
    """#48: a lone surrogate in one folder-JSONL caption or webdataset `.json` crashed the whole source
    (UnicodeEncodeError, no table); a tar member or a CSV file whose *name* is not UTF-8 crashed after `captions`
    was written, so `errors` was missing. Now each is an error row naming file and line (shard and key); the rest
    of the source is kept."""
    import os

    png(tmp_path / "a.png")
    folder = tmp_path / "f.jsonl"
    folder.write_text("\n".join(json.dumps(r) for r in [
        {"file_name": "a.png", "caption": "a red circle \ud83d"}, {"file_name": "\udcffa.png", "caption": CAPTION},
        {"file_name": "a.png", "caption": CAPTION}]) + "\n")
    assert main(["captions", str(folder), "--source", "folder", "--out", str(tmp_path / "F")]) == 0
    assert [c["caption_id"] for c in captions(tmp_path / "F")] == [2]
    errs = errors(tmp_path / "F")
    assert [(e["item_id"], e["reason"]) for e in errs] == [("line:1", "invalid_unicode"), ("line:2", "invalid_unicode")]
    assert "f.jsonl: line 2: ['file_name'] is not valid Unicode" in errs[1]["message"]

    buf = io.BytesIO()
    Image.new("RGB", (20, 10)).save(buf, format="PNG")
    shard = write_shard(tmp_path / "s.tar", [
        {"__key__": "a", "png": buf.getvalue(), "json": json.dumps({"caption": "a red \ud800 circle"})},
        {"__key__": "b\udcff", "png": buf.getvalue()},  # no caption: an error row whose message names the key
        {"__key__": "c\udcfe", "png": buf.getvalue(), "txt": CAPTION},
        {"__key__": "d", "png": buf.getvalue(), "txt": CAPTION}])
    assert main(["captions", str(shard), "--source", "webdataset", "--out", str(tmp_path / "W")]) == 0
    assert [c["caption_id"] for c in captions(tmp_path / "W")] == [3]
    errs = errors(tmp_path / "W")
    assert [(e["item_id"], e["reason"]) for e in errs] == [
        ("0", "invalid_unicode"), ("1", "not_utf8"), ("2", "not_utf8")]
    assert "s.tar: sample a: .json ['caption'] is not valid Unicode: a lone surrogate U+D800" in errs[0]["message"]
    assert r"sample b\udcff: member name 'b\udcff' is not UTF-8 (byte 0xff" in errs[1]["message"]

    bad_name = tmp_path / os.fsdecode(b"d\xff.tsv")
    bad_name.write_bytes(b"filepath\ttitle\na.png\t\"a red circle\na.png\ta blue square\n")
    assert main(["captions", str(bad_name), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    assert [c["caption"] for c in captions(tmp_path / "T")] == ["a blue square"]
    [e] = errors(tmp_path / "T")
    assert e["reason"] == "csv_quoting" and r"d\udcff.tsv: line 2" in e["message"]
