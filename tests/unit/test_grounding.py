import numpy as np
import pytest
from PIL import Image

from data_schemas import TABLES, read_table
from pipeline.grounding import make_grounder
from pipeline.grounding.annotations import AnnotationsGrounder
from pipeline.grounding.base import (GroundingConfig, GroundItem, build_prompt,
                                     phrase_token_indices, select_boxes)
from pipeline.grounding.plan import object_queries
from pipeline.captions_stage import read_caption_input
from pipeline.grounding.stage import ground_stage, read_instances
from pipeline.masks_stage import MasksConfig, masks_stage
from pipeline.parse_stage import ParseConfig, parse_stage
from tests_support import build_tiny_groundingdino_py, build_tiny_hf_groundingdino, write_tiny_bert


def test_prompt_and_phrase_tokens(tmp_path):
    from transformers import AutoTokenizer

    prompt, spans = build_prompt(["Small red circle", "a big. square"])
    assert prompt == "small red circle . a big square ."
    assert [prompt[s:e] for s, e in spans] == ["small red circle", "a big square"]
    tok = AutoTokenizer.from_pretrained(write_tiny_bert(tmp_path / "bert", with_model=False))
    enc = tok(prompt, return_offsets_mapping=True)
    toks = phrase_token_indices(enc["offset_mapping"], spans)
    words = [tok.convert_ids_to_tokens([enc["input_ids"][i] for i in t]) for t in toks]
    assert words == [["small", "red", "circle"], ["a", "big", "square"]]


def test_select_boxes_known_answer():
    # 3 queries, 6 tokens; phrase 0 = tokens 1-2, phrase 1 = tokens 4
    probs = np.array([[0.0, 0.9, 0.2, 0.0, 0.1, 0.0],   # -> phrase 0, score 0.9
                      [0.0, 0.1, 0.1, 0.0, 0.5, 0.0],   # -> phrase 1, score 0.5
                      [0.0, 0.3, 0.0, 0.0, 0.2, 0.0]])  # below box threshold 0.35: dropped
    boxes = np.array([[0.5, 0.5, 0.5, 0.5], [0.9, 0.9, 0.4, 0.4], [0.1, 0.1, 0.1, 0.1]])
    out = select_boxes(probs, boxes, [[1, 2], [4]], ["a", "b"], 0.35, 0.25, width=100, height=200)
    assert [[b.xyxy for b in p] for p in out] == [[(25.0, 50.0, 75.0, 150.0)], [(70.0, 140.0, 100.0, 200.0)]]
    assert out[0][0].score == pytest.approx(0.9) and out[1][0].label == "b"
    # text threshold: phrase 1's best token 0.5 < 0.6 -> query 1 unassigned
    out = select_boxes(probs, boxes, [[1, 2], [4]], ["a", "b"], 0.35, 0.6, width=100, height=200)
    assert len(out[0]) == 1 and out[1] == []
    with pytest.raises(ValueError, match="expected probs"):
        select_boxes(probs, boxes[:2], [[1]], ["a"], 0.3, 0.2, 10, 10)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("gdino")
    return {"hf": build_tiny_hf_groundingdino(root), "gd": build_tiny_groundingdino_py(root / "gd")}


@pytest.mark.parametrize("backend", ["hf", "groundingdino"])
def test_tiny_model_backends_load_and_ground(tiny_models, backend):
    if backend == "hf":
        cfg = GroundingConfig(backend="hf", model_dir=str(tiny_models["hf"]), box_threshold=0.0, text_threshold=0.0)
    else:
        cfg = GroundingConfig(backend="groundingdino", box_threshold=0.0, text_threshold=0.0,
                              extra={"image_size": 224}, **tiny_models["gd"])
    g = make_grounder(cfg)
    imgs = [Image.new("RGB", (64, 48), (200, 10, 10)), Image.new("RGB", (40, 80), (0, 0, 200))]
    items = [GroundItem(1, 64, 48, ["red circle", "small blue square"], imgs[0]), GroundItem(2, 40, 80, ["dog"], imgs[1])]
    out = g.ground(items)
    assert [len(o) for o in out] == [2, 1]
    for it, per_phrase in zip(items, out):
        assert any(per_phrase)
        for phrase, boxes in zip(it.phrases, per_phrase):
            for b in boxes:
                x1, y1, x2, y2 = b.xyxy
                assert 0 <= x1 < x2 <= it.width and 0 <= y1 < y2 <= it.height and b.label == phrase
    # batched == one image at a time, all boxes kept (same image size and prompt: image and text padding
    # change border features otherwise, as in any DETR-style batch)
    g.cfg.max_boxes_per_phrase = 0
    items = [GroundItem(1, 64, 48, ["red circle", "dog"], imgs[0]),
             GroundItem(2, 64, 48, ["red circle", "dog"], Image.new("RGB", (64, 48), (0, 0, 200)))]
    out = g.ground(items)
    single = [g.ground([it])[0] for it in items]
    for a, b in zip(out, single):
        for pa, pb in zip(a, b):
            assert np.allclose(sorted(x.xyxy for x in pa), sorted(x.xyxy for x in pb), atol=1e-3)


def test_batches_group_image_shapes_and_results_keep_input_order(tiny_models):
    from pipeline.grounding.base import size_batches

    g = make_grounder(GroundingConfig(backend="groundingdino", box_threshold=0.0, text_threshold=0.0, batch_size=2,
                                      extra={"image_size": 64}, **tiny_models["gd"]))
    sizes = [(64, 48), (48, 64), (64, 48), (48, 64), (96, 72)]
    words = ["cat", "dog", "cup", "bus", "car"]
    items = [GroundItem(i, w, h, words[: i + 1], Image.new("RGB", (w, h), (40 * i, 90, 200)))
             for i, (w, h) in enumerate(sizes)]
    assert size_batches(items, 2) == [[1, 3], [0, 2], [4]]  # portrait pair, landscape pair, then the larger one
    shapes = []
    forward = g._forward

    def recording(tensors, prompts):
        shapes.append({tuple(t.shape) for t in tensors})
        return forward(tensors, prompts)

    g._forward = recording
    out = g.ground(items)
    assert all(len(s) == 1 for s in shapes[:2])  # no padding inside the two equal-shape batches
    assert [len(o) for o in out] == [1, 2, 3, 4, 5]
    for it, per_phrase in zip(items, out):
        assert all(b.label == phrase for phrase, boxes in zip(it.phrases, per_phrase) for b in boxes)


def test_groundingdino_checkpoint_mismatch_is_a_clear_error(tiny_models, tmp_path):
    import torch

    bad = tmp_path / "bad.pth"
    sd = torch.load(tiny_models["gd"]["checkpoint"], weights_only=True)["model"]
    sd.pop(next(iter(sd)))
    torch.save({"model": sd}, bad)
    with pytest.raises(ValueError, match="does not match"):
        make_grounder(GroundingConfig(backend="groundingdino", **{**tiny_models["gd"], "checkpoint": str(bad)}))
    with pytest.raises(FileNotFoundError, match="bert_dir"):
        make_grounder(GroundingConfig(backend="groundingdino", **{**tiny_models["gd"], "bert_dir": "/nope"}))


def test_annotations_grounder_exact_on_world(world):
    from pipeline.world import load_scenes

    inst = read_instances(world, ["val"])
    g = AnnotationsGrounder(inst)
    for scene in load_scenes(world, "val"):
        for s in scene.shapes:
            size = {"small": "little", "large": "big"}[s.size]
            boxes = g.match(scene.image_id, f"{size} {s.colour} {s.kind}")
            assert [b.xyxy for b in boxes] == [pytest.approx(s.box, abs=0.11)]
    assert g.category("people") == "person" and g.category("dogs") == "dog"


def test_annotations_grounder_coco_synonyms():
    inst = {1: [{"box_xyxy": [0, 0, 10, 10], "category": "person", "attributes": {}},
                {"box_xyxy": [5, 5, 20, 20], "category": "horse", "attributes": {}}]}
    g = AnnotationsGrounder(inst)
    assert [b.label for b in g.match(1, "young man")] == ["person"]
    assert [b.label for b in g.match(1, "brown horse")] == ["horse"]
    assert g.match(1, "red car") == []


def test_object_queries():
    rows = [dict(concept_id=0, kind="object", text="man", char_start=2, char_end=5),
            dict(concept_id=1, kind="object", text="horse", char_start=19, char_end=24),
            dict(concept_id=2, kind="attribute", text="brown", char_start=13, char_end=18, object_id=1),
            dict(concept_id=3, kind="attribute", text="old", char_start=9, char_end=12, object_id=1),
            dict(concept_id=4, kind="relation", text="riding", char_start=6, char_end=12, subject_id=0, object_id=1)]
    q, needs = object_queries(rows)
    assert q == {1: "old brown horse", 0: "man"} and needs == {2: [1], 3: [1], 4: [0, 1]}


def test_ground_and_patch_stages_on_world(world, tmp_path):
    from pipeline.captions_stage import CaptionsConfig, captions_stage

    captions_stage(CaptionsConfig(root=str(world), splits=("val",)), tmp_path)
    caps = read_caption_input(tmp_path / "captions")
    parse_stage(ParseConfig(), caps, tmp_path)
    sg = read_table(TABLES["scene_graphs"], tmp_path / "scene_graphs").to_pylist()
    # corrupt one image: its phrases still go through the annotations backend (no pixels needed) ...
    m = ground_stage(GroundingConfig(shard_size=3), caps, sg, world, tmp_path / "g",
                     instances=read_instances(world, ["val"]))
    regions = read_table(TABLES["regions"], tmp_path / "g" / "regions").to_pylist()
    phrases = {(r["caption_id"], r["concept_id"]) for r in sg if r["kind"] in ("attribute", "relation")}
    grounded = {(r["caption_id"], r["concept_id"]) for r in regions}
    errs = read_table(TABLES["errors"], tmp_path / "g" / "errors").to_pylist()
    no_box = {tuple(int(x) for x in e["item_id"].split(":")) for e in errs if e["reason"] == "no_box"}
    assert grounded | no_box == phrases and not grounded & no_box
    assert len(grounded) / len(phrases) >= 0.97
    rel = next(r for r in sg if r["kind"] == "relation" and (r["caption_id"], r["concept_id"]) in grounded)
    assert len([r for r in regions if (r["caption_id"], r["concept_id"]) == (rel["caption_id"], rel["concept_id"])]) == 2
    pm = masks_stage(MasksConfig(["macco-tiny", "ViT-B-32"]), caps, regions, tmp_path / "g")
    assert pm["patch_masks"]["rows"] == 2 * len(grounded)
    from pipeline.validate import validate
    results = validate({"captions": tmp_path / "captions", "scene_graphs": tmp_path / "scene_graphs",
                        "regions": tmp_path / "g" / "regions", "patch_masks": tmp_path / "g" / "patch_masks"})
    assert all(r.status == "pass" for r in results)
    assert m["regions"]["shards"] == -(-len({c["image_id"] for c in caps}) // 3)


def test_unreadable_image_and_box_outside_image_are_error_rows(tmp_path, tiny_models):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "bad.jpg").write_bytes(b"not a jpeg")
    Image.new("RGB", (64, 48)).save(tmp_path / "imgs" / "ok.jpg")
    caps = [{"caption_id": 1, "image_id": 1, "file_name": "bad.jpg", "width": 64, "height": 48, "caption": "x"},
            {"caption_id": 2, "image_id": 2, "file_name": "ok.jpg", "width": 64, "height": 48, "caption": "x"}]
    sg = [dict(caption_id=c, concept_id=0, kind="object", text="dog", char_start=0, char_end=3, subject_id=None,
               object_id=None, phrase="dog", parser="rules") for c in (1, 2)]
    sg += [dict(caption_id=c, concept_id=1, kind="attribute", text="red", char_start=0, char_end=3, subject_id=None,
                object_id=0, phrase="red dog", parser="rules") for c in (1, 2)]
    cfg = GroundingConfig(backend="hf", model_dir=str(tiny_models["hf"]), box_threshold=0.0, text_threshold=0.0)
    ground_stage(cfg, caps, sg, tmp_path / "imgs", tmp_path / "out")
    errs = read_table(TABLES["errors"], tmp_path / "out" / "errors").to_pylist()
    assert ("image:1", "unreadable_image") in {(e["item_id"], e["reason"]) for e in errs}
    regions = read_table(TABLES["regions"], tmp_path / "out" / "regions").to_pylist()
    assert regions and {r["caption_id"] for r in regions} == {2}
    # the annotations backend reports a box outside the image instead of writing it
    inst = {2: [{"box_xyxy": [50, 0, 70, 10], "category": "dog", "attributes": {}}]}
    ground_stage(GroundingConfig(), caps[1:], sg[1::2], None, tmp_path / "o2", instances=inst)
    errs = read_table(TABLES["errors"], tmp_path / "o2" / "errors").to_pylist()
    assert {e["reason"] for e in errs} == {"box_outside_image", "no_box"}


def test_cli_ground_masks_show(world, tmp_path, capsys):
    from macco.cli import main

    t = tmp_path / "t"
    assert main(["parse", str(world / "annotations" / "captions_val2014.json"), "--out", str(t)]) == 0
    assert main(["ground", str(t), "--images", str(world / "val2014"), "--instances", str(world)]) == 0
    assert main(["masks", str(t), "--model", "macco-tiny", "--model", "ViT-B-16"]) == 0
    pm = read_table(TABLES["patch_masks"], t / "ground" / "patch_masks").to_pylist()
    assert {r["grid"] for r in pm} == {8, 14}
    capsys.readouterr()
    assert main(["validate", str(t)]) == 0
    cid = pm[0]["caption_id"]
    assert main(["show-masks", str(t), "--images", str(world / "val2014"), "--caption-id", str(cid),
                 "--model", "macco-tiny", "--out", str(tmp_path / "s.png")]) == 0
    with Image.open(tmp_path / "s.png") as im:
        assert im.width > 320
