"""Readers for COCO 2014 captions/instances files and the Karpathy split, into the ``captions`` table.

Bad files raise ``ValueError``/``FileNotFoundError`` naming the file and field; bad items (a caption whose image
is unknown, an empty caption, a missing image file) become rows of the ``errors`` table.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_schemas.errors import error_row

STAGE = "captions"


class InputFileError(ValueError):
    """A malformed input file; the message names the file and the field."""


def load_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: not valid JSON ({exc})") from exc


def _require(obj: Any, key: str, path: Path, where: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise InputFileError(f"{path}: {where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputFileError(f"{path}: {where}: field {key!r} must be {names}, got {type(value).__name__}")
    return value


@dataclass
class CaptionRead:
    rows: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        reasons: dict[str, int] = {}
        for e in self.errors:
            reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
        return {"captions": len(self.rows), "errors": len(self.errors), "error_reasons": reasons}


def _images_index(images: list, path: Path) -> dict[int, dict]:
    index = {}
    for i, im in enumerate(images):
        where = f"images[{i}]"
        iid = _require(im, "id", path, where, int)
        index[iid] = {"file_name": _require(im, "file_name", path, where, str),
                      "width": _require(im, "width", path, where, int),
                      "height": _require(im, "height", path, where, int)}
    return index


def read_coco_captions(captions_json: str | Path, *, split: str, images_dir: str | Path | None = None) -> CaptionRead:
    """Read ``captions_<split>2014.json``. With ``images_dir``, captions of missing image files are errors."""
    path = Path(captions_json)
    data = load_json(path)
    images = _require(data, "images", path, "top level", list)
    anns = _require(data, "annotations", path, "top level", list)
    index = _images_index(images, path)
    out = CaptionRead()
    exists: dict[int, bool] = {}
    for i, ann in enumerate(anns):
        where = f"annotations[{i}]"
        cid = _require(ann, "id", path, where, int)
        iid = _require(ann, "image_id", path, where, int)
        text = _require(ann, "caption", path, where, (str, type(None)))
        if iid not in index:
            out.errors.append(error_row(STAGE, cid, "unknown_image", f"{path}: {where}: image_id {iid} not in images"))
            continue
        if text is None or not text.strip():
            out.errors.append(error_row(STAGE, cid, "empty_caption", f"{path}: {where}: empty caption"))
            continue
        im = index[iid]
        if images_dir is not None:
            if iid not in exists:
                exists[iid] = (Path(images_dir) / im["file_name"]).is_file()
            if not exists[iid]:
                out.errors.append(error_row(STAGE, cid, "missing_image",
                                            f"{Path(images_dir) / im['file_name']}: image file not found"))
                continue
        out.rows.append({"caption_id": cid, "image_id": iid, "file_name": im["file_name"], "width": im["width"],
                         "height": im["height"], "caption": text.strip(), "split": split})
    return out


def read_coco_instances(instances_json: str | Path) -> dict[int, list[dict]]:
    """Read ``instances_<split>2014.json`` into {image_id: [{box_xyxy, category, attributes}]}."""
    path = Path(instances_json)
    data = load_json(path)
    cats = {}
    for i, c in enumerate(_require(data, "categories", path, "top level", list)):
        cats[_require(c, "id", path, f"categories[{i}]", int)] = _require(c, "name", path, f"categories[{i}]", str)
    by_image: dict[int, list[dict]] = {}
    for i, ann in enumerate(_require(data, "annotations", path, "top level", list)):
        where = f"annotations[{i}]"
        iid = _require(ann, "image_id", path, where, int)
        bbox = _require(ann, "bbox", path, where, list)
        if len(bbox) != 4 or not all(isinstance(v, (int, float)) for v in bbox):
            raise InputFileError(f"{path}: {where}: field 'bbox' must be 4 numbers [x, y, w, h], got {bbox!r}")
        cid = _require(ann, "category_id", path, where, int)
        if cid not in cats:
            raise InputFileError(f"{path}: {where}: category_id {cid} not in categories")
        x, y, w, h = (float(v) for v in bbox)
        by_image.setdefault(iid, []).append({
            "ann_id": ann.get("id"), "box_xyxy": [x, y, x + w, y + h], "category": cats[cid],
            "attributes": ann.get("attributes", {}), "iscrowd": ann.get("iscrowd", 0)})
    return by_image


def read_karpathy(dataset_json: str | Path, *, splits: tuple[str, ...] = ("train", "restval", "val", "test"),
                  image_root: str | Path | None = None, sizes: dict[int, tuple[int, int]] | None = None
                  ) -> CaptionRead:
    """Read the Karpathy split file (``dataset_coco.json``): caption_id = sentid, image_id = cocoid.

    ``file_name`` is ``<filepath>/<filename>``. Image sizes come from ``sizes`` ({cocoid: (w, h)}, e.g. from the
    COCO captions files) or, with ``image_root``, from the image headers.
    """
    from PIL import Image

    path = Path(dataset_json)
    data = load_json(path)
    out = CaptionRead()
    for i, im in enumerate(_require(data, "images", path, "top level", list)):
        where = f"images[{i}]"
        split = _require(im, "split", path, where, str)
        if split not in splits:
            continue
        rel = f"{_require(im, 'filepath', path, where, str)}/{_require(im, 'filename', path, where, str)}"
        iid = _require(im, "cocoid", path, where, int)
        size = (sizes or {}).get(iid)
        if size is None and image_root is not None:
            fp = Path(image_root) / rel
            if not fp.is_file():
                for j, s in enumerate(_require(im, "sentences", path, where, list)):
                    out.errors.append(error_row(STAGE, _require(s, "sentid", path, f"{where}.sentences[{j}]", int),
                                                "missing_image", f"{fp}: image file not found"))
                continue
            with Image.open(fp) as img:
                size = img.size
        if size is None:
            raise InputFileError(f"{path}: {where}: no image size for cocoid {iid} (pass sizes= or image_root=)")
        for j, s in enumerate(_require(im, "sentences", path, where, list)):
            w2 = f"{where}.sentences[{j}]"
            sid = _require(s, "sentid", path, w2, int)
            raw = _require(s, "raw", path, w2, str)
            if not raw.strip():
                out.errors.append(error_row(STAGE, sid, "empty_caption", f"{path}: {w2}: empty caption"))
                continue
            out.rows.append({"caption_id": sid, "image_id": iid, "file_name": rel, "width": int(size[0]),
                             "height": int(size[1]), "caption": raw.strip(), "split": split})
    return out


def read_coco_root(root: str | Path, splits: tuple[str, ...] = ("train", "val", "test")) -> CaptionRead:
    """COCO-layout root (world or COCO 2014): ``annotations/captions_<split>2014.json`` + ``<split>2014/``.

    ``file_name`` is stored relative to ``root`` (``<split>2014/<file>``).
    """
    root = Path(root)
    out = CaptionRead()
    for split in splits:
        r = read_coco_captions(root / "annotations" / f"captions_{split}2014.json", split=split,
                               images_dir=root / f"{split}2014")
        for row in r.rows:
            row["file_name"] = f"{split}2014/{row['file_name']}"
        out.rows += r.rows
        out.errors += r.errors
    return out
