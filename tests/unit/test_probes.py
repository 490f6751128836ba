"""Probes with known answers: exact position features vs noise, order-aware vs bag-of-words text encodings,
the swap captions, retrieval and zero-shot on hand-built similarity matrices; McNemar and paired cases."""
import json
import random

import numpy as np
import pytest

from model.benchmarks.registry import REPORT_ROWS as ROWS
from model.losses import TERM_LABELS as TERMS
from model.probes import (direction_captions, position_probe, retrieval, swap_captions, text_direction_probe,
                          unique_positions, zero_shot)

META = {"colours": ["red", "blue", "green", "orange"], "kinds": ["circle", "square", "cross"],
        "config": {"size": 64},
        "relation_words": {"left of": "to the left of", "right of": "to the right of", "above": "above",
                           "below": "below", "inside": "inside"}}


def _scenes(n=300, seed=0):
    """Scenes of 2 shapes of different colours, with their left/above relations as the world writes them."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cols = rng.sample(META["colours"], 2)
        shapes = []
        for c in cols:
            cx, cy = rng.uniform(8, 56), rng.uniform(8, 56)
            shapes.append({"colour": c, "kind": rng.choice(META["kinds"]), "size": "small",
                           "box": [cx - 5, cy - 5, cx + 5, cy + 5]})
        (ax, ay), (bx, by) = [((s["box"][0] + s["box"][2]) / 2, (s["box"][1] + s["box"][3]) / 2) for s in shapes]
        rels = []
        if abs(ax - bx) > abs(ay - by):
            rels.append({"subject": 0 if ax < bx else 1, "relation": "left of", "object": 1 if ax < bx else 0})
        else:
            rels.append({"subject": 0 if ay < by else 1, "relation": "above", "object": 1 if ay < by else 0})
        out.append({"image_id": i, "file_name": f"{i}.jpg", "shapes": shapes, "relations": rels})
    return out


def _position_features(scenes):
    """Per image: for each colour, (present, x, y) — a linear code of every colour's position."""
    X = np.zeros((len(scenes), 3 * len(META["colours"])))
    for i, sc in enumerate(scenes):
        for s in sc["shapes"]:
            c = META["colours"].index(s["colour"])
            X[i, 3 * c:3 * c + 3] = [1, (s["box"][0] + s["box"][2]) / 128, (s["box"][1] + s["box"][3]) / 128]
    return X


def test_position_probe_finds_exact_positions_and_nothing_in_noise():
    scenes = _scenes()
    good = position_probe(_position_features(scenes), META, scenes)
    assert good["r2_x"] > 0.95 and good["r2_y"] > 0.95
    assert good["direction_acc"] > 0.97 and good["direction_n"] == len(scenes)
    noise = position_probe(np.random.default_rng(0).normal(size=(len(scenes), 12)), META, scenes)
    assert noise["r2_x"] < 0.05 and noise["r2_y"] < 0.05
    assert 0.35 < noise["direction_acc"] < 0.65


def test_unique_positions_skips_a_colour_that_occurs_twice():
    sc = {"shapes": [{"colour": "red", "kind": "circle", "box": [0, 0, 10, 10]},
                     {"colour": "red", "kind": "square", "box": [20, 20, 30, 30]},
                     {"colour": "blue", "kind": "cross", "box": [32, 0, 64, 32]}], "relations": []}
    pos = unique_positions(META, [sc])
    assert len(pos["red"][0]) == 0
    assert pos["blue"][0].tolist() == [0] and pos["blue"][1].tolist() == [[0.75, 0.25]]


def _encode(texts, types, words, order_aware):
    """One-hot codes of the caption's two object types and its relation word: concatenated in caption order
    (order-aware) or summed (a bag of words)."""
    rels = list(words.values())
    X = []
    for t in texts:
        rel = next(r for r in sorted(rels, key=len, reverse=True) if f" {r} " in t)
        first, second = t.split(f" {rel} ")
        a = np.eye(len(types))[types.index(first.split(" ", 1)[1])]
        b = np.eye(len(types))[types.index(second.split(" ", 1)[1])]
        r = np.eye(len(rels))[rels.index(rel)]
        X.append(np.concatenate([a, b, r] if order_aware else [a + b, r]))
    X = np.array(X)
    if order_aware:  # the label is a product of order and relation: give the linear probe the interactions
        X = np.concatenate([X, np.einsum("ni,nj->nij", X[:, :2 * len(types)], X[:, -len(rels):]).reshape(len(X), -1)],
                           axis=1)
    return X


def test_text_direction_probe_is_chance_for_a_bag_of_words_and_high_for_an_order_aware_code():
    texts, labels = direction_captions(META, 1200, seed=0)
    assert 0.4 < labels.mean() < 0.6
    types = [f"{c} {k}" for c in META["colours"] for k in META["kinds"]]
    bow = text_direction_probe(_encode(texts, types, META["relation_words"], False), labels)
    aware = text_direction_probe(_encode(texts, types, META["relation_words"], True), labels)
    assert 0.4 < bow < 0.6
    assert aware > 0.8


def test_direction_labels_follow_the_relation():
    texts, labels = direction_captions(META, 200, seed=1)
    for t, y in zip(texts, labels):
        for rel in ("to the left of", "to the right of", "above", "below"):
            if f" {rel} " in t:
                first, second = [p.split(" ", 1)[1] for p in t.split(f" {rel} ")]
                p_first = first.split() < second.split()  # the caption names the alphabetically first first
                before = rel in ("to the left of", "above")
                assert y == int(before == p_first), t


def test_swap_captions():
    sc = {"shapes": [{"colour": "red", "kind": "circle"}, {"colour": "orange", "kind": "square"}],
          "relations": [{"subject": 0, "relation": "left of", "object": 1},
                        {"subject": 1, "relation": "inside", "object": 0}]}
    assert swap_captions(META, [sc]) == [("a red circle to the left of an orange square",
                                          "an orange square to the left of a red circle",
                                          "an orange circle to the left of a red square")]


def test_retrieval_and_zero_shot_on_known_similarities():
    I = np.eye(3)
    T = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 1]], float)
    r = retrieval(I, T, np.array([0, 1, 1, 2]))  # captions 1 and 2 belong to image 1, 3 to image 2
    assert r["i2t_r1"] == pytest.approx(2 / 3)  # image 1's best caption (2) is its own; image 2's (1 or 3)...
    assert r["t2i_r1"] == pytest.approx(3 / 4)
    types = [("red", "circle"), ("blue", "square")]
    scenes = [{"shapes": [{"colour": "red", "kind": "circle"}]}, {"shapes": [{"colour": "red", "kind": "circle"}]}]
    assert zero_shot(np.array([[1.0, 0], [0, 1.0]]), np.eye(2), types, scenes) == 0.5


def test_mcnemar_counts_and_exact_p():
    from pipeline.report import mcnemar

    r = mcnemar(["1111100000x"], ["0000000000x"])
    assert (r["b"], r["c"], r["n"]) == (5, 0, 10) and r["p"] == pytest.approx(2 * 0.5 ** 5)
    assert (r["b_case"], r["c_case"], r["cases"]) == (5, 0, 10) and r["p_case"] == r["p"]  # one seed: the same
    # two seed pairs: pooled, case 0 counts twice for the model; per case, each side wins one case
    r = mcnemar(["10", "11"], ["00", "01"])
    assert (r["b"], r["c"], r["n"]) == (2, 0, 4) and (r["b_case"], r["c_case"], r["cases"]) == (1, 0, 2)
    r = mcnemar(["10", "01"], ["01", "10"])  # pooled: 2 each way; per case: ties
    assert (r["b"], r["c"]) == (2, 2) and r["p"] == 1.0 and (r["b_case"], r["c_case"]) == (0, 0)
    with pytest.raises(ValueError, match="not the same cases"):
        mcnemar(["101"], ["10"])
    with pytest.raises(ValueError, match="pair them by seed"):
        mcnemar(["1", "0"], ["1"])


def test_paired_tests_pair_runs_by_seed():
    from pipeline.report import paired_tests

    def res(label, bits):
        return {"label": label, "benchmarks": {"whatsup": {"subsets": {}, "groups": {},
                                                           "cases": {"whatsup_macro": bits}}}}

    # the model's runs come in another order and include a seed the control lacks
    t = paired_tests({"clip-ft": [res("clip-ft-s0", "000"), res("clip-ft-s1", "111")],
                      "macco": [res("macco-s1", "111"), res("macco-s2", "000"), res("macco-s0", "110")]}, "clip-ft",
                     rows=ROWS)
    r = t["macco"]["What's Up controlled"]
    assert r["pairs"] == 2 and (r["b"], r["c"]) == (2, 0)


def test_report_marks_significant_cells_and_writes_the_probe_table(tmp_path):
    from pipeline.report import write_report

    def res(bits):
        return {"benchmarks": {"whatsup": {"subsets": {"controlled_a": {"n": len(bits)}},
                                           "groups": {"whatsup_macro": bits.count("1") / len(bits)},
                                           "cases": {"whatsup_macro": bits}}},
                "probes": {"image_global": {"r2_x": 0.7, "direction_acc": 0.95}, "text": {"direction_acc": 0.5}}}

    better, control = "1" * 30 + "0" * 10, "0" * 30 + "0" * 10
    rep = write_report({"clip-ft": [res(control)], "macco": [res(better)]}, tmp_path, "t", rows=ROWS, terms=TERMS)
    md = (tmp_path / "results.md").read_text()
    assert "| What's Up controlled | 40 | 25 | 0.0 | 75.0 ▲ |" in md  # n: the cases the group pools
    assert "| What's Up controlled | 40 | 40 | 30 | 0 | 1.86e-09 | 30 / 0 | 1.86e-09 | 1.86e-09 * |" in md  # one group
    assert "| image: position R² x (global) | 0 | 0.70 | 0.70 |" in md
    # no control evaluated: said, and nothing marked
    write_report({"macco": [res(better)]}, tmp_path / "nc", "t", rows=ROWS, terms=TERMS)
    md = (tmp_path / "nc" / "results.md").read_text()
    assert "No paired tests: the control 'clip-ft' was not evaluated." in md and "▲" not in md
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["paired_tests"]["models"]["macco"]["What's Up controlled"]["b"] == 30
    assert rep["png"].endswith("results.png")


def test_probe_table_reads_gradient_norms_under_the_terms_old_names():
    """Probe results written before the reconstruction terms were renamed (mask_loss_text / mask_loss_image) give
    the same rows as ones with the current names."""
    from pipeline.report import probe_summary

    new = {"gradient_norms": {"text_reconstruction_loss": {"text": 2.0, "image": 0.0},
                              "image_reconstruction_loss": {"text": 3.0, "image": 0.0}}}
    old = {"gradient_norms": {"mask_loss_text": {"text": 4.0, "image": 0.0},
                              "mask_loss_image": {"text": 5.0, "image": 0.0}}}
    got = probe_summary([new, old], TERMS)
    assert got["grad ‖text‖ ← masked text"] == (3.0, pytest.approx(2 ** 0.5), 2)
    assert got["grad ‖text‖ ← masked image"][:1] == (4.0,) and "grad ‖text‖ ← contrast" not in got
