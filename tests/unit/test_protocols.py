"""model/benchmarks/protocols.py: --protocol authors|macco defaults, image-root maps, incomplete groups refused or
reported partial. Fixtures are small files in each benchmark's original (or MACCO's) format."""
from pathlib import Path

import pytest

from model.benchmarks import EvalConfig, IncompleteGroup, evaluate
from model.benchmarks.protocols import order_image_root, parse_image_roots
from model.benchmarks.scoring import MissingImages
from tests_support import (BAD_FEATURE as BAD, GOOD_FEATURE as GOOD, ProtocolEncoder as FakeEncoder,
                           blank_image as _img, dump_json as _dump, vlc_original as _vlc_original)


def test_protocol_sets_defaults_and_explicit_settings_win():
    a, m = EvalConfig(), EvalConfig(protocol="macco")
    assert (a.aro_exclusion, a.vlc_mode, a.activation) == ("aro_notebook", "authors", "auto")
    assert (m.aro_exclusion, m.vlc_mode, m.activation) == ("macco", "macco", "gelu")  # MACCO's scripts load GELU
    both = EvalConfig(protocol="macco", aro_exclusion="aro_notebook", vlc_mode="all", activation="quickgelu")
    assert (both.aro_exclusion, both.vlc_mode, both.activation) == ("aro_notebook", "all", "quickgelu")
    with pytest.raises(ValueError, match="protocol='paper'"):
        EvalConfig(protocol="paper")


def test_order_image_root_follows_protocol_and_the_cli_map(tmp_path):
    ann = tmp_path / "ARO" / "coco_karpathy_test.json"
    _dump(ann, [{"image": "val2014/COCO_val2014_1.jpg", "caption": ["a dog on a red mat"]}])
    _img(tmp_path / "coco" / "val2014" / "COCO_val2014_1.jpg")
    enc = FakeEncoder()
    roots = {"coco-order": str(tmp_path / "ARO")}
    with pytest.raises(MissingImages, match="coco-order: 1 of 1 case"):  # the authors' join: no image there
        evaluate(EvalConfig(roots=roots), ["coco-order"], enc=enc)
    a = evaluate(EvalConfig(roots=roots, allow_missing=True), ["coco-order"], enc=enc)["benchmarks"]["coco-order"]
    m = evaluate(EvalConfig(roots=roots, protocol="macco"), ["coco-order"], enc=enc)["benchmarks"]["coco-order"]
    assert a["settings"]["image_root"] == str(tmp_path / "ARO") and a["subsets"]["coco-order"]["missing_images"] == 1
    assert m["settings"]["image_root"] == str(tmp_path / "coco") and m["subsets"]["coco-order"]["n"] == 1
    order, valse = parse_image_roots([f"coco-order={tmp_path / 'coco'}", "coco_2017=/x"])
    e = evaluate(EvalConfig(roots=roots, order_image_roots=order), ["coco-order"], enc=enc)["benchmarks"]
    assert e["coco-order"]["subsets"]["coco-order"]["n"] == 1 and valse == {"coco2017": "/x"}
    with pytest.raises(ValueError, match="expected NAME=DIR"):
        parse_image_roots(["coco-order"])
    aro_root = tmp_path / "ARO"
    assert order_image_root("flickr-order", aro_root, "macco", {}) == aro_root / "flickr30k-images"
    assert order_image_root("flickr-order", aro_root, "authors", {}) == aro_root
    assert order_image_root("flickr-order", aro_root, "macco", {"flickr-order": "/f"}) == Path("/f")


def test_incomplete_groups_are_refused_or_reported_partial(tmp_path, capsys):
    from macco.cli import main

    vlc = tmp_path / "vlc"
    _vlc_original(vlc, ["Attribute/vg/color", "Attribute/vaw/color", "Attribute/vg/size"], n=2)
    enc = FakeEncoder({"pos 0": GOOD, "pos 1": GOOD, "neg 0": BAD, "neg 1": BAD})
    with pytest.raises(IncompleteGroup, match=r"'attribute' lacks Attribute/vaw/action, Attribute/vg/action"):
        evaluate(EvalConfig(roots={"vl-checklist": str(vlc)}), ["vl-checklist"], enc=enc)
    b = evaluate(EvalConfig(roots={"vl-checklist": str(vlc)}, allow_partial=True), ["vl-checklist"],
                 enc=enc)["benchmarks"]["vl-checklist"]
    assert b["partial"] is True and len(b["missing_files"]["attribute"]) == 7
    assert "relation" not in b["missing_files"] and b["groups"]["relation"] is None  # no file at all: no average

    sc = tmp_path / "sc"
    for s in ("add_att", "replace_att", "swap_att", "replace_rel", "add_obj", "replace_obj"):
        _dump(sc / f"{s}.json", {"0": {"filename": "1.jpg", "caption": "pos 0", "negative_caption": "neg 0"}})
    _img(sc / "val2017" / "1.jpg")
    with pytest.raises(IncompleteGroup, match="'object' lacks swap_obj"):
        evaluate(EvalConfig(roots={"sugarcrepe": str(sc)}), ["sugarcrepe"], enc=enc)
    b = evaluate(EvalConfig(roots={"sugarcrepe": str(sc)}, allow_partial=True), ["sugarcrepe"],
                 enc=enc)["benchmarks"]["sugarcrepe"]
    assert b["missing_files"] == {"object": ["swap_obj"], "micro_overall": ["swap_obj"]}
    assert b["groups"]["attribute"] == 1.0

    va = tmp_path / "va"
    for piece in ("actant-swap", "existence"):
        _dump(va / "data" / f"{piece}.json", {"k": {"dataset": "visual7w", "image_file": "v.jpg", "caption": "pos 0",
                                                    "foil": "neg 0", "mturk": {"caption": 3}}})
    _img(va / "images" / "visual7w" / "v.jpg")
    with pytest.raises(IncompleteGroup, match="'action_relation' lacks action-replacement"):
        evaluate(EvalConfig(roots={"valse": str(va)}), ["valse"], enc=enc)
    # a file whose every image is missing counts as missing from its groups
    gone = {"dataset": "visual7w", "image_file": "gone.jpg", "caption": "pos 0", "foil": "neg 0",
            "mturk": {"caption": 3}}
    _dump(va / "data" / "action-replacement.json", {"k": gone})
    r = evaluate(EvalConfig(roots={"valse": str(va)}, allow_partial=True, allow_missing=True), ["valse"],
                 enc=enc)["benchmarks"]["valse"]
    assert r["subsets"]["action-replacement"]["missing_images"] == 1
    assert r["partial"] is True and r["missing_files"]["action_relation"] == ["action-replacement"]
    assert r["groups"]["action_relation"] == 1.0  # reported, marked partial
    capsys.readouterr()
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "vl-checklist", "--root", str(vlc)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "incomplete set of files" in err and "Attribute/vg/state" in err
