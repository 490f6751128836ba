"""The synthetic compositional world: rendered scenes of 2-3 shapes in spatial relations.

Every image holds 2-3 shapes (kind x colour x size). Captions name one related pair each, so attribute-object
binding and relation direction decide whether a caption is true. With 6 kinds x 8 colours x 2 sizes (96 object
types) two images in a batch almost never share a bag of words, so plain contrastive training can win batches
without binding or order - the failure the compositionality benchmarks probe with swapped negatives.

Output is written exactly as COCO 2014 (``annotations/captions_<split>2014.json``,
``annotations/instances_<split>2014.json``, ``<split>2014/COCO_<split>2014_<id:012d>.jpg``), plus a
Karpathy-style ``dataset_coco.json`` and ``scenes_<split>.json`` with the full scene truth. Deterministic by
seed: the same seed and arguments give byte-identical files. The scene model (kinds, colours, ``Scene``,
``load_scenes``) is ``pipeline/world_scene.py``; the held-out benchmark sets are ``pipeline/world_benchmarks.py``.
"""
from __future__ import annotations

import io
import json
import math
import random
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from PIL import Image, ImageDraw

from data_schemas.config import check_ranges
from pipeline.world_benchmarks import write_benchmarks
# the scene model, also read from here (pipeline.world.COLOURS, load_scenes, ...)
from pipeline.world_scene import (COLOURS, INVERSE, KINDS, RELATIONS, SIZES, Relation, Scene, Shape,  # noqa: F401
                                  load_scenes)


BACKGROUND = (128, 128, 128)
# surface forms per relation (all parse to a relation whose words the text mask covers)
RELATION_WORDS = {
    # bare "right of" is misparsed by spaCy's small English model ("right" becomes the root noun), so the
    # world uses the full forms only
    "left of": ("to the left of", "on the left of", "to the left side of"),
    "right of": ("to the right of", "on the right of", "to the right side of"),
    "above": ("above", "over"),
    "below": ("below", "under", "beneath"),
    "inside": ("inside", "in"),
}
SIZE_WORDS = {"small": ("small", "little"), "large": ("large", "big")}
SPLITS = ("train", "val", "test")


def relation_between(a: Shape, b: Shape) -> str | None:
    """The relation of ``a`` to ``b`` if it is unambiguous, else None."""
    ax1, ay1, ax2, ay2 = a.box
    bx1, by1, bx2, by2 = b.box
    if ax1 >= bx1 and ay1 >= by1 and ax2 <= bx2 and ay2 <= by2 and a.size == "small" and b.size == "large":
        return "inside"
    if not (ax2 <= bx1 or bx2 <= ax1 or ay2 <= by1 or by2 <= ay1):
        return None  # overlapping but not inside: no clean relation
    (acx, acy), (bcx, bcy) = a.centre, b.centre
    dx, dy = bcx - acx, bcy - acy
    if abs(dx) >= 1.5 * abs(dy) and (ax2 <= bx1 or bx2 <= ax1):
        return "left of" if dx > 0 else "right of"
    if abs(dy) >= 1.5 * abs(dx) and (ay2 <= by1 or by2 <= ay1):
        return "above" if dy > 0 else "below"
    return None


def _sample_shape(rng: random.Random, size_px: int, kind=None, colour=None, size=None, centre=None) -> Shape:
    kind = kind or rng.choice(KINDS)
    colour = colour or rng.choice(list(COLOURS))
    size = size or rng.choice(list(SIZES))
    side = SIZES[size] * size_px
    if centre is None:
        cx = rng.uniform(side / 2 + 1, size_px - side / 2 - 1)
        cy = rng.uniform(side / 2 + 1, size_px - side / 2 - 1)
    else:
        cx, cy = centre
    box = (round(cx - side / 2, 1), round(cy - side / 2, 1), round(cx + side / 2, 1), round(cy + side / 2, 1))
    return Shape(kind, colour, size, box)


def sample_scene(rng: random.Random, image_id: int, size_px: int) -> Scene:
    """Sample 2-3 shapes whose pairs are either cleanly related or far apart; at least one relation."""
    while True:
        n = rng.choice((2, 2, 3))
        shapes: list[Shape] = []
        if rng.random() < 0.2:  # an "inside" pair: a small shape on a large one
            big = _sample_shape(rng, size_px, size="large")
            inner_colour = rng.choice([c for c in COLOURS if c != big.colour])
            small = _sample_shape(rng, size_px, colour=inner_colour, size="small", centre=big.centre)
            shapes = [small, big]
        tries = 0
        while len(shapes) < n and tries < 50:
            tries += 1
            cand = _sample_shape(rng, size_px)
            if all(relation_between(cand, s) not in (None, "inside") and relation_between(s, cand) != "inside"
                   for s in shapes):
                shapes.append(cand)
        if len(shapes) < 2:
            continue
        rels = []
        for i, a in enumerate(shapes):
            for j, b in enumerate(shapes):
                if i != j:
                    r = relation_between(a, b)
                    if r is not None:
                        rels.append(Relation(i, r, j))
        # identical (kind, colour, size) twice would make captions ambiguous
        if rels and len({(s.kind, s.colour, s.size) for s in shapes}) == len(shapes):
            return Scene(image_id, shapes, rels)


def noun_phrase(s: Shape, rng: random.Random, with_size: bool | None = None, article: str = "a") -> str:
    with_size = rng.random() < 0.4 if with_size is None else with_size
    words = ([rng.choice(SIZE_WORDS[s.size])] if with_size else []) + [s.colour, s.kind]
    if article == "a" and words[0][0] in "aeiou":
        article = "an"
    return " ".join([article] + words)


def caption_for(scene: Scene, rel: Relation, rng: random.Random) -> str:
    subj, obj = scene.shapes[rel.subject], scene.shapes[rel.object]
    words = rng.choice(RELATION_WORDS[rel.relation])
    s, o = noun_phrase(subj, rng), noun_phrase(obj, rng)
    others = [k for k in range(len(scene.shapes)) if k not in (rel.subject, rel.object)]
    tail = ""
    if others and rng.random() < 0.3:
        tail = " and " + noun_phrase(scene.shapes[others[0]], rng)
    template = rng.randrange(6)
    if template == 0:
        text = f"{s} {words} {o}{tail}"
    elif template == 1:
        text = f"{s} is {words} {o}{tail}."
    elif template == 2:
        text = f"there is {s} {words} {o}{tail}"
    elif template == 3:
        text = f"{s} sitting {words} {o}{tail}."
    elif template == 4:
        text = f"a picture of {s} {words} {o}{tail}"
    else:
        text = f"{s} placed {words} {o}{tail}"
    return text[0].upper() + text[1:] if rng.random() < 0.5 else text


def captions_for(scene: Scene, rng: random.Random, n: int = 5) -> list[str]:
    return [caption_for(scene, rng.choice(scene.relations), rng) for _ in range(n)]


def _polygon(kind: str, box: tuple[float, float, float, float]) -> list[tuple[float, float]]:
    x1, y1, x2, y2 = box
    cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
    if kind == "square":
        return [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
    if kind == "triangle":
        return [(cx, y1), (x2, y2), (x1, y2)]
    if kind == "diamond":
        return [(cx, y1), (x2, cy), (cx, y2), (x1, cy)]
    if kind == "hexagon":
        return [(cx + w / 2 * math.cos(a), cy + h / 2 * math.sin(a)) for a in
                (math.pi / 3 * k for k in range(6))]
    if kind == "cross":
        t = w / 6
        return [(cx - t, y1), (cx + t, y1), (cx + t, cy - t), (x2, cy - t), (x2, cy + t), (cx + t, cy + t),
                (cx + t, y2), (cx - t, y2), (cx - t, cy + t), (x1, cy + t), (x1, cy - t), (cx - t, cy - t)]
    if kind == "circle":
        return [(cx + w / 2 * math.cos(a), cy + h / 2 * math.sin(a)) for a in
                (2 * math.pi * k / 48 for k in range(48))]
    raise ValueError(f"unknown shape kind {kind!r}")


def render(scene: Scene, size_px: int, supersample: int = 4) -> Image.Image:
    big = Image.new("RGB", (size_px * supersample, size_px * supersample), BACKGROUND)
    draw = ImageDraw.Draw(big)
    order = sorted(range(len(scene.shapes)), key=lambda k: scene.shapes[k].size != "large")  # large first
    for k in order:
        s = scene.shapes[k]
        pts = [(x * supersample, y * supersample) for x, y in _polygon(s.kind, s.box)]
        draw.polygon(pts, fill=COLOURS[s.colour])
    return big.resize((size_px, size_px), Image.Resampling.LANCZOS)


def file_name(split: str, image_id: int) -> str:
    return f"COCO_{split}2014_{image_id:012d}.jpg"


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=False))


@dataclass
class WorldConfig:
    seed: int = 0
    images: int = 1000  # train images; val/test get ``eval_fraction`` of this each (the flow's default world)
    size: int = 64
    eval_fraction: float = 0.2
    captions_per_image: int = 5
    benchmarks: bool = True  # also write the held-out benchmark sets (benchmarks/) from the test split

    def __post_init__(self):
        check_ranges(self, "world", positive=("images", "size", "captions_per_image"),
                     probability=("eval_fraction",))


def split_counts(cfg: WorldConfig) -> dict[str, int]:
    n_eval = max(1, round(cfg.images * cfg.eval_fraction))
    return {"train": cfg.images, "val": n_eval, "test": n_eval}


def generate_world(out: str | Path, cfg: WorldConfig, sets: Mapping[str, str] | None = None) -> dict:
    """Write the world under ``out``; returns a summary (images and captions per split, files). With
    ``cfg.benchmarks`` its benchmark sets too: ``sets`` (benchmark -> set: the registry's ``world_sets()``, which the
    world stage's record hands here) is then required."""
    if cfg.benchmarks and sets is None:
        raise ValueError("generate_world: benchmarks=True needs the sets to write (benchmark -> set name: "
                         "model.benchmarks.registry.world_sets())")
    out = Path(out)
    rng = random.Random(cfg.seed)
    categories = [{"id": i + 1, "name": k, "supercategory": "shape"} for i, k in enumerate(KINDS)]
    cat_id = {k: i + 1 for i, k in enumerate(KINDS)}
    licenses = [{"id": 1, "name": "CC BY 4.0 (synthetic)", "url": "https://creativecommons.org/licenses/by/4.0/"}]
    karpathy = {"dataset": "coco", "images": []}
    summary = {"splits": {}, "root": str(out), "seed": cfg.seed, "size": cfg.size}
    image_id, caption_id, ann_id, sent_id = 1, 1, 1, 0
    for split, n in split_counts(cfg).items():
        images, caps, anns, scenes = [], [], [], []
        img_dir = out / f"{split}2014"
        img_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(n):
            scene = sample_scene(rng, image_id, cfg.size)
            fname = file_name(split, image_id)
            buf = io.BytesIO()
            render(scene, cfg.size).save(buf, format="JPEG", quality=95)
            (img_dir / fname).write_bytes(buf.getvalue())
            images.append({"license": 1, "file_name": fname, "coco_url": "", "height": cfg.size,
                           "width": cfg.size, "date_captured": "2026-01-01 00:00:00", "flickr_url": "",
                           "id": image_id})
            sentences = []
            for text in captions_for(scene, rng, cfg.captions_per_image):
                caps.append({"image_id": image_id, "id": caption_id, "caption": text})
                toks = [t for t in text.lower().replace(".", " ").split() if t]
                sentences.append({"tokens": toks, "raw": text, "imgid": len(karpathy["images"]),
                                  "sentid": sent_id})
                caption_id += 1
                sent_id += 1
            for s in scene.shapes:
                x1, y1, x2, y2 = s.box
                poly = [round(v, 2) for xy in _polygon(s.kind, s.box) for v in xy]
                anns.append({"segmentation": [poly], "area": round((x2 - x1) * (y2 - y1), 2), "iscrowd": 0,
                             "image_id": image_id, "bbox": [x1, y1, round(x2 - x1, 1), round(y2 - y1, 1)],
                             "category_id": cat_id[s.kind], "id": ann_id,
                             "attributes": {"colour": s.colour, "size": s.size}})
                ann_id += 1
            karpathy["images"].append({
                "filepath": f"{split}2014", "sentids": [x["sentid"] for x in sentences], "filename": fname,
                "imgid": len(karpathy["images"]), "split": split, "sentences": sentences, "cocoid": image_id})
            scenes.append({"image_id": image_id, "file_name": fname,
                           "shapes": [asdict(s) for s in scene.shapes],
                           "relations": [asdict(r) for r in scene.relations]})
            image_id += 1
        info = {"description": f"macco synthetic world ({split})", "url": "", "version": "1.0", "year": 2026,
                "contributor": "macco", "date_created": "2026-01-01"}
        _write_json(out / "annotations" / f"captions_{split}2014.json",
                    {"info": info, "images": images, "licenses": licenses, "annotations": caps})
        _write_json(out / "annotations" / f"instances_{split}2014.json",
                    {"info": info, "images": images, "licenses": licenses, "annotations": anns,
                     "categories": categories})
        _write_json(out / f"scenes_{split}.json", scenes)
        summary["splits"][split] = {"images": len(images), "captions": len(caps), "boxes": len(anns)}
    _write_json(out / "dataset_coco.json", karpathy)
    _write_json(out / "world.json", {"config": asdict(cfg), "kinds": list(KINDS), "colours": list(COLOURS),
                                     "relation_words": {r: w[0] for r, w in RELATION_WORDS.items()},
                                     "sizes": list(SIZES), "relations": list(RELATIONS)})
    if cfg.benchmarks:
        summary["benchmarks"] = write_benchmarks(out, sets, seed=cfg.seed)["counts"]
    return summary


def preview_lines(image_id: int, captions: list[str], wrap: int = 40) -> list[str]:
    """A preview cell's text: the image id, then every caption whole, wrapped at ``wrap`` characters."""
    return [f"image {image_id}"] + [w for cap in captions
                                    for w in textwrap.wrap(f"- {cap}", wrap, subsequent_indent="  ")]


def preview(root: str | Path, out_png: str | Path, split: str = "train", n: int = 8, scale: int = 3,
            wrap: int = 40) -> Path:
    """A grid of sample images, each with its image id and every caption whole (wrapped, never cut)."""
    root = Path(root)
    caps = json.loads((root / "annotations" / f"captions_{split}2014.json").read_text())
    by_image: dict[int, list[str]] = {}
    for a in caps["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a["caption"])
    imgs = caps["images"][:n]
    side, line_h = 64 * scale, 12
    texts = [preview_lines(im["id"], by_image.get(im["id"], []), wrap) for im in imgs]
    cell_w, cell_h = side + 8 + 6 * wrap, max([side] + [8 + line_h * len(t) for t in texts]) + 8
    cols = 2
    rows = math.ceil(len(imgs) / cols)
    canvas = Image.new("RGB", (cols * cell_w, rows * cell_h), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for k, im in enumerate(imgs):
        r, c = divmod(k, cols)
        pic = Image.open(root / f"{split}2014" / im["file_name"]).convert("RGB")
        pic = pic.resize((side, side), Image.Resampling.NEAREST)
        canvas.paste(pic, (c * cell_w, r * cell_h))
        for li, line in enumerate(texts[k]):
            draw.text((c * cell_w + side + 6, r * cell_h + 4 + li * line_h), line,
                      fill=(0, 0, 120) if li == 0 else (0, 0, 0))
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out_png)
    return out_png
