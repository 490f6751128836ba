import json

import numpy as np
import pytest
from PIL import Image

from model.benchmarks import EvalConfig, aro, evaluate, sugarcrepe, valse, vlchecklist, whatsup, winoground
from model.benchmarks.scoring import Case, MissingImages, score_cases, tally
from tests_support import SHARED, needs_shared


class FakeEncoder:
    """Deterministic features: images by path, texts by string, from dicts (unknown -> a fixed vector)."""

    def __init__(self, img=None, txt=None, dim=4):
        self.img, self.txt, self.dim = img or {}, txt or {}, dim

    def _v(self, table, key):
        v = np.asarray(table.get(key, np.ones(self.dim)), dtype=np.float64)
        return v / np.linalg.norm(v)

    def images(self, keys):
        return np.stack([self._v(self.img, k[0]) for k in keys]) if keys else np.zeros((0, self.dim))

    def texts(self, texts):
        return np.stack([self._v(self.txt, t) for t in texts]) if texts else np.zeros((0, self.dim))


def test_needs_shared_skips_only_when_a_file_is_absent():
    """The reference files beside the repo (../shared) are absent in a bare clone: tests reading them skip."""
    absent = needs_shared("no/such/file.json").mark
    assert absent.args == (True,) and absent.kwargs["reason"] == f"needs {SHARED / 'no/such/file.json'} " \
                                                                  "(not in a bare clone)"
    assert needs_shared().mark.args == (False,)


@needs_shared("benchmarks/sugar_crepe")
def test_real_sugarcrepe_files():
    cases = sugarcrepe.load(SHARED / "benchmarks" / "sugar_crepe")
    counts = {s: sum(c.subset == s for c in cases) for s in sugarcrepe.SUBSETS}
    assert counts == {"add_att": 692, "add_obj": 2062, "replace_att": 788, "replace_obj": 1652, "replace_rel": 1406,
                      "swap_att": 666, "swap_obj": 245}
    assert len(cases) == 7511
    ids = {c.meta["id"] for c in cases if c.subset == "swap_obj"}
    assert "108" not in ids and "109" in ids
    assert all(c.true_index == 1 and c.image.endswith(".jpg") and "val2017" in c.image for c in cases)


@needs_shared("benchmarks/aro_vg_relation_excluded.json")
def test_exclusion_lists_shipped_match_the_shared_files():
    shipped = json.loads(aro.EXCLUDED.read_text())
    shared = json.loads((SHARED / "benchmarks" / "aro_vg_relation_excluded.json").read_text())
    assert shipped == shared
    a, m = aro.excluded_relations("aro_notebook"), aro.excluded_relations("macco")
    assert len(a) == 157 and len(m) == 160 and m - a == {"leaning against", "pulled by", "pulling"}


def test_tie_rules_follow_each_benchmark():
    enc = FakeEncoder()  # every text and image maps to the same vector: every case is an exact tie
    vgr = [Case("x.jpg", ["false", "true"], 1, "vg", group="on")]
    order = [Case("x.jpg", ["orig", "p1", "p2", "p3", "p4"], 0, "order")]
    scores = [np.array([1.0, 1.0])]
    assert tally(vgr, scores)["vg"].as_dict() == {"n": 1, "correct": 0, "accuracy": 0.0, "ties": 1,
                                                  "missing_images": 0}
    r = tally(order, [np.ones(5)])["order"]
    assert r.correct == 1 and r.ties == 1
    assert enc.texts(["a"]).shape == (1, 4)


def test_vgr_macro_rounds_and_excludes():
    cases = [Case("i", ["f", "t"], 1, "vg", group=g) for g in ["on", "on", "on", "near", "holding"]]
    scores = [np.array([0, 1.0]), np.array([0, 1.0]), np.array([1.0, 0]), np.array([0, 1.0]), np.array([1.0, 0])]
    g = aro.vgr_groups(cases, scores, "aro_notebook")
    assert "near" in aro.excluded_relations()
    assert g["per_relation"]["on"] == 0.6667 and g["macro"] == pytest.approx((0.6667 + 0.0) / 2)
    assert g["relations_kept"] == 2
    ga = aro.vga_groups(cases, scores, min_count=3)
    assert ga["groups_kept"] == 1 and ga["macro"] == 0.6667


def test_order_perturbations_are_seeded_and_pre_captioned():
    assert aro.pre_caption("A man (riding) a horse!!  ") == "a man riding a horse"
    a, b = aro.TextShuffler(seed=1), aro.TextShuffler(seed=1)
    cap = "A big brown dog runs across the green field with a small red ball"
    ops = ("shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj", "shuffle_within_trigrams", "shuffle_trigrams")
    outs = [getattr(a, o)(cap) for o in ops]
    assert outs == [getattr(b, o)(cap) for o in ops]
    for o in outs:
        assert sorted(o.lower().split()) == sorted(cap.lower().split())
    assert len(set(outs)) > 1


def test_batched_scorer_equals_a_naive_per_sample_loop(world):
    import open_clip
    import torch

    from model.factory import register_model_configs
    from model.benchmarks.scoring import Encoder

    register_model_configs()
    torch.manual_seed(0)
    model, _, pre = open_clip.create_model_and_transforms("macco-micro")
    tok = open_clip.get_tokenizer("macco-micro")
    enc = Encoder(model, pre, tok, batch_size=7)
    cases = aro.load_vg(world / "benchmarks" / "aro", "relation") + sugarcrepe.load(world / "benchmarks" / "sugarcrepe")
    batched = score_cases(enc, cases)
    model.eval()
    with torch.no_grad():
        for c, s in zip(cases, batched):
            with Image.open(c.image) as im:
                im = im.convert("RGB")
                if c.crop:
                    x, y, w, h = c.crop
                    im = im.crop((x, y, x + w, y + h))
            fi = torch.nn.functional.normalize(model.encode_image(pre(im)[None]), dim=-1)
            ft = torch.nn.functional.normalize(model.encode_text(tok(c.options)), dim=-1)
            naive = (ft @ fi[0]).numpy()
            assert np.allclose(s, naive, atol=1e-5)
            assert int(np.argmax(s)) == int(np.argmax(naive))


def test_every_synthetic_set_reads_back_with_its_counts(world):
    from pipeline.world_benchmarks import benchmark_roots

    counts = json.loads((world / "benchmarks" / "benchmarks.json").read_text())["counts"]
    roots = benchmark_roots(world)
    assert len(aro.load_vg(roots["aro-vgr"], "relation")) == counts["aro-vgr"]
    assert len(aro.load_vg(roots["aro-vga"], "attribution")) == counts["aro-vga"]
    order = aro.load_order(f"{roots['coco-order']}/coco_karpathy_test.json", roots["coco-order"], "coco-order")
    assert len(order) == counts["coco-order"] and all(len(c.options) == 5 for c in order)
    sc = sugarcrepe.load(roots["sugarcrepe"])
    assert {s: sum(c.subset == s for c in sc) for s in sugarcrepe.SUBSETS} == \
        {s: counts[f"sugarcrepe/{s}"] for s in sugarcrepe.SUBSETS}
    vc = vlchecklist.load(roots["vl-checklist"])
    assert {c.group for c in vc} == {"A-color", "A-size", "R-spatial", "O-center"}
    assert all("/vg/" in c.image for c in vc)
    va = valse.load(roots["valse"])
    assert {c.subset for c in va} == {"relations", "counting-hard", "existence"}
    wu = whatsup.load(roots["whatsup"])
    assert all(len(c.options) == 4 and c.true_index == 0 and "/controlled_images/" in c.image for c in wu)
    for c in sc + vc + va + wu + order:
        assert __import__("os").path.exists(c.image), c.image


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


def test_whatsup_qa_and_prefix(tmp_path):
    (tmp_path / "coco_qa_two_obj.json").write_text(json.dumps([[48213, "a bottle above a sink", "a bottle below a sink"]]))
    (tmp_path / "vg_qa_two_obj.json").write_text(json.dumps([[7, "a cup left of a plate", "a cup right of a plate"]]))
    cases = whatsup.load(tmp_path)
    assert [c.image.split("/")[-2:] for c in cases] == [["val2017", "000000048213.jpg"], ["vg_images", "7.jpg"]]
    assert {c.subset for c in cases} == {"coco_qa_two", "vg_qa_two"}  # VG-QA two is VG, not COCO


def test_winoground_scores(tmp_path):
    (tmp_path / "images").mkdir()
    for n in ("ex_0_img_0", "ex_0_img_1"):
        Image.new("RGB", (8, 8)).save(tmp_path / "images" / f"{n}.png")
    (tmp_path / "examples.jsonl").write_text(json.dumps({"id": 0, "image_0": "ex_0_img_0", "image_1": "ex_0_img_1",
                                                         "caption_0": "cup on book", "caption_1": "book on cup"}) + "\n")
    img = {str(tmp_path / "images" / "ex_0_img_0.png"): [1, 0, 0, 0], str(tmp_path / "images" / "ex_0_img_1.png"): [0, 1, 0, 0]}
    enc = FakeEncoder(img, {"cup on book": [1, 0.1, 0, 0], "book on cup": [0.2, 1, 0, 0]})
    r = winoground.evaluate(enc, tmp_path, winoground.load(tmp_path))
    assert r == {"n": 1, "missing_images": 0, "text": 1.0, "image": 1.0, "group": 1.0, "missing_ids": []}


def test_missing_images_are_refused_unless_allowed_then_counted(world, tmp_path):
    """#30: a benchmark whose images are partly missing is an error naming the count and examples (the authors'
    harnesses crash); with allow_missing the rest is scored and the missing cases counted per subset."""
    import shutil

    root = tmp_path / "sc"
    shutil.copytree(world / "benchmarks" / "sugarcrepe", root)
    gone = sorted((root / "val2017").iterdir())[0]
    gone.unlink()
    cases = sugarcrepe.load(root)
    scores = score_cases(FakeEncoder(), cases)
    n_missing = sum(c.image == str(gone) for c in cases)
    with pytest.raises(MissingImages, match=rf"sugarcrepe: {n_missing} of {len(cases)} case\(s\) have no image "
                                            rf"file \(1 distinct, e\.g\. \['{gone}'\]\).*--allow-missing"):
        tally(cases, scores, name="sugarcrepe")
    res = tally(cases, scores, allow_missing=True)
    assert n_missing and sum(r.missing_images for r in res.values()) == n_missing


def test_cli_eval_json_and_results_table(world, tmp_path, capsys):
    import open_clip
    import torch

    from data_schemas import TABLES, read_table
    from macco.cli import main
    from model.factory import register_model_configs

    register_model_configs()
    torch.save({"state_dict": open_clip.create_model("macco-micro").state_dict()}, tmp_path / "m.pt")
    args = ["eval", "--model", "macco-micro", "--checkpoint", str(tmp_path / "m.pt"), "--world", str(world),
            "--benchmark", "all", "--out", str(tmp_path / "r.json"), "--results-table", str(tmp_path / "er"),
            "--vga-min-count", "1"]
    assert main(args) == 0
    out = json.loads((tmp_path / "r.json").read_text())
    assert set(out["benchmarks"]) == {"aro-vgr", "aro-vga", "coco-order", "sugarcrepe", "vl-checklist", "valse",
                                      "whatsup"}
    for b in out["benchmarks"].values():
        for v in b["subsets"].values():
            assert set(v) == {"n", "correct", "accuracy", "ties", "missing_images"}
    assert len(out["checkpoint_sha256"]) == 64
    rows = read_table(TABLES["eval_results"], tmp_path / "er").to_pylist()
    assert main(args) == 0
    assert len(read_table(TABLES["eval_results"], tmp_path / "er").to_pylist()) == 2 * len(rows)
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "sugarcrepe", "valse", "--root", "x"]) == 2
    with pytest.raises(ValueError, match="no root"):
        evaluate(EvalConfig(model="macco-micro"), ["sugarcrepe"], enc=FakeEncoder())


def test_zeroshot_on_an_image_folder(tmp_path):
    import open_clip
    import torch

    from model.factory import register_model_configs
    from model.benchmarks import zeroshot
    from model.benchmarks.scoring import Encoder

    for cls, colour in (("red_thing", (220, 20, 20)), ("blue_thing", (20, 20, 220))):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.new("RGB", (32, 32), colour).save(tmp_path / cls / f"{i}.png")
    (tmp_path / "classnames.txt").write_text("blue thing\nred thing\n")
    register_model_configs()
    torch.manual_seed(0)
    model, _, pre = open_clip.create_model_and_transforms("macco-micro")
    r = zeroshot.evaluate(Encoder(model, pre, open_clip.get_tokenizer("macco-micro")), tmp_path)
    assert r["n"] == 6 and r["classes"] == 2 and r["templates"] == 80
    assert r["top1"] in {0.0, 0.5, 1.0} and r["top2"] == 1.0
    (tmp_path / "classnames.txt").write_text("only one\n")
    with pytest.raises(ValueError, match="1 names for 2 class folders"):
        zeroshot.evaluate(Encoder(model, pre, open_clip.get_tokenizer("macco-micro")), tmp_path)


def test_the_registry_is_the_one_list_of_benchmarks():
    """One record per name, each either a case benchmark (load + groups) or a direct one (run); every module under
    model/benchmarks/ keys the evaluate stage; the CLI's --benchmark choices are the registry's names, read
    without torch."""
    import subprocess
    import sys
    from pathlib import Path

    from macco.cli import build_parser
    from model.benchmarks import BENCHMARKS, REGISTRY, case_groups
    from data_schemas.provenance import module_closure
    from model.benchmarks.registry import code_roots, get

    assert tuple(REGISTRY) == BENCHMARKS and len(set(BENCHMARKS)) == 15
    for b in REGISTRY.values():
        assert (b.run is None) == (b.load is not None and b.groups is not None and b.report_groups is not None), b
        assert b.code().__name__ == f"model.benchmarks.{b.module}"
    pkg = Path(aro.__file__).parent
    assert {f"model.benchmarks.{p.stem}" for p in pkg.glob("*.py") if p.stem != "__init__"} | {
        "model.benchmarks"} <= set(module_closure(*code_roots()))
    with pytest.raises(ValueError, match="unknown benchmark 'nope'"):
        get("nope")
    assert case_groups("zeroshot", Case("x.png", ["a"], 0, "s"), EvalConfig()) == []
    ev = build_parser()._subparsers._group_actions[0].choices["eval"]
    assert list(next(a for a in ev._actions if a.dest == "benchmark").choices) == [*BENCHMARKS, "all"]
    code = ("import sys\nfrom macco.cli import build_parser\nbuild_parser()\n"
            "assert 'torch' not in sys.modules and 'model.benchmarks.scoring' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
