"""Evaluation compatibility: activation, --protocol authors|macco, partial groups, image-root maps, What's Up
pair/set, Winoground's clean subset. Fixtures are small files in each benchmark's original (or MACCO's) format."""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from model.benchmarks import EvalConfig, IncompleteGroup, evaluate, whatsup
from model.benchmarks.protocols import order_image_root, parse_image_roots
from model.benchmarks.scoring import Case, MissingImages

GOOD, BAD = [1.0, 0, 0, 0], [-1.0, 0, 0, 0]  # against FakeEncoder's default image (all ones): right / wrong


class FakeEncoder:
    """Images: a fixed vector (or by path); texts by string (unknown -> zeros + a tiny distinct component)."""

    activation = "fake"

    def __init__(self, txt=None, img=None):
        self.txt, self.img = txt or {}, img or {}

    def images(self, keys):
        return np.stack([np.asarray(self.img.get(k[0], [0.5, 0.5, 0.5, 0.5])) for k in keys]) if keys \
            else np.zeros((0, 4))

    def texts(self, texts):
        return np.stack([np.asarray(self.txt.get(t, [0, 0, 0, 0.1]), dtype=float) for t in texts]) if texts \
            else np.zeros((0, 4))


def _img(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8)).save(path)


def _dump(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _micro_checkpoint(tmp_path):
    import open_clip
    import torch

    from model.factory import register_model_configs

    register_model_configs()
    torch.manual_seed(0)
    p = tmp_path / "m.pt"
    torch.save({"state_dict": open_clip.create_model("macco-micro").state_dict()}, p)
    return p


# ---- 1. activation ---------------------------------------------------------------------------------------
def test_activation_is_chosen_built_and_recorded(tmp_path, world):
    from macco.cli import main
    from model.factory import resolve_arch
    from model.benchmarks import activation_kwargs, load_encoder

    ckpt = _micro_checkpoint(tmp_path)
    assert resolve_arch("ViT-B-32", "w.pt") == "ViT-B-32-quickgelu"  # auto: the training activation
    assert activation_kwargs(EvalConfig(activation="gelu")) == {"quick_gelu": False}
    built = {a: load_encoder(EvalConfig(model="macco-micro", checkpoint=str(ckpt), activation=a))[0].activation
             for a in ("auto", "quickgelu", "gelu")}
    assert built == {"auto": "gelu", "quickgelu": "quickgelu", "gelu": "gelu"}  # macco-micro's config: GELU
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "macco-micro", "--checkpoint", str(ckpt), "--world", str(world),
                 "--benchmark", "sugarcrepe", "--activation", "quickgelu", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["activation"] == "quickgelu" and r["protocol"] == "authors"
    assert r["benchmarks"]["sugarcrepe"]["settings"]["activation"] == "quickgelu"
    assert r["benchmarks"]["sugarcrepe"]["settings"]["activation_setting"] == "quickgelu"
    with pytest.raises(ValueError, match="activation='relu'"):
        EvalConfig(activation="relu")


# ---- 2. protocols ----------------------------------------------------------------------------------------
def test_protocol_sets_defaults_and_explicit_settings_win():
    a, m = EvalConfig(), EvalConfig(protocol="macco")
    assert (a.aro_exclusion, a.vlc_mode, a.activation) == ("aro_notebook", "authors", "auto")
    assert (m.aro_exclusion, m.vlc_mode, m.activation) == ("macco", "macco", "gelu")  # MACCO's scripts load GELU
    both = EvalConfig(protocol="macco", aro_exclusion="aro_notebook", vlc_mode="all", activation="quickgelu")
    assert (both.aro_exclusion, both.vlc_mode, both.activation) == ("aro_notebook", "all", "quickgelu")
    with pytest.raises(ValueError, match="protocol='paper'"):
        EvalConfig(protocol="paper")


def test_vgr_exclusion_follows_the_protocol(tmp_path):
    recs = [{"image_path": f"{i}.jpg", "bbox_x": 0, "bbox_y": 0, "bbox_w": 4, "bbox_h": 4, "relation_name": rel,
             "true_caption": "t", "false_caption": "f"} for i, rel in enumerate(["on", "pulling", "near"])]
    _dump(tmp_path / "visual_genome_relation.json", recs)
    for i in range(3):
        _img(tmp_path / "images" / f"{i}.jpg")
    enc = FakeEncoder({"t": GOOD, "f": BAD})
    kept = {}
    for proto in ("authors", "macco"):
        r = evaluate(EvalConfig(protocol=proto, roots={"aro-vgr": str(tmp_path)}), ["aro-vgr"], enc=enc)
        b = r["benchmarks"]["aro-vgr"]
        kept[proto] = (b["settings"]["exclusion_list"], b["groups"]["relations_kept"])
    assert kept == {"authors": ("aro_notebook", 2), "macco": ("macco", 1)}  # 'pulling': on MACCO's list only


def _vlc_original(root, files, n=6, missing=()):
    """Original release layout: data/<file>.json records [path, {POS, NEG}] and images under images/<source>/."""
    for rel in files:
        recs = [[f"VG_100K/{rel.replace('/', '_')}_{i}.jpg", {"POS": [f"pos {i}"], "NEG": [f"neg {i}"]}]
                for i in range(n)]
        _dump(root / "data" / f"{rel}.json", recs)
        src = rel.split("/")[1]
        for i in range(n):
            if i not in missing:
                _img(root / "images" / src / "VG_100K" / f"{rel.replace('/', '_')}_{i}.jpg")


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


# ---- 5. incomplete groups ----------------------------------------------------------------------------------
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


# ---- 6. VALSE image roots ----------------------------------------------------------------------------------
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


# ---- 4. What's Up pair / set / per-preposition ---------------------------------------------------------------
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


# ---- 3. Winoground clean subset ------------------------------------------------------------------------------
def test_winoground_clean_subset_from_an_ids_file(tmp_path):
    from model.benchmarks import winoground

    lines = []
    for i in range(3):
        for k in (0, 1):
            _img(tmp_path / "images" / f"ex_{i}_img_{k}.png")
        lines.append(json.dumps({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1",
                                 "caption_0": f"c{i}0", "caption_1": f"c{i}1"}))
    (tmp_path / "examples.jsonl").write_text("\n".join(lines) + "\n")
    img = {str(tmp_path / "images" / f"ex_{i}_img_{k}.png"): [1.0, 0, 0, 0] if k == 0 else [0, 1.0, 0, 0]
           for i in range(3) for k in (0, 1)}
    txt = {"c00": [1, 0, 0, 0], "c01": [0, 1, 0, 0], "c10": [0, 1, 0, 0], "c11": [1, 0, 0, 0],
           "c20": [1, 0, 0, 0], "c21": [0, 1, 0, 0]}  # example 1 is scored wrong
    tags = tmp_path / "new_tag_assignments.json"
    tags.write_text(json.dumps({"0": [], "1": ["Visually Difficult"], "2": []}))
    cfg = EvalConfig(roots={"winoground": str(tmp_path)}, winoground_clean_ids=str(tags))
    b = evaluate(cfg, ["winoground"], enc=FakeEncoder(txt, img))["benchmarks"]["winoground"]
    assert b["groups"]["group"] == pytest.approx(2 / 3) and b["groups"]["clean_group"] == 1.0
    assert b["subsets"]["winoground_clean"]["n"] == 2 and b["settings"]["clean_ids_n"] == 2
    assert len(b["settings"]["clean_ids_sha256"]) == 64
    (tmp_path / "ids.txt").write_text("0\n2\n")
    assert winoground.load_clean_ids(tmp_path / "ids.txt") == [0, 2]
    (tmp_path / "ids.txt").write_text("0\nx2\n")
    with pytest.raises(ValueError, match=r"ids.txt: line 2: 'x2' is not an example id"):
        winoground.load_clean_ids(tmp_path / "ids.txt")
    (tmp_path / "ids.json").write_text("[0, 7]")
    with pytest.raises(ValueError, match=r"id\(s\) \[7\] not in examples.jsonl"):
        evaluate(EvalConfig(roots={"winoground": str(tmp_path)}, winoground_clean_ids=str(tmp_path / "ids.json")),
                 ["winoground"], enc=FakeEncoder(txt, img))


def test_missing_images_refused_by_default_and_marked_when_allowed(tmp_path, capsys):
    """#30 item 2: Winoground ignored --strict; every benchmark now refuses partly missing images unless
    --allow-missing, which is recorded in results.json and marked in the report."""
    from macco.cli import main

    ckpt = _micro_checkpoint(tmp_path)
    wg = tmp_path / "wg"
    _dump_lines = [json.dumps({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1",
                               "caption_0": "a cup on a book", "caption_1": "a book on a cup"}) for i in range(3)]
    (wg / "images").mkdir(parents=True)
    (wg / "examples.jsonl").write_text("\n".join(_dump_lines) + "\n")
    for i in range(3):
        for k in (0, 1):
            if (i, k) != (2, 1):  # example 2 lacks one image
                _img(wg / "images" / f"ex_{i}_img_{k}.png")
    args = ["eval", "--model", "macco-micro", "--checkpoint", str(ckpt), "--benchmark", "winoground", "--root",
            str(wg), "--out", str(tmp_path / "r.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "winoground: 1 of 3 case(s) have no image file" in err and "example 2" in err
    assert str(wg / "images" / "ex_2_img_1") in err  # the file, named as the other benchmarks name theirs
    assert main(args + ["--allow-missing"]) == 0
    r = json.loads((tmp_path / "r.json").read_text())["benchmarks"]["winoground"]
    assert r["settings"]["allow_missing"] is True and r["subsets"]["winoground"]["missing_images"] == 1
    assert main(["report", f"macco={tmp_path / 'r.json'}", "--out", str(tmp_path / "rep")]) == 0
    assert "Scored with images missing (`--allow-missing`" in (tmp_path / "rep" / "results.md").read_text()


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
