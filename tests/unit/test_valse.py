"""model/benchmarks/valse.py: the valid filter, image roots (normalised from the CLI) and MACCO's probing-data layout."""
import json

import pytest

from model.benchmarks import EvalConfig, evaluate, valse
from tests_support import (BAD_FEATURE as BAD, GOOD_FEATURE as GOOD, ProtocolEncoder as FakeEncoder,
                           blank_image as _img, dump_json as _dump, micro_checkpoint as _micro_checkpoint)


def test_valse_valid_filter_and_image_roots(tmp_path):
    (tmp_path / "data").mkdir()
    recs = {"a": {"dataset": "visual7w", "image_file": "v7w_1.jpg", "caption": "c", "foil": "f",
                  "mturk": {"caption": 3}},
            "b": {"dataset": "visual7w", "image_file": "v7w_2.jpg", "caption": "c", "foil": "f",
                  "mturk": {"caption": 1}}}
    (tmp_path / "data" / "existence.json").write_text(json.dumps(recs))
    assert len(valse.load(tmp_path)) == 1 and len(valse.load(tmp_path, valid_only=False)) == 2
    c = valse.load(tmp_path, image_roots={"visual7w": "/imgs/v7w"})[0]
    assert c.image == "/imgs/v7w/v7w_1.jpg" and c.options == ["f", "c"] and c.true_index == 1


def test_valse_image_roots_normalised_from_the_cli(tmp_path, capsys):
    from macco.cli import main

    ckpt = _micro_checkpoint(tmp_path)
    va, coco = tmp_path / "va", tmp_path / "coco_val2017"
    for piece, ds in (("plurals", "coco2017"), ("relations", "coco_2017")):
        _dump(va / "data" / f"{piece}.json", {f"{piece}_0": {"dataset": ds, "image_file": "000000000001.jpg",
                                                              "caption": "two dogs", "foil": "one dog",
                                                              "mturk": {"caption": 3}}})
    _img(coco / "000000000001.jpg")
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "macco-micro", "--checkpoint", str(ckpt), "--benchmark", "valse", "--root",
                 str(va), "--image-root", f"coco2017={coco}", "--allow-partial", "--protocol", "macco",
                 "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    b = r["benchmarks"]["valse"]
    assert r["protocol"] == "macco" and b["settings"]["protocol"] == "macco"
    # --protocol macco alone implies MACCO's GELU load (explicit --activation wins: test_protocol_sets_defaults...)
    assert b["settings"]["activation"] == "gelu" and b["settings"]["activation_setting"] == "gelu"
    assert {k: v["n"] for k, v in b["subsets"].items()} == {"plurals": 1, "relations": 1}
    assert b["settings"]["image_roots"] == {"coco2017": str(coco)} and b["partial"] is True
    assert "PARTIAL" in capsys.readouterr().out
    with pytest.raises(ValueError, match="names the same dataset"):
        evaluate(EvalConfig(roots={"valse": str(va)}, valse_image_roots={"coco2017": "/a", "coco_2017": "/b"}),
                 ["valse"], enc=FakeEncoder())


def test_valse_reads_maccos_probing_data_layout(tmp_path):
    """#30 item 3: MACCO's re-packed VALSE (`datasets/VALSE/probing_data/<piece>.json`, lists of {image_path,
    pos_caption, neg_caption}); each piece's images where MACCO's scripts join them, beside the VALSE root."""
    datasets = tmp_path / "datasets"
    va = datasets / "VALSE"
    recs = {"actant-swap": ("swig_1.jpg", datasets / "VL_checklist" / "VL_checklist_datasets"),
            "existence": ("v7w_1.jpg", va), "foil-it": ("COCO_val2014_1.jpg", datasets / "coco"),
            "relations": ("val2017/000000000001.jpg", datasets / "sugar-crepe")}
    for piece, (img, root) in recs.items():
        _dump(va / "probing_data" / f"{piece}.json", [{"image_path": img, "pos_caption": "pos 0",
                                                       "neg_caption": "neg 0"}])
        _img(root / img)
    enc = FakeEncoder({"pos 0": GOOD, "neg 0": BAD})
    r = evaluate(EvalConfig(roots={"valse": str(va)}, allow_partial=True), ["valse"], enc=enc)["benchmarks"]["valse"]
    assert {k: (v["n"], v["missing_images"]) for k, v in r["subsets"].items()} == {p: (1, 0) for p in recs}
    assert r["settings"]["layout"] == "macco" and r["groups"]["spatial_relation"] == 1.0  # pos over neg
    moved = tmp_path / "elsewhere"
    _img(moved / "swig_1.jpg")
    r = evaluate(EvalConfig(roots={"valse": str(va)}, allow_partial=True, valse_image_roots={"swig": str(moved)}),
                 ["valse"], enc=enc)["benchmarks"]["valse"]
    assert r["subsets"]["actant-swap"]["n"] == 1
