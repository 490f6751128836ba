"""model/benchmarks/vlchecklist.py: the original and MACCO layouts, modes, caps and scoring."""
import json

import pytest
from PIL import Image

from model.benchmarks import EvalConfig, evaluate, vlchecklist
from tests_support import (BAD_FEATURE as BAD, GOOD_FEATURE as GOOD, ProtocolEncoder as FakeEncoder,
                           blank_image as _img, dump_json as _dump, vlc_original as _vlc_original)


def _vlc_macco(root):
    """MACCO's bundle: VL_checklist_json_data/... records {image_path, POS, NEG}; images per source prefix."""
    data, imgs = root / "VL_checklist_json_data", root / "VL_checklist_datasets"
    files = {f"Relation/{n}": n.split("_")[0] for n in ("hake_action", "swig_action", "vg_action", "vg_spatial")}
    files.update({f"Attribute/{s}/{t}": "vg" for s in ("vaw", "vg")
                  for t in ("action", "color", "material", "size", "state")})
    for kind, values in (("Location", ("center", "mid", "margin")), ("Size", ("large", "medium", "small"))):
        for v in values:
            for src in ("vg_obj", "vg_subj", "swig_agent"):
                files[f"Object/{kind}/{v}/{src}"] = src.split("_")[0]
    for rel, img_src in files.items():
        wrong = rel.endswith("swig_agent")  # one Object source always wrong: radar and MACCO means differ
        name = rel.replace("/", "_") + ".jpg"
        _dump(data / f"{rel}.json", [{"image_path": name, "POS": "bad pos" if wrong else "pos",
                                      "NEG": "bad neg" if wrong else "neg"}])
        _img(imgs / img_src / name)
    return files


def test_vlchecklist_modes_and_original_record_shape(tmp_path):
    d = tmp_path / "data" / "Attribute" / "vaw"
    d.mkdir(parents=True)
    recs = [[f"VG_100K/{i}.jpg", {"POS": ["red car", "a red car"], "NEG": ["blue car", "a blue car"]}]
            for i in range(5)]
    (d / "color.json").write_text(json.dumps(recs))
    (tmp_path / "images" / "vaw" / "VG_100K").mkdir(parents=True)
    for i in range(5):
        Image.new("RGB", (8, 8)).save(tmp_path / "images" / "vaw" / "VG_100K" / f"{i}.jpg")
    (tmp_path / "data" / "Relation").mkdir(parents=True)
    (tmp_path / "data" / "Relation" / "swig_action.json").write_text(json.dumps(
        [{"image_path": "a.jpg", "POS": "a man holding a kite", "NEG": "a man kicking a kite"}]))
    authors = vlchecklist.load(tmp_path, "authors", max_num=4)
    assert sum(c.group == "A-color" for c in authors) == 2  # first max_num / 2 records, POS[0] vs NEG[0]
    allp = vlchecklist.load(tmp_path, "all")
    assert sum(c.group == "A-color" for c in allp) == 5 * 4
    assert {(c.group, c.meta["source"]) for c in allp} == {("A-color", "vaw"), ("R-action", "swig")}
    assert authors[0].image.endswith("images/vaw/VG_100K/0.jpg")


def test_vlchecklist_authors_drops_missing_images_before_the_cap(tmp_path):
    _vlc_original(tmp_path, ["Attribute/vg/color"], n=6, missing={0, 1})
    enc = FakeEncoder({**{f"pos {i}": GOOD for i in range(6)}, **{f"neg {i}": BAD for i in range(6)}})
    cfg = EvalConfig(roots={"vl-checklist": str(tmp_path)}, vlc_max_num=4, allow_partial=True, allow_missing=True)
    b = evaluate(cfg, ["vl-checklist"], enc=enc)["benchmarks"]["vl-checklist"]
    sub = b["subsets"]["Attribute/vg/color"]
    # the toolkit drops records 0 and 1 (no image) and then scores the first 2 left: records 2 and 3
    assert sub["n"] == 2 and sub["missing_images"] == 2
    assert b["settings"]["mode"] == "authors" and b["settings"]["max_num"] == 4
    assert b["cases"]["attribute"] == "xx11"


def test_vlchecklist_macco_layout_and_scoring(tmp_path):
    files = _vlc_macco(tmp_path)
    enc = FakeEncoder({"pos": GOOD, "neg": BAD, "bad pos": BAD, "bad neg": GOOD})
    macco = evaluate(EvalConfig(protocol="macco", roots={"vl-checklist": str(tmp_path)}), ["vl-checklist"],
                     enc=enc)["benchmarks"]["vl-checklist"]
    assert set(macco["subsets"]) == set(files)  # Relation/vg_spatial included, nothing skipped
    assert all(v["missing_images"] == 0 and v["n"] == 1 for v in macco["subsets"].values())
    assert macco["settings"]["mode"] == "macco" and macco["settings"]["layout"] == "macco"
    assert macco["groups"]["leaves"]["R-spatial"] == 1.0
    assert macco["groups"]["leaves"]["O-center"] == round(2 / 3, 4)  # mean over the folder's 3 files
    assert macco["groups"]["object"] == pytest.approx(round(2 / 3, 4))
    assert macco["groups"]["relation"] == 1.0 and macco["groups"]["attribute"] == 1.0
    assert "partial" not in macco
    explicit = evaluate(EvalConfig(protocol="macco", vlc_mode="authors", roots={"vl-checklist": str(tmp_path)}),
                        ["vl-checklist"], enc=enc)["benchmarks"]["vl-checklist"]
    assert explicit["settings"]["mode"] == "authors"
    assert explicit["groups"]["leaves"]["O-center"] == 0.5  # radar.py: mean(vg = 1.0, swig = 0.0)


def test_vlchecklist_unknown_file_is_an_error(tmp_path):
    _vlc_macco(tmp_path)
    _dump(tmp_path / "VL_checklist_json_data" / "Relation" / "vg_misc.json", [])
    with pytest.raises(ValueError, match="vg_misc.json: not a VL-CheckList macco-layout file"):
        evaluate(EvalConfig(roots={"vl-checklist": str(tmp_path)}), ["vl-checklist"], enc=FakeEncoder())
