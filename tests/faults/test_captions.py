"""Faults in caption files (pipeline/captions.py): bad captions are error rows, image sizes come from the images, the
split is explicit, malformed / non-UTF-8 / not-Unicode / duplicate-id input is an error row or one line."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from data_schemas import TABLES, read_table
from macco.cli import main
from pipeline.captions_stage import read_caption_input
from tests_support import (CAPTION as GOOD, CAPTION, coco_json, one_line_error as lenient_one_line_error, png,
                           read_captions as captions, read_errors as errors, strict_one_line_error as one_line_error)


def test_parse_coco_json_bad_captions_are_error_rows_and_split_defaults_to_train(tmp_path, capsys):
    src = coco_json(tmp_path / "mycaps.json", [
        {"id": 1, "image_id": 1, "caption": GOOD},
        {"id": 2, "image_id": 1, "caption": ""},
        {"id": 3, "image_id": 1, "caption": "   "},
        {"id": 4, "image_id": 1, "caption": None},
        {"id": 5, "image_id": 99, "caption": GOOD}])
    out = tmp_path / "o"
    assert main(["parse", str(src), "--out", str(out), "--model", "macco-micro"]) == 0
    printed = capsys.readouterr().out
    errs = read_table(TABLES["errors"], out / "errors").to_pylist()
    assert {(e["stage"], e["item_id"], e["reason"]) for e in errs} == {
        ("captions", "2", "empty_caption"), ("captions", "3", "empty_caption"), ("captions", "4", "empty_caption"),
        ("captions", "5", "unknown_image")}
    assert "errors: 4 " in printed and "empty_caption=3" in printed and "unknown_image=1" in printed
    caps = read_table(TABLES["captions"], out / "captions").to_pylist()
    assert [(c["caption_id"], c["split"], c["width"], c["height"]) for c in caps] == [(1, "train", 40, 30)]
    assert "split: train (default" in printed
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0


def test_split_from_a_coco_name_or_given(tmp_path):
    ann = [{"id": 1, "image_id": 1, "caption": GOOD}]
    assert read_caption_input(coco_json(tmp_path / "captions_val2014.json", ann))[0]["split"] == "val"
    assert read_caption_input(coco_json(tmp_path / "mine.json", ann))[0]["split"] == "train"
    assert read_caption_input(tmp_path / "mine.json", split="test")[0]["split"] == "test"


def test_parse_jsonl_sizes_from_images_and_ground_refuses_unknown_sizes(tmp_path, capsys):
    root = tmp_path / "imgs"
    root.mkdir()
    Image.new("RGB", (40, 30)).save(root / "one.png")
    src = tmp_path / "caps.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": 1, "image_id": 1, "caption": GOOD, "file_name": "one.png"},
        {"id": 2, "image_id": 2, "caption": GOOD, "file_name": "gone.png"},
        {"id": 3, "image_id": 3, "caption": GOOD},  # no file_name: the size stays unknown
        {"id": 4, "image_id": 1, "caption": None, "file_name": "one.png"}]))
    out = tmp_path / "o"
    assert main(["parse", str(src), "--out", str(out), "--images", str(root), "--split", "val",
                 "--model", "macco-micro"]) == 0
    printed = capsys.readouterr().out
    assert "split: val (--split)" in printed and "errors: 2 " in printed
    caps = {c["caption_id"]: c for c in read_table(TABLES["captions"], out / "captions").to_pylist()}
    assert {k: (c["width"], c["height"], c["split"]) for k, c in caps.items()} == {1: (40, 30, "val"),
                                                                                 3: (0, 0, "val")}
    errs = read_table(TABLES["errors"], out / "errors").to_pylist()
    assert {(e["item_id"], e["reason"]) for e in errs} == {("2", "missing_image"), ("4", "empty_caption")}
    # caption 3 would be grounded in a 0x0 image: refused up front, saying how to fix it
    assert main(["ground", str(out), "--images", str(root), "--backend", "hf", "--model-dir",
                 str(tmp_path / "no-model")]) == 2
    err = one_line_error(capsys, "ground")
    assert "caption 3" in err and "width/height 0" in err and "macco parse" in err and "--images" in err
    assert not (out / "ground").exists()


def test_malformed_json_is_one_line_with_exit_2(tmp_path, capsys):
    bad = tmp_path / "captions_train2014.json"
    bad.write_text('{"images": [\n  {"id": 1,,}\n]}')
    assert main(["parse", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = one_line_error(capsys, "parse")
    assert str(bad) in err and "line 2" in err


def test_malformed_jsonl_is_one_line_with_exit_2(tmp_path, capsys):
    bad = tmp_path / "caps.jsonl"
    bad.write_text(json.dumps({"id": 1, "image_id": 1, "caption": GOOD}) + "\n{oops\n")
    assert main(["parse", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}: line 2: not valid JSON" in one_line_error(capsys, "parse")


def test_jsonl_with_non_utf8_bytes_is_an_error_row_for_parse_and_folder_sources(tmp_path, capsys):
    png(tmp_path / "a.png")
    good = json.dumps({"id": 2, "image_id": 1, "caption": CAPTION, "file_name": "a.png"}).encode()
    (tmp_path / "c.jsonl").write_bytes(b'{"id": 1, "image_id": 1, "caption": "caf\xe9"}\n' + good + b"\n")
    assert main(["parse", str(tmp_path / "c.jsonl"), "--images", str(tmp_path), "--out", str(tmp_path / "P"),
                 "--model", "macco-micro"]) == 0
    assert [c["caption_id"] for c in captions(tmp_path / "P")] == [2]
    assert [(e["item_id"], e["reason"]) for e in errors(tmp_path / "P")] == [("line:1", "not_utf8")]
    folder = tmp_path / "f.jsonl"
    folder.write_bytes(b'{"file_name": "a.png", "caption": "caf\xe9"}\n{"file_name": "a.png", "caption": "ok"}\n')
    assert main(["captions", str(folder), "--source", "folder", "--out", str(tmp_path / "F")]) == 0
    assert [c["caption"] for c in captions(tmp_path / "F")] == ["ok"]
    assert [e["reason"] for e in errors(tmp_path / "F")] == ["not_utf8"]


def test_coco_json_with_duplicate_annotation_ids_is_refused_as_jsonl_is(tmp_path, capsys):
    """The issue: accepted with rc 0, then 5 checks failed (the JSONL reader refused such ids)."""
    png(tmp_path / "one.png")
    coco = {"images": [{"id": 1, "file_name": "one.png", "width": 40, "height": 30}],
            "annotations": [{"id": 7, "image_id": 1, "caption": CAPTION}, {"id": 7, "image_id": 1, "caption": "x"}]}
    (tmp_path / "captions_train2014.json").write_text(json.dumps(coco))
    assert main(["parse", str(tmp_path / "captions_train2014.json"), "--out", str(tmp_path / "o")]) == 2
    assert "annotations[1]: id 7 already used at annotations[0]" in lenient_one_line_error(capsys, "parse")
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({"id": 7, "image_id": 1, "caption": c})
                                                for c in (CAPTION, "x")))
    assert main(["parse", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "line 2: id 7 already used at line 1" in lenient_one_line_error(capsys, "parse")


def test_a_lone_surrogate_in_a_caption_or_key_is_an_error_row_the_rest_kept(tmp_path, capsys):
    """#48: a lone surrogate ("\\ud800" in JSON: an emoji cut in half) in one caption crashed `macco parse` with a
    UnicodeEncodeError and no table (JSONL and COCO json). Now each string that is not valid Unicode (a caption, a
    key, an image's file name) is an error row naming file and line or entry; the other captions are kept."""
    png(tmp_path / "one.png")
    lines = [{"id": 1, "image_id": 1, "caption": "a red circle \ud800"},
             {"id": 2, "image_id": 1, "caption": CAPTION, "n\ud83dte": 1},
             {"id": 3, "image_id": 1, "caption": CAPTION}]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")  # ensure_ascii: "\ud800"
    assert main(["parse", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "P"), "--model", "macco-micro"]) == 0
    assert [c["caption_id"] for c in captions(tmp_path / "P")] == [3]
    errs = [e for e in errors(tmp_path / "P") if e["stage"] == "captions"]
    assert [(e["item_id"], e["reason"]) for e in errs] == [("line:1", "invalid_unicode"), ("line:2", "invalid_unicode")]
    assert f"{tmp_path / 'c.jsonl'}: line 1: ['caption'] is not valid Unicode: a lone surrogate U+D800" in errs[0][
        "message"]
    assert "line 2: key is not valid Unicode: a lone surrogate U+D83D" in errs[1]["message"]
    coco = coco_json(tmp_path / "captions_val2014.json", [
        {"id": 1, "image_id": 1, "caption": "a cat \udfff"}, {"id": 2, "image_id": 1, "caption": CAPTION},
        {"id": 3, "image_id": 2, "caption": CAPTION}], images=(
        {"id": 1, "file_name": "one.png", "width": 40, "height": 30},
        {"id": 2, "file_name": "tw\udcffo.png", "width": 40, "height": 30}))
    assert main(["parse", str(coco), "--out", str(tmp_path / "C"), "--model", "macco-micro"]) == 0
    assert [c["caption_id"] for c in captions(tmp_path / "C")] == [2]
    errs = {e["item_id"]: e for e in errors(tmp_path / "C") if e["stage"] == "captions"}
    assert {k: e["reason"] for k, e in errs.items()} == {"1": "invalid_unicode", "3": "invalid_unicode"}
    assert "captions_val2014.json: annotations[0]: ['caption'] is not valid" in errs["1"]["message"]
    assert "captions_val2014.json: images[1]: ['file_name'] is not valid" in errs["3"]["message"]
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "C")]) == 0


def test_the_karpathy_and_instances_files_check_their_strings_too(tmp_path):
    """The same rule in the other COCO readers: a Karpathy sentence or file name that is not valid Unicode is an
    error row per caption; an instances category is one line (its boxes have no error rows)."""
    from pipeline.captions import InputFileError, read_coco_instances, read_karpathy

    data = {"images": [
        {"split": "train", "filepath": "train2014", "filename": "a.jpg", "cocoid": 1,
         "sentences": [{"sentid": 1, "raw": "a cat \ud800"}, {"sentid": 2, "raw": CAPTION}]},
        {"split": "train", "filepath": "train2014", "filename": "b\udcff.jpg", "cocoid": 2,
         "sentences": [{"sentid": 3, "raw": CAPTION}]}]}
    (tmp_path / "k.json").write_text(json.dumps(data))
    read = read_karpathy(tmp_path / "k.json", sizes={1: (4, 3), 2: (4, 3)})
    assert [r["caption_id"] for r in read.rows] == [2]
    assert [(e["item_id"], e["reason"]) for e in read.errors] == [("1", "invalid_unicode"), ("3", "invalid_unicode")]
    assert "k.json: images[1]: ['filename'] is not valid" in read.errors[1]["message"]
    (tmp_path / "i.json").write_text(json.dumps({"categories": [{"id": 1, "name": "c\ud800t"}], "annotations": []}))
    with pytest.raises(InputFileError, match=r"i.json: categories\[0\]: \['name'\] is not valid Unicode"):
        read_coco_instances(tmp_path / "i.json")

