"""model/benchmarks/whatsup.py: QA subsets, pair / set / per-preposition accuracy, bad file names."""
import json

import numpy as np
import pytest

from model.benchmarks import EvalConfig, evaluate, whatsup
from model.benchmarks.scoring import Case
from tests_support import (BAD_FEATURE as BAD, GOOD_FEATURE as GOOD, ProtocolEncoder as FakeEncoder,
                           blank_image as _img, dump_json as _dump)


def test_whatsup_qa_and_prefix(tmp_path):
    (tmp_path / "coco_qa_two_obj.json").write_text(json.dumps([[48213, "a bottle above a sink", "a bottle below a sink"]]))
    (tmp_path / "vg_qa_two_obj.json").write_text(json.dumps([[7, "a cup left of a plate", "a cup right of a plate"]]))
    cases = whatsup.load(tmp_path)
    assert [c.image.split("/")[-2:] for c in cases] == [["val2017", "000000048213.jpg"], ["vg_images", "7.jpg"]]
    assert {c.subset for c in cases} == {"coco_qa_two", "vg_qa_two"}  # VG-QA two is VG, not COCO


def test_whatsup_pair_set_and_per_preposition(tmp_path):
    recs, txt = [], {}
    for a, b in (("book", "chair"), ("cup", "plate")):
        for prep in ("on", "under", "left_of", "right_of"):
            name = f"{a}_{prep}_{b}.jpeg"
            _img(tmp_path / "controlled_images" / name)
            right = not (a == "cup" and prep == "under")  # one wrong image: cup under plate
            recs.append({"image_path": f"data/controlled_images/{name}",
                         "caption_options": [f"{name} true", f"{name} w1", f"{name} w2", f"{name} w3"]})
            txt[f"{name} true"] = GOOD if right else BAD
    _dump(tmp_path / "controlled_images_dataset.json", recs)
    _dump(tmp_path / "coco_qa_two_obj.json", [[1, "a cup left of a plate", "a cup right of a plate"],
                                              [2, "a cup above a plate", "a cup below a plate"]])
    _img(tmp_path / "val2017" / "000000000001.jpg")
    _img(tmp_path / "val2017" / "000000000002.jpg")
    txt.update({"a cup left of a plate": GOOD, "a cup above a plate": BAD})
    b = evaluate(EvalConfig(roots={"whatsup": str(tmp_path)}, allow_partial=True), ["whatsup"],
                 enc=FakeEncoder(txt))["benchmarks"]["whatsup"]
    d = b["details"]["controlled_a"]
    assert b["subsets"]["controlled_a"]["accuracy"] == 7 / 8
    assert (d["pairs"], d["pair_accuracy"]) == (4, 3 / 4)  # on/under of cup-plate fails
    assert (d["sets"], d["set_accuracy"]) == (2, 1 / 2)
    assert d["per_preposition"]["under"] == {"n": 2, "accuracy": 0.5}
    assert d["per_preposition"]["left_of"] == {"n": 2, "accuracy": 1.0}
    assert b["details"]["coco_qa_two"]["per_preposition"] == {"left": {"n": 1, "accuracy": 1.0},
                                                              "above": {"n": 1, "accuracy": 0.0}}
    assert b["groups"]["controlled_a_pair"] == 0.75 and b["groups"]["controlled_a_set"] == 0.5
    # a missing image leaves its pair and set out (counted), never scored as wrong
    (tmp_path / "controlled_images" / "book_on_chair.jpeg").unlink()
    d = evaluate(EvalConfig(roots={"whatsup": str(tmp_path)}, allow_partial=True, allow_missing=True), ["whatsup"],
                 enc=FakeEncoder(txt))["benchmarks"]["whatsup"]["details"]["controlled_a"]
    assert (d["pairs"], d["pairs_incomplete"], d["sets"], d["sets_incomplete"]) == (3, 1, 1, 1)
    assert d["set_accuracy"] == 0.0


def test_whatsup_bad_file_names_are_errors(tmp_path):
    recs = [{"image_path": f"data/controlled_images/{n}", "caption_options": ["a", "b", "c", "d"]}
            for n in ("book_on_chair.jpeg", "book_under_chair.jpeg", "book_left_of_chair.jpeg", "oddname.jpeg")]
    _dump(tmp_path / "controlled_images_dataset.json", recs)
    with pytest.raises(ValueError, match=r"record 3: image 'oddname.jpeg' is not"):
        whatsup.load(tmp_path)
    _dump(tmp_path / "controlled_images_dataset.json", recs[:3])
    with pytest.raises(ValueError, match="object pair book/chair has prepositions"):
        whatsup.load(tmp_path)
    cases = [Case("x/1.png", ["a", "b"], 0, "controlled_a")]
    assert whatsup.details(cases, [np.array([1.0, 0.0])])["controlled_a"]["pair_accuracy"] is None
