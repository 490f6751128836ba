"""Readers for COCO 2014 captions/instances files, the Karpathy split and caption JSONL, into the ``captions``
table.

Bad files raise ``InputFileError``/``FileNotFoundError`` naming the file and field; bad items (a caption whose
image is unknown, an empty caption, a missing image file, a string that is not valid Unicode) become rows of the
``errors`` table.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_schemas import InputFileError, load_json
from data_schemas.errors import error_row
from pipeline.text_checks import caption_problem, shown, unicode_problem

STAGE = "captions"
COCO_CAPTIONS_NAME = re.compile(r"captions_(?P<split>[A-Za-z]+)2014")
DEFAULT_SPLIT = "train"

__all__ = ["InputFileError", "CaptionRead", "read_caption_file", "read_caption_jsonl", "read_coco_captions",
           "read_coco_instances", "read_coco_root", "read_karpathy", "split_of"]


def _require(obj: Any, key: str, path: Path, where: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise InputFileError(f"{path}: {where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputFileError(f"{path}: {where}: field {key!r} must be {names}, got {type(value).__name__}")
    return value


def check_unique_id(seen: dict, value, path: Path, where: str, field: str = "id") -> None:
    """The one duplicate-id rule of every caption and annotation reader (COCO json, Karpathy, JSONL, image-folder
    JSONL, instances): an id used twice is an ``InputFileError`` naming the file and both places — two rows with
    one id would break every table keyed on it."""
    if value in seen:
        raise InputFileError(f"{path}: {where}: {field} {value} already used at {seen[value]}")
    seen[value] = where


@dataclass
class CaptionRead:
    rows: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    official: list[dict] = field(default_factory=list)  # a macco-tsv source's annotations (the official table)
    tables: dict[str, list[dict]] = field(default_factory=dict)  # other tables a source gives (negclip-tsv), by name

    def summary(self) -> dict:
        reasons: dict[str, int] = {}
        for e in self.errors:
            reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
        return {"captions": len(self.rows), "errors": len(self.errors), "error_reasons": reasons}


def _images_index(images: list, path: Path) -> tuple[dict[int, dict], dict[int, tuple[str, str]]]:
    """({image id: file name and size}, {image id: (reason, message)} of the entries holding a string that is not
    valid Unicode: their captions become error rows)."""
    index, bad, seen = {}, {}, {}
    for i, im in enumerate(images):
        where = f"images[{i}]"
        iid = _require(im, "id", path, where, int)
        check_unique_id(seen, iid, path, where)
        problem = unicode_problem(im, f"{shown(path)}: {where}:")
        if problem is not None:
            bad[iid] = problem
            continue
        index[iid] = {"file_name": _require(im, "file_name", path, where, str),
                      "width": _require(im, "width", path, where, int),
                      "height": _require(im, "height", path, where, int)}
    return index, bad


def read_coco_captions(captions_json: str | Path, *, split: str, images_dir: str | Path | None = None) -> CaptionRead:
    """Read ``captions_<split>2014.json``. With ``images_dir``, captions of missing image files are errors."""
    path = Path(captions_json)
    data = load_json(path)
    images = _require(data, "images", path, "top level", list)
    anns = _require(data, "annotations", path, "top level", list)
    index, bad_images = _images_index(images, path)
    src = shown(path)
    out = CaptionRead()
    exists: dict[int, bool] = {}
    seen: dict[int, str] = {}
    for i, ann in enumerate(anns):
        where = f"annotations[{i}]"
        cid = _require(ann, "id", path, where, int)
        check_unique_id(seen, cid, path, where)
        iid = _require(ann, "image_id", path, where, int)
        problem = unicode_problem(ann, f"{src}: {where}:") or bad_images.get(iid)
        if problem is not None:
            out.errors.append(error_row(STAGE, cid, *problem))
            continue
        text = _require(ann, "caption", path, where, (str, type(None)))
        if iid not in index:
            out.errors.append(error_row(STAGE, cid, "unknown_image", f"{src}: {where}: image_id {iid} not in images"))
            continue
        problem = caption_problem(text)
        if problem is not None:
            out.errors.append(error_row(STAGE, cid, problem[0], f"{src}: {where}: {problem[1]}"))
            continue
        im = index[iid]
        if images_dir is not None:
            if iid not in exists:
                exists[iid] = (Path(images_dir) / im["file_name"]).is_file()
            if not exists[iid]:
                out.errors.append(error_row(STAGE, cid, "missing_image",
                                            f"{shown(Path(images_dir) / im['file_name'])}: image file not found"))
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
        _refuse_bad_text(c, path, f"categories[{i}]")
        cats[_require(c, "id", path, f"categories[{i}]", int)] = _require(c, "name", path, f"categories[{i}]", str)
    by_image: dict[int, list[dict]] = {}
    seen: dict = {}
    for i, ann in enumerate(_require(data, "annotations", path, "top level", list)):
        where = f"annotations[{i}]"
        _refuse_bad_text(ann, path, where)
        iid = _require(ann, "image_id", path, where, int)
        if isinstance(ann, dict) and ann.get("id") is not None:
            check_unique_id(seen, ann["id"], path, where)
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


def _refuse_bad_text(value, path: Path, where: str) -> None:
    """``unicode_problem`` where a reader has no error rows (the instances file: boxes, not captions): one line."""
    problem = unicode_problem(value, f"{shown(path)}: {where}:")
    if problem is not None:
        raise InputFileError(problem[1])


def read_karpathy(dataset_json: str | Path, *, splits: tuple[str, ...] = ("train", "restval", "val", "test"),
                  image_root: str | Path | None = None, sizes: dict[int, tuple[int, int]] | None = None
                  ) -> CaptionRead:
    """Read the Karpathy split file (``dataset_coco.json``): caption_id = sentid, image_id = cocoid.

    ``file_name`` is ``<filepath>/<filename>``. Image sizes come from ``sizes`` ({cocoid: (w, h)}, e.g. from the
    COCO captions files) or, with ``image_root``, from the image headers.
    """
    from pipeline.images import ImageProblem, ImageSizes

    path = Path(dataset_json)
    data = load_json(path)
    out, src = CaptionRead(), shown(path)
    seen: dict[int, str] = {}
    images = ImageSizes(Path(image_root)) if image_root is not None else None
    for i, im in enumerate(_require(data, "images", path, "top level", list)):
        where = f"images[{i}]"
        split = _require(im, "split", path, where, str)
        if split not in splits:
            continue
        rel = f"{_require(im, 'filepath', path, where, str)}/{_require(im, 'filename', path, where, str)}"
        iid = _require(im, "cocoid", path, where, int)
        bad = unicode_problem({k: v for k, v in im.items() if k != "sentences"}, f"{src}: {where}:")
        if bad is not None:  # a file name that is not valid Unicode: an error row per caption
            for j, s in enumerate(_require(im, "sentences", path, where, list)):
                out.errors.append(error_row(STAGE, _require(s, "sentid", path, f"{where}.sentences[{j}]", int), *bad))
            continue
        size = (sizes or {}).get(iid)
        if size is None and image_root is not None:
            size = images.size(rel)
            if isinstance(size, ImageProblem):  # missing, unreadable or too large: an error row per caption
                for j, s in enumerate(_require(im, "sentences", path, where, list)):
                    out.errors.append(error_row(STAGE, _require(s, "sentid", path, f"{where}.sentences[{j}]", int),
                                                size.reason, shown(size)))
                continue
        if size is None:
            raise InputFileError(f"{path}: {where}: no image size for cocoid {iid} (pass sizes= or image_root=)")
        for j, s in enumerate(_require(im, "sentences", path, where, list)):
            w2 = f"{where}.sentences[{j}]"
            sid = _require(s, "sentid", path, w2, int)
            check_unique_id(seen, sid, path, w2, "sentid")
            bad = unicode_problem(s, f"{src}: {w2}:")
            if bad is not None:
                out.errors.append(error_row(STAGE, sid, *bad))
                continue
            raw = _require(s, "raw", path, w2, str)
            problem = caption_problem(raw)
            if problem is not None:
                out.errors.append(error_row(STAGE, sid, problem[0], f"{src}: {w2}: {problem[1]}"))
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
    caption_file: dict[int, Path] = {}
    image_file: dict[int, Path] = {}
    for split in splits:
        path = root / "annotations" / f"captions_{split}2014.json"
        r = read_coco_captions(path, split=split, images_dir=root / f"{split}2014")
        ids = [row["caption_id"] for row in r.rows] + [int(e["item_id"]) for e in r.errors]
        check_ids_across_files(caption_file, ids, path, "caption id")
        check_ids_across_files(image_file, {row["image_id"] for row in r.rows}, path, "image id")
        for row in r.rows:
            row["file_name"] = f"{split}2014/{row['file_name']}"
        out.rows += r.rows
        out.errors += r.errors
    return out


def check_ids_across_files(owner: dict[int, Path], ids, path: Path, what: str) -> None:
    """The duplicate-id rule across the files of one source (a COCO root's split files): an id one file uses may
    not appear in another (two splits sharing ids would merge their images, boxes and captions)."""
    for i in ids:
        if owner.get(i, path) != path:
            raise InputFileError(f"{path}: {what} {i} is also used in {owner[i]}: ids must be unique across the "
                                 "split files of one source")
        owner[i] = path


def split_of(path: str | Path, split: str | None = None) -> tuple[str, str]:
    """(the split of a captions file's rows, where it came from): ``split`` if given, else the COCO file
    name's (``captions_<split>2014.json``), else ``train`` - never an arbitrary file name (which the training
    split filter would then match no row of)."""
    if split:
        return split, "given"
    m = COCO_CAPTIONS_NAME.fullmatch(Path(path).stem)
    if m:
        return m["split"], f"from the file name {Path(path).name}"
    return DEFAULT_SPLIT, f"default: {Path(path).name} is not named captions_<split>2014.json"


def _positive_int(value) -> int:
    """``value`` if it is a positive int (a size the file gives), else 0 (unknown)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class NotUtf8(str):
    """What ``text_lines`` gives for a line that is not valid UTF-8: where the first bad byte is."""


def text_lines(path: Path):
    """(line number, text) for every line of a text file read as UTF-8 (a byte-order mark at the start is
    dropped); a line that is not valid UTF-8 gives a ``NotUtf8`` (where its first bad byte is) for the caller to
    turn into an error row, and the other lines are read as usual. Lines end at LF, CR LF or CR."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    for n, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            yield n, raw.decode("utf-8-sig" if n == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            yield n, NotUtf8(f"byte {exc.start} ({raw[exc.start:exc.start + 1]!r})")


def not_utf8_error(path: Path, n: int, where: str, item_id=None) -> dict:
    """The error row of a line that is not valid UTF-8 (``item_id``: the caption's, else ``line:N``)."""
    return error_row(STAGE, f"line:{n}" if item_id is None else item_id, "not_utf8",
                     f"{shown(path)}: line {n}: not UTF-8 text at {where}; re-encode the file as UTF-8")


def jsonl_records(path: Path, errors: list[dict] | None = None):
    """(line number, object) for every non-blank line of a JSONL file; a line that is not a JSON object is an
    ``InputFileError`` naming file, line and the line's start. A line that is not UTF-8 (``not_utf8``) or whose
    object holds a key or string that is not valid Unicode (``unicode_problem``) is a row added to ``errors`` and
    skipped, or, without ``errors``, an ``InputFileError``."""
    for n, line in text_lines(path):
        if isinstance(line, NotUtf8):
            row = not_utf8_error(path, n, line)
        elif not line.strip():
            continue
        else:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputFileError(f"{path}: line {n}: not valid JSON ({exc.msg}): {line[:80]!r}") from exc
            if not isinstance(rec, dict):
                raise InputFileError(f"{path}: line {n}: a JSON object expected, got {line[:80]!r}")
            bad = unicode_problem(rec, f"{shown(path)}: line {n}:")
            if bad is None:
                yield n, rec
                continue
            row = error_row(STAGE, f"line:{n}", *bad)
        if errors is None:
            raise InputFileError(row["message"])
        errors.append(row)


def read_caption_jsonl(path: str | Path, *, split: str, image_root: str | Path | None = None) -> CaptionRead:
    """A JSONL of ``{id, image_id, caption[, file_name, width, height, split]}``, one caption per line.

    With ``image_root`` the size of a line with ``file_name`` is read from ``image_root/file_name`` (a missing
    or unreadable image is an error row); otherwise the line's ``width``/``height``, or 0 (unknown: grounding
    refuses it). An empty, blank or null caption is an ``empty_caption`` row, a caption that is not text a
    ``non_text_caption`` row. A line's own ``split`` wins over ``split``.
    """
    from pipeline.images import ImageSizes

    path = Path(path)
    images = ImageSizes(Path(image_root)) if image_root is not None else None
    out, seen, src = CaptionRead(), {}, shown(path)
    for n, rec in jsonl_records(path, out.errors):
        where = f"line {n}"
        cid = _require(rec, "id", path, where, int)
        iid = _require(rec, "image_id", path, where, int)
        if "caption" not in rec:
            raise InputFileError(f"{path}: {where}: missing field 'caption'")
        check_unique_id(seen, cid, path, where)
        text, file_name = rec["caption"], rec.get("file_name") or ""
        problem = caption_problem(text)
        if problem is not None:
            out.errors.append(error_row(STAGE, cid, problem[0], f"{src}: {where}: {problem[1]}"))
            continue
        size = (_positive_int(rec.get("width")), _positive_int(rec.get("height")))
        if images is not None and file_name:
            size = images.size(file_name)
            if isinstance(size, str):
                out.errors.append(error_row(STAGE, cid, size.reason, f"{src}: {where}: {shown(size)}"))
                continue
        out.rows.append({"caption_id": cid, "image_id": iid, "file_name": str(file_name), "width": int(size[0]),
                         "height": int(size[1]), "caption": text.strip(), "split": rec.get("split") or split})
    return out


def read_caption_file(path: str | Path, *, split: str, image_root: str | Path | None = None) -> CaptionRead:
    """A COCO captions json or (``.jsonl``) a caption JSONL: rows plus error rows for the bad items.

    ``image_root`` is the folder ``file_name`` is relative to: a COCO json's captions of missing image files
    become errors, a JSONL's sizes are read from the images.
    """
    path = Path(path)
    if path.suffix == ".jsonl":
        return read_caption_jsonl(path, split=split, image_root=image_root)
    return read_coco_captions(path, split=split, images_dir=image_root)
