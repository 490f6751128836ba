"""Faults in benchmark files' records (model/benchmarks/records.py, read by every benchmark's loader): a record of
the wrong type is one line naming the file, the record and the value, before the model loads (they were TypeError /
ValueError tracebacks, or a NaN crop scored)."""
from __future__ import annotations

import json

import pytest

from data_schemas import InputFileError
from model.benchmarks import aro, sugarcrepe, valse, vlchecklist, whatsup, winoground

SC = {"filename": "a.jpg", "caption": "a dog on a mat", "negative_caption": "a mat on a dog"}
VG = {"image_path": "1.jpg", "bbox_x": 1, "bbox_y": 2, "bbox_w": 10, "bbox_h": 10, "relation_name": "on",
      "true_caption": "the dog is on the mat", "false_caption": "the mat is on the dog"}


@pytest.mark.parametrize("rec,where", [
    ({**SC, "caption": 5}, r"record '0': field 'caption' is '5' \(int\), not text"),
    ({**SC, "filename": None}, r"record '0': field 'filename' is null, not text"),
    ("a dog", r"record '0': 'a dog' \(str\) is not a record"),
])
def test_sugarcrepe_records_of_the_wrong_type_are_one_line(tmp_path, rec, where):
    (tmp_path / "swap_att.json").write_text(json.dumps({"0": rec}))
    with pytest.raises(InputFileError, match=rf"swap_att.json: {where}"):
        sugarcrepe.load(tmp_path, subsets=("swap_att",))


@pytest.mark.parametrize("rec,where", [
    ({**VG, "bbox_x": "left"}, r"record 1: field 'bbox_x' is 'left' \(str\), not a finite number"),
    ({**VG, "bbox_w": float("nan")}, r"record 1: field 'bbox_w' is 'nan' \(float\), not a finite number"),
    ("x", r"record 1: 'x' \(str\) is not a record"),
    ({**VG, "true_caption": ["a", "b"]}, r"record 1: field 'true_caption' is .* \(list\), not text"),
])
def test_aro_records_of_the_wrong_type_are_one_line(tmp_path, rec, where):
    (tmp_path / "visual_genome_relation.json").write_text(json.dumps([VG, rec]))
    with pytest.raises(InputFileError, match=rf"visual_genome_relation.json: {where}"):
        aro.load_vg(tmp_path, "relation")
    assert len(aro.load_vg(_good(tmp_path / "ok"), "relation")) == 1


def _good(d):
    d.mkdir()
    (d / "visual_genome_relation.json").write_text(json.dumps([VG]))
    return d


def test_other_benchmarks_records_of_the_wrong_type_are_one_line(tmp_path):
    (tmp_path / "controlled_images_dataset.json").write_text(json.dumps([{"image_path": 3, "caption_options": []}]))
    with pytest.raises(InputFileError, match=r"record 0: field 'image_path' is '3' \(int\), not text"):
        whatsup.load(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "relations.json").write_text(json.dumps({"k": {"caption": "a", "foil": None,
                                                                       "image_file": "x", "dataset": "coco"}}))
    with pytest.raises(InputFileError, match=r"relations.json: record 'k': field 'foil' is null, not text"):
        valse.load(tmp_path)
    (tmp_path / "examples.jsonl").write_text('{"id": 1, "image_0": "a", "image_1": "b", "caption_0": 7, '
                                             '"caption_1": "c"}\n')
    with pytest.raises(InputFileError, match=r"examples.jsonl: line 1: field 'caption_0' is '7' \(int\), not text"):
        winoground.load(tmp_path)
    (tmp_path / "ids.txt").write_bytes(b"12\n\xe9\n")  # a Latin-1 clean-ids file: a UnicodeDecodeError traceback
    with pytest.raises(InputFileError, match=r"ids.txt: not UTF-8 text \(byte 0xe9 at offset 3\)"):
        winoground.load_clean_ids(tmp_path / "ids.txt")
    assert vlchecklist._record(["a.jpg", {"POS": ["x"], "NEG": ["y"]}], tmp_path, 0) == ("a.jpg", ["x"], ["y"])
    with pytest.raises(InputFileError, match=r"record 0: NEG: '\[None\]' \(list\), not a list of texts"):
        vlchecklist._record(["a.jpg", {"POS": ["x"], "NEG": [None]}], tmp_path, 0)
