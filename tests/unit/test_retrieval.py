"""The general-ability and text-tower benchmarks of ``macco eval`` (linear probe, COCO/Flickr retrieval, SICK-R /
STS-B, SentEval probing) on fixtures in the datasets' original file formats, through ``evaluate`` and the CLI:
known answers from encoders built to get them, the recall and C-search rules on hand-built inputs, the world."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from model.benchmarks import BENCHMARKS, EvalConfig, evaluate
from model.benchmarks import linear_probe, retrieval, senteval, sts


class DictEncoder:
    """Features from dicts: images by path, texts by string (an unknown key is an error, not a default)."""

    def __init__(self, img=None, txt=None):
        self.img, self.txt = img or {}, txt or {}

    @staticmethod
    def _unit(v):
        v = np.asarray(v, dtype=np.float64)
        return v / np.linalg.norm(v)

    def images(self, keys):
        return np.stack([self._unit(self.img[str(p)]) for p, _ in keys])

    def texts(self, texts):
        return np.stack([self._unit(self.txt[t]) for t in texts])


def _png(path: Path, colour=(200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), colour).save(path)
    return path


def _micro_cli(*args: str) -> int:
    from macco.cli import main

    return main(["eval", "--model", "macco-micro", *([] if "--checkpoint" in args else ["--random-init"]), *args])


# ---- retrieval ---------------------------------------------------------------------------------------------
def test_recall_at_k_on_a_hand_built_matrix():
    S = np.array([[0.9, 0.1, 0.5],   # query 0: positive 0 ranked 1st
                  [0.9, 0.1, 0.5],   # query 1: positive 1 ranked 3rd
                  [0.5, 0.2, 0.5]])  # query 2: positive 2 ties with item 0 -> ranked 2nd (earlier item first)
    P = np.eye(3, dtype=bool)
    h = retrieval.hits_at_k(S, P, ks=(1, 2, 3))
    assert h[1].tolist() == [True, False, False]
    assert h[2].tolist() == [True, False, True]
    assert h[3].tolist() == [True, True, True]
    # several positives (an image's captions): a hit when any of them is in the top k
    h = retrieval.hits_at_k(np.array([[0.1, 0.3, 0.2, 0.9]]), np.array([[True, True, False, False]]), ks=(1, 2))
    assert h[1].tolist() == [False] and h[2].tolist() == [True]
    with pytest.raises(ValueError, match="without a positive"):
        retrieval.hits_at_k(S, np.zeros((3, 3), bool))


def test_recall_matches_clip_benchmarks_definition_on_random_features():
    """clip_benchmark: R@k = mean over queries of [true positives in the top k / positives > 0]."""
    import torch

    rng = np.random.default_rng(0)
    I, T = rng.normal(size=(30, 8)), rng.normal(size=(150, 8))
    I /= np.linalg.norm(I, axis=1, keepdims=True)
    T /= np.linalg.norm(T, axis=1, keepdims=True)
    text_image = np.repeat(np.arange(30), 5)
    got = retrieval.recall(I, T, text_image)
    scores = torch.tensor(T @ I.T)
    pos = torch.zeros_like(scores, dtype=torch.bool)
    pos[torch.arange(150), torch.tensor(text_image)] = True
    for k in (1, 5, 10):
        for name, s, p in (("text_to_image", scores, pos), ("image_to_text", scores.T, pos.T)):
            top = torch.topk(s, k, dim=1).indices
            tp = torch.gather(p, 1, top).sum(1)
            ref = ((tp / p.sum(1)) > 0).float().mean().item()
            assert got[f"{name}/R@{k}"]["accuracy"] == pytest.approx(ref)
            assert got[f"{name}/R@{k}"]["n"] == len(s)


def _karpathy(root: Path) -> tuple[dict, dict]:
    """dataset_coco.json with 3 test images (2 captions each) plus a train and a restval image (3 each)."""
    recs, img, txt = [], {}, {}
    for k, split in enumerate(["test", "train", "test", "restval", "test"]):
        fname = f"COCO_val2014_{k:012d}.jpg"
        p = _png(root / "val2014" / fname, (40 * k, 10, 10))
        caps = [f"image {k} caption {j}" for j in range(2 + k % 2)]
        recs.append({"filepath": "val2014", "filename": fname, "split": split, "cocoid": k, "imgid": k,
                     "sentences": [{"raw": c, "tokens": c.split()} for c in caps]})
        img[str(p)] = np.eye(6)[k]
        for j, c in enumerate(caps):
            txt[c] = np.eye(6)[k] + 0.1 * j * np.eye(6)[5]
    (root / "dataset_coco.json").write_text(json.dumps({"dataset": "coco", "images": recs}))
    return img, txt


def test_retrieval_karpathy_perfect_and_shifted_encoders(tmp_path):
    img, txt = _karpathy(tmp_path)
    cfg = EvalConfig(model="fake", roots={"retrieval-coco": str(tmp_path)})
    r = evaluate(cfg, ["retrieval-coco"], enc=DictEncoder(img, txt))["benchmarks"]["retrieval-coco"]
    assert r["settings"]["images"] == 3 and r["settings"]["captions"] == 6  # test split only
    assert "'restval': 1" in r["settings"]["format"] and "'train': 1" in r["settings"]["format"]
    assert r["subsets"]["image_to_text/R@1"] == {"n": 3, "correct": 3, "accuracy": 1.0}
    assert r["subsets"]["text_to_image/R@1"] == {"n": 6, "correct": 6, "accuracy": 1.0}
    assert r["groups"]["rsum"] == 6.0
    # every caption points at the next test image: nothing at 1, everything at 5 (3 images in the gallery)
    test_ids = [0, 2, 4]
    shifted = {c: np.eye(6)[test_ids[(test_ids.index(int(c.split()[1])) + 1) % 3]] for c in txt
               if int(c.split()[1]) in test_ids}
    r = evaluate(cfg, ["retrieval-coco"], enc=DictEncoder(img, shifted))["benchmarks"]["retrieval-coco"]
    assert r["groups"]["i2t_R@1"] == 0.0 and r["groups"]["t2i_R@1"] == 0.0
    assert r["groups"]["i2t_R@5"] == 1.0 and r["groups"]["t2i_R@10"] == 1.0


def test_retrieval_flickr_list_format_through_the_cli(tmp_path):
    recs = []
    for k in range(4):
        _png(tmp_path / "flickr30k-images" / f"{1000 + k}.jpg", (60 * k, 90, 30))
        recs.append({"image": f"flickr30k-images/{1000 + k}.jpg", "caption": [f"photo {k} a", f"photo {k} b"]})
    (tmp_path / "flickr30k_test.json").write_text(json.dumps(recs))
    out = tmp_path / "r.json"
    assert _micro_cli("--benchmark", "retrieval-flickr", "--root", str(tmp_path), "--out", str(out)) == 0
    r = json.loads(out.read_text())["benchmarks"]["retrieval-flickr"]
    assert r["settings"]["format"].startswith("blip list") and r["settings"]["captions"] == 8
    assert r["subsets"]["image_to_text/R@1"]["n"] == 4 and r["subsets"]["text_to_image/R@1"]["n"] == 8
    assert r["groups"]["i2t_R@10"] == 1.0 and r["groups"]["t2i_R@10"] == 1.0  # 4 images, 8 captions
    assert all(0 <= v["accuracy"] <= 1 and v["correct"] == round(v["accuracy"] * v["n"]) for v in r["subsets"].values())


def test_retrieval_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset_flickr30k.json"):
        retrieval.load(tmp_path, "retrieval-flickr")
    (tmp_path / "flickr30k_test.json").write_text(json.dumps([{"image": "a.jpg", "caption": ["x"]},
                                                              {"image": "b.jpg", "caption": []}]))
    with pytest.raises(ValueError, match=r"flickr30k_test.json: record 1: no captions"):
        retrieval.load(tmp_path, "retrieval-flickr")
    (tmp_path / "flickr30k_test.json").write_text(json.dumps([{"image": "a.jpg", "caption": ["x"]}]))
    with pytest.raises(FileNotFoundError, match="1 of 1 image"):
        retrieval.load(tmp_path, "retrieval-flickr")
    (tmp_path / "dataset_flickr30k.json").write_text(json.dumps({"images": [{"filename": "a.jpg", "split": "test"}]}))
    with pytest.raises(ValueError, match=r"images\[0\]: missing field 'sentences'"):
        retrieval.load(tmp_path, "retrieval-flickr")


def test_retrieval_on_the_world_matches_the_probe(world):
    """The world's Karpathy file (split test) and its ARO-style coco_karpathy_test.json give the same numbers,
    and R@1 equals model/probes.py's retrieval on the same images and captions."""
    import open_clip
    import torch

    from model.factory import register_model_configs
    from model.benchmarks.scoring import Encoder
    from model.probes import image_features, retrieval as probe_retrieval, text_features

    register_model_configs()
    torch.manual_seed(0)
    model, _, pre = open_clip.create_model_and_transforms("macco-micro")
    tok = open_clip.get_tokenizer("macco-micro")
    enc = Encoder(model, pre, tok, batch_size=16)
    cfg = EvalConfig(model="macco-micro", roots={"retrieval-coco": str(world)})
    karpathy = evaluate(cfg, ["retrieval-coco"], enc=enc)["benchmarks"]["retrieval-coco"]
    cfg.roots["retrieval-coco"] = str(world / "benchmarks" / "aro")
    blip = evaluate(cfg, ["retrieval-coco"], enc=enc)["benchmarks"]["retrieval-coco"]
    n_test = len(json.loads((world / "scenes_test.json").read_text()))
    assert karpathy["subsets"]["image_to_text/R@1"]["n"] == n_test == blip["subsets"]["image_to_text/R@1"]["n"]
    assert karpathy["subsets"]["text_to_image/R@1"]["n"] == 5 * n_test
    assert karpathy["groups"] == pytest.approx(blip["groups"])
    images, captions, _ = retrieval.load(world, "retrieval-coco")
    G, _ = image_features(model, pre, [Path(p) for p in images])
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    T = text_features(model, tok, [c for cs in captions for c in cs])
    ref = probe_retrieval(G, T, np.repeat(np.arange(len(images)), [len(c) for c in captions]))
    assert karpathy["groups"]["i2t_R@1"] == pytest.approx(ref["i2t_r1"])
    assert karpathy["groups"]["t2i_R@1"] == pytest.approx(ref["t2i_r1"])


def test_world_retrieval_through_the_cli_into_the_results_table(world, tmp_path):
    from data_schemas import TABLES, read_table

    assert _micro_cli("--benchmark", "retrieval-coco", "--root", str(world), "--out", str(tmp_path / "r.json"),
                      "--results-table", str(tmp_path / "er")) == 0
    rows = {r["subset"]: r for r in read_table(TABLES["eval_results"], tmp_path / "er").to_pylist()
            if r["level"] == "subset"}
    assert set(rows) == {f"{d}/R@{k}" for d in ("image_to_text", "text_to_image") for k in (1, 5, 10)}
    for r in rows.values():
        assert r["benchmark"] == "retrieval-coco" and r["correct"] == round(r["accuracy"] * r["n"])
    assert rows["image_to_text/R@1"]["n"] * 5 == rows["text_to_image/R@1"]["n"]
    assert rows["image_to_text/R@1"]["accuracy"] <= rows["image_to_text/R@5"]["accuracy"] <= \
        rows["image_to_text/R@10"]["accuracy"]


# ---- linear probe ------------------------------------------------------------------------------------------
def test_regularisation_search_walks_like_clip_benchmark():
    seen = []

    def score(i):
        seen.append(i)
        return -abs(i - 37)

    # starts 0,16,...,96 -> 32; then [24,32,40] -> 40; [36,40,44] -> 36; [34,36,38] -> 36 (tie: earlier); [35,36,37]
    assert linear_probe.search_regularisation(score) == 37
    assert seen == [0, 16, 32, 48, 64, 80, 96, 24, 40, 36, 44, 34, 38, 35, 37]  # each index scored once
    assert linear_probe.search_regularisation(lambda i: -i) == 0
    assert linear_probe.search_regularisation(lambda i: i) == 96
    assert linear_probe.C_GRID[0] == pytest.approx(1e-6) and linear_probe.C_GRID[-1] == pytest.approx(1e6)


def _image_folder(root: Path, splits: dict[str, int], classes=("cat", "dog", "fox")) -> dict:
    """root/<split>/<class>/<i>.png; features: the class's one-hot plus a little per-image noise."""
    rng = np.random.default_rng(0)
    feats = {}
    for split, n in splits.items():
        for k, c in enumerate(classes):
            for i in range(n):
                p = _png(root / split / c / f"{i}.png", (80 * k, 60, 20 + i))
                feats[str(p)] = np.eye(len(classes))[k] + 0.05 * rng.normal(size=len(classes))
    return feats


def test_linear_probe_separable_features_score_one(tmp_path):
    feats = _image_folder(tmp_path, {"train": 10, "test": 4})
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    cfg = EvalConfig(model="fake", roots={"linear-probe": str(tmp_path)})
    r = evaluate(cfg, ["linear-probe"], enc=DictEncoder(feats))["benchmarks"]["linear-probe"]
    s = r["subsets"]["linear-probe"]
    assert (s["n"], s["correct"], s["accuracy"], s["classes"]) == (12, 12, 1.0, 3)
    assert (s["n_train"], s["n_val"]) == (24, 6)  # 20 % of the 30 train images carved for validation
    assert s["C"] in linear_probe.C_GRID.tolist() and s["val_accuracy"] == 1.0
    assert r["groups"]["top1"] == 1.0 and r["groups"]["mean_per_class_recall"] == 1.0
    assert r["settings"]["skipped_files"] == 1 and r["settings"]["validation"].startswith("random 20%")
    # a val/ split is used as given
    feats |= _image_folder(tmp_path, {"val": 2})
    r = evaluate(cfg, ["linear-probe"], enc=DictEncoder(feats))["benchmarks"]["linear-probe"]
    assert (r["subsets"]["linear-probe"]["n_train"], r["subsets"]["linear-probe"]["n_val"]) == (30, 6)
    assert r["settings"]["validation"] == "val split"


def test_linear_probe_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="train: split directory not found"):
        linear_probe.evaluate(DictEncoder(), tmp_path)
    _image_folder(tmp_path, {"train": 2, "test": 1}, classes=("cat", "dog"))
    _png(tmp_path / "test" / "emu" / "0.png")
    with pytest.raises(ValueError, match=r"class folder\(s\) \['emu'\] not in the train split"):
        linear_probe.evaluate(DictEncoder(), tmp_path)
    (tmp_path / "train" / "emu").mkdir()
    with pytest.raises(ValueError, match="emu: class folder without images"):
        linear_probe.read_split(tmp_path / "train")
    with pytest.raises(ValueError, match="too few to carve"):
        linear_probe.carve_validation(1)


def _world_image_folder(world: Path, out: Path) -> dict[str, str]:
    """An ImageFolder view of the world: every image under the kind of its largest shape; per class, every 4th
    image (by id) to test, the rest to train (a class with one image stays in train)."""
    by_class: dict[str, list[Path]] = {}
    for split in ("train", "val", "test"):
        for sc in json.loads((world / f"scenes_{split}.json").read_text()):
            big = max(sc["shapes"], key=lambda s: (s["box"][2] - s["box"][0]) * (s["box"][3] - s["box"][1]))
            by_class.setdefault(big["kind"], []).append(world / f"{split}2014" / sc["file_name"])
    label = {}
    for kind, paths in by_class.items():
        for i, p in enumerate(sorted(paths)):
            dest = out / ("test" if i % 4 == 3 else "train") / kind / p.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(p.read_bytes())
            label[str(dest)] = kind
    return label


def test_linear_probe_on_the_world(world, tmp_path):
    view = tmp_path / "view"
    label = _world_image_folder(world, view)
    kinds = sorted(set(label.values()))
    n_test = sum(Path(p).relative_to(view).parts[0] == "test" for p in label)
    oracle = DictEncoder({p: np.eye(len(kinds))[kinds.index(k)] for p, k in label.items()})
    r = linear_probe.evaluate(oracle, view)["subsets"]["linear-probe"]
    assert (r["n"], r["correct"], r["classes"]) == (n_test, n_test, len(kinds))
    out = tmp_path / "r.json"
    assert _micro_cli("--benchmark", "linear-probe", "--root", str(view), "--out", str(out)) == 0
    s = json.loads(out.read_text())["benchmarks"]["linear-probe"]["subsets"]["linear-probe"]
    assert s["n"] == n_test and s["n_train"] + s["n_val"] == len(label) - n_test
    assert 0 <= s["accuracy"] <= 1 and s["correct"] == round(s["accuracy"] * n_test)
    assert s["C"] in linear_probe.C_GRID.tolist() and str(f"{s['C']:.3g}") in s["C_tried"]


# ---- STS ---------------------------------------------------------------------------------------------------
SICK_HEADER = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
               "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\tSemEval_set")


def _pair_vectors(a: str, b: str, sim: float, txt: dict) -> None:
    """Text features whose cosine is exactly ``sim``."""
    txt[a] = np.array([1.0, 0.0])
    txt[b] = np.array([sim, np.sqrt(1 - sim ** 2)])


def _sts_fixture(root: Path, reverse: bool = False) -> dict:
    txt = {}
    rows = [SICK_HEADER]
    sets = ["TRAIN", "TEST", "TRIAL", "TEST", "TEST", "TEST", "TRAIN"]
    for k, (s, score) in enumerate(zip(sets, [4.5, 1.0, 3.2, 2.4, 4.9, 3.6, 1.5])):
        a, b = f"sick a {k}", f"sick b {k}"
        _pair_vectors(a, b, (1 - score / 5) if reverse else score / 5, txt)
        rows.append(f"{k + 1}\t{a}\t{b}\tNEUTRAL\t{score}\tA_neutral_B\tB_neutral_A\t{a}\t{b}\tFLICKR\tFLICKR\t{s}")
    (root / "SICK.txt").write_text("\n".join(rows) + "\n")
    lines = []
    for k, score in enumerate([0.0, 5.0, 2.75, 3.8, 1.2]):
        a, b = f"sts one {k}", f"sts two {k}"
        _pair_vectors(a, b, (1 - score / 5) if reverse else score / 5, txt)
        extra = "\tsrc1\tsrc2" if k == 2 else ""  # some original rows carry source columns
        lines.append(f"main-captions\tMSRvid\t2012test\t{k:04d}\t{score}\t{a}\t{b}{extra}")
    (root / "stsbenchmark").mkdir()
    (root / "stsbenchmark" / "sts-test.csv").write_text("\n".join(lines) + "\n")
    return txt


def test_sts_known_correlations(tmp_path):
    txt = _sts_fixture(tmp_path)
    cfg = EvalConfig(model="fake", roots={"sts": str(tmp_path)})
    r = evaluate(cfg, ["sts"], enc=DictEncoder(txt=txt))["benchmarks"]["sts"]
    assert r["subsets"]["sick-r"]["n"] == 4 and r["subsets"]["sts-b"]["n"] == 5  # SICK: the TEST rows only
    assert r["settings"]["sick-r"]["files"]["test"]["rows_per_set"] == {"TRAIN": 2, "TEST": 4, "TRIAL": 1}
    for key in ("sick-r_cosine_pearson", "sick-r_cosine_spearman", "sts-b_cosine_pearson", "sts-b_cosine_spearman"):
        assert r["groups"][key] == pytest.approx(1.0)
    # SICK.txt has TRAIN and TRIAL rows: SentEval's supervised protocol runs too (sick-r_pearson); STS-B has only
    # its test file here: cosine only, said so
    assert "sick-r_pearson" in r["groups"] and "sts-b_pearson" not in r["groups"]
    assert r["settings"]["sts-b"]["protocol"].startswith("cosine only")
    rev = tmp_path / "rev"
    rev.mkdir()
    r = evaluate(EvalConfig(model="fake", roots={"sts": str(rev)}), ["sts"],
                 enc=DictEncoder(txt=_sts_fixture(rev, reverse=True)))["benchmarks"]["sts"]
    assert r["groups"]["sts-b_cosine_spearman"] == pytest.approx(-1.0)
    assert r["groups"]["sick-r_cosine_pearson"] == pytest.approx(-1)
    # one file alone is evaluated, and the other is named as absent
    (tmp_path / "SICK.txt").unlink()
    r = sts.evaluate(DictEncoder(txt=txt), tmp_path)
    assert set(r["subsets"]) == {"sts-b"} and r["settings"]["not_found"] == ["sick-r"]


def test_stsb_glue_dev_and_sick_semeval_files(tmp_path):
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    txt, lines = {}, [head]
    for k, score in enumerate([5.0, 0.5, 3.0]):
        _pair_vectors(f"glue a {k}", f"glue b {k}", score / 5, txt)
        lines.append(f"{k}\tmain-news\tMSRpar\t2012test\t{k}\tnone\tnone\tglue a {k}\tglue b {k}\t{score}")
    (tmp_path / "STS-B").mkdir()
    (tmp_path / "STS-B" / "dev.tsv").write_text("\n".join(lines) + "\n")
    rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    for k, score in enumerate([1.0, 4.0, 2.0]):
        _pair_vectors(f"sem a {k}", f"sem b {k}", score / 5, txt)
        rows.append(f"{k + 1}\tsem a {k}\tsem b {k}\t{score}\tNEUTRAL")
    (tmp_path / "SICK_test_annotated.txt").write_text("\r\n".join(rows) + "\r\n")
    r = sts.evaluate(DictEncoder(txt=txt), tmp_path)
    assert r["subsets"]["sts-b"]["n"] == 3 and r["settings"]["sts-b"]["files"]["test"]["format"] == "glue"
    assert r["subsets"]["sts-b"]["split"] == "dev" and r["subsets"]["sick-r"]["n"] == 3
    assert r["groups"]["sts-b_cosine_spearman"] == pytest.approx(1.0)
    assert r["groups"]["sick-r_cosine_spearman"] == pytest.approx(1)


def test_sts_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no SICK"):
        sts.evaluate(DictEncoder(), tmp_path)
    p = tmp_path / "SICK.txt"
    p.write_text(SICK_HEADER + "\n" + "\t".join(["1", "a", "b", "NEUTRAL", "3.0"] + ["x"] * 6 + ["TEST"]) + "\n"
                 + "\t".join(["2", "a", "b", "NEUTRAL", "abc"] + ["x"] * 6 + ["TEST"]) + "\n")
    with pytest.raises(ValueError, match=r"SICK.txt: line 3: score 'abc' is not a number"):
        sts.read_sick(p)
    p.write_text(SICK_HEADER + "\n" + "\t".join(["1", "a", "b", "NEUTRAL", "3.0"] + ["x"] * 6 + ["DEV"]) + "\n")
    with pytest.raises(ValueError, match="line 2: SemEval_set 'DEV'"):
        sts.read_sick(p)
    p.write_text("pair_ID\tsentence_A\n1\ta\n")
    with pytest.raises(ValueError, match=r"header lacks column\(s\) \['sentence_B', 'relatedness_score'\]"):
        sts.read_sick(p)
    q = tmp_path / "test.tsv"
    q.write_text("index\tsentence1\tsentence2\n0\ta\tb\n")
    with pytest.raises(ValueError, match="GLUE's test.tsv is unlabelled"):
        sts.read_stsb(q)
    q.write_text("main-captions\tMSRvid\t2012test\t0001\t2.5\tonly one sentence\n")
    with pytest.raises(ValueError, match="line 1: 6 tab-separated fields"):
        sts.read_stsb(q)


def test_sts_through_the_cli(tmp_path, capsys):
    _sts_fixture(tmp_path)
    out = tmp_path / "r.json"
    assert _micro_cli("--benchmark", "sts", "--root", str(tmp_path), "--out", str(out),
                      "--results-table", str(tmp_path / "er")) == 0
    r = json.loads(out.read_text())["benchmarks"]["sts"]
    for key in ("sick-r", "sts-b"):
        for m in ("cosine_pearson", "cosine_spearman"):
            assert -1 <= r["subsets"][key][m] <= 1 and r["groups"][f"{key}_{m}"] == r["subsets"][key][m]
    assert -1 <= r["groups"]["sick-r_pearson"] <= 1  # SICK.txt brings TRAIN and TRIAL rows: SentEval's protocol
    from data_schemas import TABLES, read_table

    rows = [r for r in read_table(TABLES["eval_results"], tmp_path / "er").to_pylist() if r["level"] == "subset"]
    assert {(x["subset"], x["n"], x["accuracy"]) for x in rows} == {("sick-r", 4, None), ("sts-b", 5, None)}
    (tmp_path / "stsbenchmark" / "sts-test.csv").write_text("a\tb\tc\td\tfive\ts1\ts2\n")
    assert _micro_cli("--benchmark", "sts", "--root", str(tmp_path)) == 2
    assert "sts-test.csv: line 1: score 'five' is not a number" in capsys.readouterr().err


# ---- SentEval probing ------------------------------------------------------------------------------------
def _probing_fixture(root: Path) -> dict:
    """bigram_shift.txt (O/I) and past_present.txt (PRES/PAST): features carry the class, plus noise."""
    rng = np.random.default_rng(1)
    txt = {}
    for fname, classes in (("bigram_shift.txt", ("O", "I")), ("past_present.txt", ("PRES", "PAST"))):
        lines = []
        for part, n in (("tr", 12), ("va", 4), ("te", 6)):
            for i in range(n):
                c = classes[i % 2]
                s = f"{fname[:4]} {part} sentence {i} ."
                txt[s] = np.r_[np.eye(2)[classes.index(c)], 0.1 * rng.normal(size=2)]
                lines.append(f"{part}\t{c}\t{s}")
        (root / fname).write_text("\n".join(lines) + "\n")
    return txt


def test_senteval_probing_known_answers(tmp_path):
    txt = _probing_fixture(tmp_path)
    cfg = EvalConfig(model="fake", roots={"senteval-probing": str(tmp_path)})
    r = evaluate(cfg, ["senteval-probing"], enc=DictEncoder(txt=txt))["benchmarks"]["senteval-probing"]
    assert set(r["subsets"]) == {"BigramShift", "Tense"}
    for s in r["subsets"].values():
        assert (s["n"], s["correct"], s["accuracy"], s["n_train"], s["n_dev"], s["classes"]) == (6, 6, 1.0, 12, 4, 2)
        assert s["dev_accuracy"] == 1.0 and s["C"] == 0.25  # every C ties on dev: SentEval keeps the first
        assert list(s["C_tried"]) == ["0.25", "0.5", "1", "2", "4", "8"]
    assert r["groups"]["mean"] == 1.0
    assert len(r["settings"]["tasks_missing"]) == 8 and "WordContent" in r["settings"]["tasks_missing"]


def test_senteval_split_classifier_picks_c_on_dev():
    """C is the first of SentEval's grid with the best dev accuracy (in %, rounded to 2 decimals)."""
    rng = np.random.default_rng(0)
    X_tr = np.r_[rng.normal(-1, 1, (200, 2)), rng.normal(1, 1, (40, 2))]
    y_tr = np.r_[np.zeros(200, int), np.ones(40, int)]
    scores = {}
    for C in senteval.REGS:
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(C=C, random_state=senteval.SEED, max_iter=senteval.MAX_ITER).fit(X_tr, y_tr)
        scores[C] = round(100 * clf.score(X_tr, y_tr), 2)
    r = senteval.split_classifier({"train": X_tr, "dev": X_tr, "test": X_tr}, {"train": y_tr, "dev": y_tr,
                                                                              "test": y_tr})
    best = max(scores.values())
    assert r["C"] == next(C for C, s in scores.items() if s == best)
    assert r["dev_accuracy"] == best / 100 and r["n"] == 240


def test_senteval_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="none of the SentEval probing files"):
        senteval.evaluate(DictEncoder(), tmp_path)
    p = tmp_path / "subj_number.txt"
    p.write_text("tr\tNN\ta cat sat .\ntx\tNNS\tcats sat .\n")
    with pytest.raises(ValueError, match=r"subj_number.txt: line 2: partition 'tx'"):
        senteval.load(p)
    p.write_text("tr\tNN\ta cat sat .\nva\tNN\ta dog sat .\nte\tNNS\tdogs sat .\n")
    with pytest.raises(ValueError, match=r"test class\(es\) \['NNS'\] never occur in the train partition"):
        senteval.load(p)
    p.write_text("tr\tNN\ta cat sat .\nva\tNN\n")
    with pytest.raises(ValueError, match="line 2: 2 tab-separated field"):
        senteval.load(p)
    p.write_text("tr\tNN\ta cat sat .\nte\tNN\ta dog sat .\n")
    with pytest.raises(ValueError, match="no dev instances"):
        senteval.load(p)


def test_senteval_through_the_cli_and_the_help(tmp_path):
    _probing_fixture(tmp_path)
    out = tmp_path / "r.json"
    assert _micro_cli("--benchmark", "senteval-probing", "--root", str(tmp_path), "--out", str(out)) == 0
    r = json.loads(out.read_text())["benchmarks"]["senteval-probing"]
    assert {k: v["n"] for k, v in r["subsets"].items()} == {"BigramShift": 6, "Tense": 6}
    assert all(0 <= v["accuracy"] <= 1 and v["C"] in senteval.REGS for v in r["subsets"].values())
    from macco.cli import build_parser

    ev = build_parser()._subparsers._group_actions[0].choices["eval"]
    help_text = next(a.help for a in ev._actions if a.dest == "benchmark")
    for name in ("linear-probe", "retrieval-coco", "retrieval-flickr", "sts", "senteval-probing"):
        assert name in BENCHMARKS and name in help_text


def _senteval_sick(root: Path, n: dict[str, int], seed: int = 0) -> dict:
    """SentEval's three SICK files (a header; pair_ID, sentence_A, sentence_B, relatedness_score, entailment) with
    scores in [1, 5] and text features whose cosine is a monotone function of the score."""
    rng = np.random.RandomState(seed)
    txt = {}
    files = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
    k = 0
    for split, count in n.items():
        rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        for _ in range(count):
            score = round(float(rng.uniform(1, 5)), 2)
            a, b = f"sick {split} a {k}", f"sick {split} b {k}"
            _pair_vectors(a, b, np.cos(np.pi / 2 * (5 - score) / 4), txt)
            rows.append(f"{k}\t{a}\t{b}\t{score}\tNEUTRAL")
            k += 1
        (root / files[split]).write_text("\n".join(rows) + "\n")
    return txt


def test_sts_senteval_supervised_protocol_on_a_known_answer(tmp_path):
    """#30 item 4: SICK-R as SentEval scores it (a regressor on [|u - v|, u * v] trained on train, chosen on dev):
    with features that determine the score, the test Pearson is ~1; the unsupervised cosine is kept as a second,
    named metric."""
    txt = _senteval_sick(tmp_path, {"train": 300, "dev": 60, "test": 60})
    r = sts.evaluate(DictEncoder(txt=txt), tmp_path)
    s = r["subsets"]["sick-r"]
    assert (s["n"], s["n_train"], s["n_dev"]) == (60, 300, 60)
    assert s["pearson"] > 0.98 and s["dev_pearson"] > 0.98 and 0 < s["mse"] < 1.0
    assert s["cosine_spearman"] == pytest.approx(1.0)  # the cosine is monotone in the score by construction
    assert r["groups"]["sick-r_pearson"] == s["pearson"] and r["groups"]["sick-r_cosine_pearson"] == s["cosine_pearson"]
    assert r["settings"]["sick-r"]["protocol"] == "senteval (supervised) and cosine" and r["settings"]["seed"] == 1111
    assert {sp: f["split"] for sp, f in r["settings"]["sick-r"]["files"].items()} == \
        {"train": "TRAIN", "dev": "TRIAL", "test": "TEST"}  # each split file recorded as its own set
    torch.manual_seed(7)
    state = torch.get_rng_state()
    again = sts.evaluate(DictEncoder(txt=txt), tmp_path)["subsets"]["sick-r"]
    assert again["pearson"] == s["pearson"]  # seeded: the same numbers
    assert torch.equal(torch.get_rng_state(), state)  # and the process's RNG left as it was


def test_senteval_targets_and_early_stopping_rule():
    """The target distribution (Tai et al.'s, SentEval's encode_labels) and the stopping rule: the best dev round
    is kept, training stops at the fourth round that does not improve it (rounds of 50 epochs)."""
    y = np.array([3.6, 5.0, 1.0, 2.25])
    t = sts.encode_labels(y)
    assert t.tolist()[0] == pytest.approx([0, 0, 0.4, 0.6, 0]) and t[1].tolist() == [0, 0, 0, 0, 1]
    assert np.allclose(t @ np.arange(1, 6), y) and np.allclose(t.sum(1), 1)
    X = np.random.RandomState(0).randn(40, 6).astype(np.float32)
    flat = (X[:10], np.full(10, 3.0))  # a constant dev set: its Pearson is nan -> 0, never improved after round 1
    r = sts.relatedness_regression((X, np.linspace(1, 5, 40)), flat, (X[:10], np.linspace(1, 5, 10)))
    assert r["epochs"] == 250 and r["dev_pearson"] == 0.0
