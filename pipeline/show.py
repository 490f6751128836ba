"""``macco show-masks``: a caption's image with its masked patches and boxes, beside its masked tokens."""
from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

from data_schemas.geometry import DEFAULT_ARCH

from pipeline.patches import Geometry, box_in_crop, eval_crop, eval_patches

KIND_COLOURS = {"relation": (220, 40, 40), "attribute": (30, 90, 230), "object": (60, 160, 60)}


def render_masks(image: Image.Image, caption: str, concepts: list[dict], regions: list[dict],
                 token_pieces: list[tuple[int, int, int]], token_kinds: dict[int, str], geo: Geometry,
                 scale: int = 0) -> Image.Image:
    """Left: the evaluation crop, masked patches shaded per phrase kind, boxes outlined. Right: the caption
    with each BPE piece boxed in the colour of the concept kind it is masked as."""
    s = geo.image_size
    scale = scale or max(1, 320 // s)
    top, left, h, w = eval_crop(image.width, image.height, s)
    crop = image.convert("RGB").resize((s, s), Image.Resampling.BICUBIC,
                                       box=(left, top, left + w, top + h)).resize((s * scale, s * scale))
    overlay = Image.new("RGBA", crop.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    kind_of = {c["concept_id"]: c["kind"] for c in concepts}
    by_concept: dict[int, list] = {}
    for r in regions:
        by_concept.setdefault(r["concept_id"], []).append(r["box_xyxy"])
    p = geo.patch_size * scale
    for cid, boxes in by_concept.items():
        colour = KIND_COLOURS[kind_of.get(cid, "object")]
        for idx in eval_patches(boxes, image.width, image.height, geo):
            r, c = divmod(idx, geo.grid)
            draw.rectangle([c * p, r * p, (c + 1) * p - 1, (r + 1) * p - 1], fill=colour + (60,))
        for b in boxes:
            bb = box_in_crop(b, (top, left, h, w), s)
            if bb:
                draw.rectangle([v * scale for v in bb], outline=colour + (255,), width=2)
    for k in range(geo.grid + 1):  # patch grid
        draw.line([(k * p, 0), (k * p, s * scale)], fill=(255, 255, 255, 70))
        draw.line([(0, k * p), (s * scale, k * p)], fill=(255, 255, 255, 70))
    pic = Image.alpha_composite(crop.convert("RGBA"), overlay).convert("RGB")
    text_w = 520
    canvas = Image.new("RGB", (pic.width + text_w, max(pic.height, 160)), (255, 255, 255))
    canvas.paste(pic, (0, 0))
    d = ImageDraw.Draw(canvas)
    x, y = pic.width + 10, 10
    for pos, a, b in token_pieces:
        piece = caption[a:b]
        wpx = int(d.textlength(piece)) + 6
        if x + wpx > canvas.width - 10:
            x, y = pic.width + 10, y + 22
        kind = token_kinds.get(pos)
        if kind:
            d.rectangle([x - 2, y - 2, x + wpx - 4, y + 14], outline=KIND_COLOURS[kind], width=2)
        d.text((x, y), piece, fill=(0, 0, 0))
        x += wpx
    y += 40
    for kind, colour in KIND_COLOURS.items():
        d.rectangle([pic.width + 10, y, pic.width + 22, y + 12], fill=colour)
        d.text((pic.width + 28, y), kind, fill=(0, 0, 0))
        y += 18
    for c in concepts:
        if c["kind"] != "object":
            d.text((pic.width + 10, y), f"{c['kind']}: {c['phrase']}", fill=KIND_COLOURS[c["kind"]])
            y += 16
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
        raise ValueError(f"caption_id {caption_id} is not in the captions table")
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
        canvas = render_masks(im, cap["caption"], concepts, regions, al.pieces, kinds, geo)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)
    return out
