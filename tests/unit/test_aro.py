"""model/benchmarks/aro.py: VG-Relation/Attribution groups and exclusion lists (per protocol), the order perturbations."""
import json

import numpy as np
import pytest

from model.benchmarks import EvalConfig, aro, evaluate
from model.benchmarks.scoring import Case
from tests_support import (BAD_FEATURE as BAD, GOOD_FEATURE as GOOD, ProtocolEncoder as FakeEncoder, SHARED,
                           blank_image as _img, dump_json as _dump, needs_shared)


@needs_shared("benchmarks/aro_vg_relation_excluded.json")
def test_exclusion_lists_shipped_match_the_shared_files():
    shipped = json.loads(aro.EXCLUDED.read_text())
    shared = json.loads((SHARED / "benchmarks" / "aro_vg_relation_excluded.json").read_text())
    assert shipped == shared
    a, m = aro.excluded_relations("aro_notebook"), aro.excluded_relations("macco")
    assert len(a) == 157 and len(m) == 160 and m - a == {"leaning against", "pulled by", "pulling"}


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
