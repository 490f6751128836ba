"""Faults in the inputs of ``macco parse`` / ``macco ground`` (issue #19): bad captions become error rows,
image sizes come from the images, the split is explicit, and a malformed input file is one line on stderr."""
import json

import pytest
from PIL import Image

from data_schemas import TABLES, read_table
from macco.cli import main
from pipeline.captions_stage import read_caption_input

GOOD = "a red circle left of a blue square"


def coco_json(path, annotations, images=({"id": 1, "file_name": "one.png", "width": 40, "height": 30},)):
    path.write_text(json.dumps({"images": list(images), "annotations": annotations}))
    return path


def one_line_error(capsys, verb: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(f"macco {verb}: "), err
    return err


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
