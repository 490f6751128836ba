"""Held-out benchmark sets from the world's test split, each written in its benchmark's original file format,
so evaluation on the world goes through the same readers as the real benchmarks.

Every negative is checked against the scene: it must be false of the image (e.g. a swapped relation, a
colour that no shape of that kind has, an absent object).

Which benchmark reads which set is declared on its record (``model.benchmarks.registry``: ``world``, read by
``world_sets``) and handed to ``write_benchmarks`` (pipeline imports no model); here each set's writer is
registered under its name (``WRITERS``), nothing else lists the benchmarks.
"""
from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from pipeline.world_scene import COLOURS, KINDS, RELATIONS, Scene, Shape, load_scenes

WORDS = {"left of": "to the left of", "right of": "to the right of", "above": "above", "below": "below",
         "inside": "inside"}
SPATIAL = ("left of", "right of", "above", "below")
OPPOSITE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


def _np(scene: Scene, k: int, article: str = "the") -> str:
    s = scene.shapes[k]
    ambiguous = any(o.colour == s.colour and o.kind == s.kind for j, o in enumerate(scene.shapes) if j != k)
    words = ([s.size] if ambiguous else []) + [s.colour, s.kind]
    if article == "a" and words[0][0] in "aeiou":
        article = "an"
    return " ".join([article] + words)


def _has(scene: Scene, colour: str | None = None, kind: str | None = None) -> bool:
    return any((colour is None or s.colour == colour) and (kind is None or s.kind == kind) for s in scene.shapes)


def _union(a: Shape, b: Shape, size: int, margin: float = 2.0) -> tuple[float, float, float, float]:
    x1, y1 = max(min(a.box[0], b.box[0]) - margin, 0), max(min(a.box[1], b.box[1]) - margin, 0)
    x2, y2 = min(max(a.box[2], b.box[2]) + margin, size), min(max(a.box[3], b.box[3]) + margin, size)
    return round(x1, 1), round(y1, 1), round(x2 - x1, 1), round(y2 - y1, 1)


def _copy_images(world: Path, scenes: list[Scene], files: dict[int, str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for sc in scenes:
        shutil.copyfile(world / "test2014" / files[sc.image_id], dest / files[sc.image_id])


def _dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


@dataclass
class _WorldSets:
    """What every benchmark writer reads: the world, its test scenes and their files, the image size, the seeded
    generator (drawn from in the writers' order, so the sets are a function of the seed) and the case counts."""
    world: Path
    scenes: list
    files: dict
    size: int
    rng: random.Random
    counts: dict = field(default_factory=dict)


WRITERS: dict[str, Callable[[_WorldSets, Path], None]] = {}  # set name -> its writer (``writes``)


def writes(name: str) -> Callable:
    """Registers the decorated function as the writer of the world's set ``name`` (``<out>/<name>/``)."""
    def register(fn: Callable[[_WorldSets, Path], None]) -> Callable[[_WorldSets, Path], None]:
        WRITERS[name] = fn
        return fn
    return register


def write_benchmarks(world: str | Path, sets: Mapping[str, str], out: str | Path | None = None,
                     seed: int = 0) -> dict:
    """Write the sets of ``sets`` (benchmark -> set name: the registry's ``world_sets()``) under ``out`` (default
    ``<world>/benchmarks``), each set's writer once, in the order the sets first appear (the seeded generator is
    drawn from in that order), and ``benchmarks.json`` (each benchmark's root, the case counts, the seed)."""
    unknown = sorted(set(sets.values()) - set(WRITERS))
    if unknown:
        raise ValueError(f"no writer for the world's benchmark set(s) {unknown} in pipeline/world_benchmarks.py "
                         f"(its sets: {sorted(WRITERS)})")
    world = Path(world)
    out = Path(out) if out else world / "benchmarks"
    meta = json.loads((world / "scenes_test.json").read_text())
    w = _WorldSets(world, load_scenes(world, "test"), {m["image_id"]: m["file_name"] for m in meta},
                   json.loads((world / "world.json").read_text())["config"]["size"], random.Random(seed))
    for name in dict.fromkeys(sets.values()):
        WRITERS[name](w, out / name)
    rel = dict(sets)
    _dump(out / "benchmarks.json", {"roots": rel, "counts": w.counts, "seed": seed})  # roots relative to this file
    return {"roots": {k: str(out / v) for k, v in rel.items()}, "counts": w.counts}


@writes("aro")
def _aro(w: _WorldSets, out: Path) -> None:
    """ARO: VG-Relation / VG-Attribution (+ images/), COCO-Order from a Karpathy-style test json."""
    world, scenes, files, size, counts = w.world, w.scenes, w.files, w.size, w.counts
    _copy_images(world, scenes, files, out / "images")
    vgr, vga = [], []
    for sc in scenes:
        for r in sc.relations:
            a, b = sc.shapes[r.subject], sc.shapes[r.object]
            x, y, w, h = _union(a, b, size)
            vgr.append({"image_id": sc.image_id, "image_path": files[sc.image_id], "bbox_x": x, "bbox_y": y,
                        "bbox_w": w, "bbox_h": h, "relation_name": r.relation,
                        "true_caption": f"{_np(sc, r.subject)} is {WORDS[r.relation]} {_np(sc, r.object)}",
                        "false_caption": f"{_np(sc, r.object)} is {WORDS[r.relation]} {_np(sc, r.subject)}"})
        for i, a in enumerate(sc.shapes):
            for j, b in enumerate(sc.shapes):
                if j <= i or a.colour == b.colour or a.kind == b.kind:
                    continue
                if _has(sc, b.colour, a.kind) or _has(sc, a.colour, b.kind):
                    continue  # the swapped caption would be true of some shapes
                x, y, w, h = _union(a, b, size)
                vga.append({"image_id": sc.image_id, "image_path": files[sc.image_id], "bbox_x": x, "bbox_y": y,
                            "bbox_w": w, "bbox_h": h, "attributes": [a.colour, b.colour],
                            "true_caption": f"the {a.colour} {a.kind} and the {b.colour} {b.kind}",
                            "false_caption": f"the {b.colour} {a.kind} and the {a.colour} {b.kind}"})
    _dump(out / "visual_genome_relation.json", vgr)
    _dump(out / "visual_genome_attribution.json", vga)
    caps = json.loads((world / "annotations" / "captions_test2014.json").read_text())["annotations"]
    by_img: dict[int, list[str]] = {}
    for c in caps:
        by_img.setdefault(c["image_id"], []).append(c["caption"])
    _dump(out / "coco_karpathy_test.json",
          [{"image": f"images/{files[sc.image_id]}", "caption": by_img[sc.image_id], "image_id": sc.image_id}
           for sc in scenes])
    counts.update({"aro-vgr": len(vgr), "aro-vga": len(vga), "coco-order": len(caps)})


@writes("sugarcrepe")
def _sugarcrepe(w: _WorldSets, out: Path) -> None:
    """SugarCrepe: the seven subsets, {id: {filename, caption, negative_caption}} + val2017/."""
    world, scenes, files, counts, rng = w.world, w.scenes, w.files, w.counts, w.rng
    _copy_images(world, scenes, files, out / "val2017")
    subsets: dict[str, dict] = {k: {} for k in ("add_att", "replace_att", "swap_att", "replace_rel", "add_obj",
                                                 "replace_obj", "swap_obj")}

    def add(sub: str, sc: Scene, pos: str, neg: str) -> None:
        subsets[sub][str(len(subsets[sub]))] = {"filename": files[sc.image_id], "caption": pos,
                                                "negative_caption": neg}

    for sc in scenes:
        r = rng.choice(sc.relations)
        a, b = sc.shapes[r.subject], sc.shapes[r.object]
        rel = WORDS[r.relation]
        pos = f"a {a.colour} {a.kind} {rel} a {b.colour} {b.kind}"
        wrong_c = [c for c in COLOURS if not _has(sc, c, a.kind)]
        if wrong_c:
            c = rng.choice(wrong_c)
            add("replace_att", sc, pos, f"a {c} {a.kind} {rel} a {b.colour} {b.kind}")
            add("add_att", sc, f"a {a.kind} {rel} a {b.colour} {b.kind}", f"a {c} {a.kind} {rel} a {b.colour} {b.kind}")
        if a.colour != b.colour and not _has(sc, b.colour, a.kind) and not _has(sc, a.colour, b.kind):
            add("swap_att", sc, pos, f"a {b.colour} {a.kind} {rel} a {a.colour} {b.kind}")
        others = [x for x in RELATIONS if x != r.relation and x != "inside"
                  and not any(q.relation == x and q.subject == r.subject and q.object == r.object
                              for q in sc.relations)]
        if r.relation in SPATIAL and others:
            add("replace_rel", sc, pos, f"a {a.colour} {a.kind} {WORDS[rng.choice(others)]} a {b.colour} {b.kind}")
        absent = [(c, k) for c in COLOURS for k in KINDS if not _has(sc, kind=k)]
        if absent:
            c, k = rng.choice(absent)
            add("add_obj", sc, pos, f"{pos} and a {c} {k}")
            add("replace_obj", sc, pos, f"a {a.colour} {k} {rel} a {b.colour} {b.kind}")
        if a.kind != b.kind and not _has(sc, a.colour, b.kind) and not _has(sc, b.colour, a.kind):
            add("swap_obj", sc, pos, f"a {a.colour} {b.kind} {rel} a {b.colour} {a.kind}")
    for k, v in subsets.items():
        _dump(out / f"{k}.json", v)
        counts[f"sugarcrepe/{k}"] = len(v)


@writes("vl-checklist")
def _vlchecklist(w: _WorldSets, out: Path) -> None:
    """VL-CheckList: data/ + corpus/ as released, images under vg/."""
    world, scenes, files, counts, rng = w.world, w.scenes, w.files, w.counts, w.rng
    _copy_images(world, scenes, files, out / "vg")
    colour_recs, size_recs, spatial_recs, obj_recs = [], [], [], []
    for sc in scenes:
        for k, s in enumerate(sc.shapes):
            wrong = [c for c in COLOURS if not _has(sc, c, s.kind)]
            if wrong:
                colour_recs.append([files[sc.image_id], {"POS": [f"{s.colour} {s.kind}"],
                                                         "NEG": [f"{rng.choice(wrong)} {s.kind}"]}])
            other = "large" if s.size == "small" else "small"
            if not any(o.kind == s.kind and o.colour == s.colour and o.size == other for o in sc.shapes):
                size_recs.append([files[sc.image_id], {"POS": [f"{s.size} {s.colour} {s.kind}"],
                                                       "NEG": [f"{other} {s.colour} {s.kind}"]}])
            absent = [x for x in KINDS if not _has(sc, kind=x)]
            if absent:
                obj_recs.append([files[sc.image_id], {"POS": [f"a {s.colour} {s.kind}"],
                                                      "NEG": [f"a {s.colour} {rng.choice(absent)}"]}])
        for r in sc.relations:
            if r.relation in SPATIAL:
                wrong_r = [x for x in SPATIAL if x != r.relation and not any(
                    q.relation == x and q.subject == r.subject and q.object == r.object for q in sc.relations)]
                spatial_recs.append([files[sc.image_id], {
                    "POS": [f"{_np(sc, r.subject)} {WORDS[r.relation]} {_np(sc, r.object)}"],
                    "NEG": [f"{_np(sc, r.subject)} {WORDS[rng.choice(wrong_r)]} {_np(sc, r.object)}"]}])
    files_vlc = {"Attribute/vg/color": colour_recs, "Attribute/vg/size": size_recs,
                 "Relation/vg/spatial": spatial_recs, "Object/Location/vg_obj_location/vg_obj_center": obj_recs}
    for rel, recs in files_vlc.items():
        _dump(out / "data" / f"{rel}.json", recs)
        (out / "corpus" / "v1" / f"{rel}.yaml").parent.mkdir(parents=True, exist_ok=True)
        (out / "corpus" / "v1" / f"{rel}.yaml").write_text(
            f"ANNO_PATH: data/{rel}.json\nIMG_ROOT: vg/\nTYPE: TUPLE_JSON\n")
        counts[f"vl-checklist/{rel}"] = len(recs)


@writes("valse")
def _valse(w: _WorldSets, out: Path) -> None:
    """VALSE: data/<piece>.json as released (dict by id), images/<dataset>/."""
    world, scenes, files, counts, rng = w.world, w.scenes, w.files, w.counts, w.rng
    _copy_images(world, scenes, files, out / "images" / "world")
    pieces: dict[str, dict] = {"relations": {}, "counting-hard": {}, "existence": {}}

    def valse(piece: str, sc: Scene, cap: str, foil: str) -> None:
        key = f"{piece}_{len(pieces[piece])}"
        pieces[piece][key] = {"dataset": "world", "original_split": "test", "dataset_idx": str(sc.image_id),
                              "linguistic_phenomena": piece, "image_file": files[sc.image_id], "caption": cap,
                              "foil": foil, "classes": "", "classes_foil": "",
                              "mturk": {"caption": 3, "foil": 0, "other": 0}}

    for sc in scenes:
        r = rng.choice(sc.relations)
        if r.relation in SPATIAL:
            valse("relations", sc, f"{_np(sc, r.subject, 'a')} is {WORDS[r.relation]} {_np(sc, r.object, 'a')}.",
                  f"{_np(sc, r.subject, 'a')} is {WORDS[OPPOSITE[r.relation]]} {_np(sc, r.object, 'a')}.")
        n = len(sc.shapes)
        words = {2: "two", 3: "three"}
        valse("counting-hard", sc, f"There are {words[n]} shapes.", f"There are {words[5 - n]} shapes.")
        absent = [k for k in KINDS if not _has(sc, kind=k)]
        if absent:
            k = rng.choice(absent)
            valse("existence", sc, f"There is no {k}.", f"There is a {k}.")
    for k, v in pieces.items():
        _dump(out / "data" / f"{k}.json", v)
        counts[f"valse/{k}"] = len(v)


@writes("whatsup")
def _whatsup(w: _WorldSets, out: Path) -> None:
    """What's Up, Controlled: {image_path: "data/...", caption_options: [true, 3 wrong]}."""
    world, scenes, files, counts, rng = w.world, w.scenes, w.files, w.counts, w.rng
    _copy_images(world, scenes, files, out / "controlled_images")
    ctrl = []
    for sc in scenes:
        spatial = [r for r in sc.relations if r.relation in SPATIAL]
        if not spatial:
            continue
        r = rng.choice(spatial)
        subj, obj = sc.shapes[r.subject], sc.shapes[r.object]
        opts = [r.relation] + [x for x in SPATIAL if x != r.relation]
        ctrl.append({"image_path": f"data/controlled_images/{files[sc.image_id]}",
                     "caption_options": [f"A {subj.colour} {subj.kind} {WORDS[x]} a {obj.colour} {obj.kind}"
                                         for x in opts]})
    _dump(out / "controlled_images_dataset.json", ctrl)
    counts["whatsup/controlled_a"] = len(ctrl)


def benchmark_roots(world: str | Path) -> dict[str, str]:
    """Absolute benchmark roots of a world's ``benchmarks/`` sets."""
    base = Path(world) / "benchmarks"
    return {k: str(base / v) for k, v in json.loads((base / "benchmarks.json").read_text())["roots"].items()}
