"""model/benchmarks/retrieval.py: COCO/Flickr retrieval on fixtures in the datasets' original file formats, through
``evaluate`` and the CLI: the recall rule on hand-built inputs, known answers, the world."""
import json
from pathlib import Path

import numpy as np
import pytest

from model.benchmarks import EvalConfig, evaluate, retrieval
from tests_support import DictEncoder, coloured_png as _png, micro_eval_cli as _micro_cli


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
