"""``macco show-masks``: a caption's image with its masked patches and boxes, beside its masked tokens."""
from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

from data_schemas import InputFileError
from data_schemas.geometry import DEFAULT_ARCH

from pipeline.patches import Geometry, box_in_crop, eval_crop, eval_patches

KIND_COLOURS = {"relation": (220, 40, 40), "attribute": (30, 90, 230), "object": (60, 160, 60)}
# none of them a pure primary (the world's shapes are red, blue, green...): a phrase's colour is not a shape's
PHRASE_COLOURS = [(230, 140, 0), (150, 40, 190), (0, 150, 150), (200, 0, 120), (110, 110, 0), (90, 60, 30),
                  (255, 105, 180), (70, 70, 70)]


def phrase_colours(concepts: list[dict]) -> dict[int, tuple[int, int, int]]:
    """One colour per relation / attribute phrase (its boxes, patches and tokens), in concept order."""
    phrases = [c["concept_id"] for c in concepts if c["kind"] != "object"]
    return {cid: PHRASE_COLOURS[i % len(PHRASE_COLOURS)] for i, cid in enumerate(phrases)}


def render_masks(image: Image.Image, caption: str, concepts: list[dict], regions: list[dict],
                 token_pieces: list[tuple[int, int, int]], token_kinds: dict[int, str], geo: Geometry,
                 scale: int = 0, caption_id: int | None = None) -> Image.Image:
    """Left: the evaluation crop with the patch grid, each phrase's masked patches shaded and its boxes outlined
    in the phrase's colour. Right: the caption id, the grid, the caption with each masked BPE piece boxed in its
    phrase's colour, and the phrases with their colours."""
    s = geo.image_size
    scale = scale or max(1, 320 // s)
    top, left, h, w = eval_crop(image.width, image.height, s)
    crop = image.convert("RGB").resize((s, s), Image.Resampling.BICUBIC,
                                       box=(left, top, left + w, top + h)).resize((s * scale, s * scale))
    overlay = Image.new("RGBA", crop.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    colours = phrase_colours(concepts)
    by_concept: dict[int, list] = {}
    for r in regions:
        by_concept.setdefault(r["concept_id"], []).append(r["box_xyxy"])
    p = geo.patch_size * scale
    for cid, boxes in sorted(by_concept.items()):  # the fills first: drawing replaces the overlay's pixels
        colour = colours.get(cid, KIND_COLOURS["object"])
        for idx in eval_patches(boxes, image.width, image.height, geo):
            r, c = divmod(idx, geo.grid)
            draw.rectangle([c * p, r * p, (c + 1) * p - 1, (r + 1) * p - 1], fill=colour + (50,))
    for k, (cid, boxes) in enumerate(sorted(by_concept.items())):
        colour = colours.get(cid, KIND_COLOURS["object"])
        for b in boxes:  # each phrase's outline inset a little more: phrases sharing a box all show
            bb = box_in_crop(b, (top, left, h, w), s)
            if bb:
                x1, y1, x2, y2 = (v * scale for v in bb)
                inset = min(3 * k, (x2 - x1) / 4, (y2 - y1) / 4)
                draw.rectangle([x1 + inset, y1 + inset, x2 - inset, y2 - inset], outline=colour + (255,), width=2)
    for k in range(geo.grid + 1):  # patch grid
        draw.line([(k * p, 0), (k * p, s * scale)], fill=(255, 255, 255, 70))
        draw.line([(0, k * p), (s * scale, k * p)], fill=(255, 255, 255, 70))
    pic = Image.alpha_composite(crop.convert("RGBA"), overlay).convert("RGB")
    text_w = 520
    canvas = Image.new("RGB", (pic.width + text_w, max(pic.height, 200)), (255, 255, 255))
    canvas.paste(pic, (0, 0))
    d = ImageDraw.Draw(canvas)
    x0 = pic.width + 10
    head = f"caption {caption_id}  |  " if caption_id is not None else ""
    d.text((x0, 6), f"{head}grid {geo.grid}x{geo.grid} (patch {geo.patch_size} px of {s} px)", fill=(80, 80, 80))
    # a masked token takes the colour of the phrase whose span covers it (relation and attribute words)
    spans = [(c["char_start"], c["char_end"], c["concept_id"]) for c in concepts if c["concept_id"] in colours]
    x, y = x0, 30
    for pos, a, b in token_pieces:
        piece = caption[a:b]
        wpx = int(d.textlength(piece)) + 6
        if x + wpx > canvas.width - 10:
            x, y = x0, y + 22
        if token_kinds.get(pos) in ("relation", "attribute"):
            owner = next((cid for s0, s1, cid in spans if s0 <= a and b <= s1), None)
            colour = colours.get(owner, KIND_COLOURS[token_kinds[pos]])
            d.rectangle([x - 2, y - 2, x + wpx - 4, y + 14], outline=colour, width=2)
        d.text((x, y), piece, fill=(0, 0, 0))
        x += wpx
    y += 34
    for c in concepts:
        if c["concept_id"] in colours:
            d.rectangle([x0, y, x0 + 12, y + 12], fill=colours[c["concept_id"]])
            boxes = len(by_concept.get(c["concept_id"], []))
            d.text((x0 + 18, y), f"{c['kind']}: {c['phrase']}  ({boxes} box{'es' if boxes != 1 else ''})",
                   fill=(0, 0, 0))
            y += 18
    return canvas


def show_masks(tables: dict, image_root: str | Path, caption_id: int, geo: Geometry, out: str | Path,
               model: str = DEFAULT_ARCH) -> Path:
    import duckdb

    from data_schemas.checks import create_views
    from pipeline.tokens import align_caption, get_tokenizer

    con = duckdb.connect()
    create_views(con, tables)
    rows = con.execute("select * from captions where caption_id = ?", [caption_id]).fetchall()
    if not rows:
        lo, hi, n = con.execute("select min(caption_id), max(caption_id), count(*) from captions").fetchone()
        raise InputFileError(f"caption id {caption_id} is not in the captions table {tables['captions']} ({n} "
                             f"captions, ids {lo}..{hi}; e.g. macco sql \"select caption_id, caption from captions "
                             f"limit 5\")")
    cols = [d[0] for d in con.description]
    cap = dict(zip(cols, rows[0]))

    def fetch(sql):
        res = con.execute(sql, [caption_id])
        names = [d[0] for d in res.description]
        return [dict(zip(names, r)) for r in res.fetchall()]

    concepts = fetch("select * from scene_graphs where caption_id = ? order by concept_id")
    regions = fetch("select * from regions where caption_id = ?") if "regions" in tables else []
    tm = fetch("select * from token_masks where caption_id = ?") if "token_masks" in tables else []
    con.close()
    kinds: dict[int, str] = {}
    if tm:
        for kind in ("object", "attribute", "relation"):
            for p in tm[0][f"{kind}_idx"]:
                kinds[p] = kind
    al = align_caption(get_tokenizer(model), cap["caption"])
    with Image.open(Path(image_root) / cap["file_name"]) as im:
        canvas = render_masks(im, cap["caption"], concepts, regions, al.pieces, kinds, geo, caption_id=caption_id)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)
    return out
