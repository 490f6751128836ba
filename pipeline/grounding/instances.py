"""COCO instance boxes for the annotations backend, read without a Python object per annotation kept.

``instances_<split>2014.json`` is one JSON document (COCO train: 330 MB, 600 k annotations whose polygons are most
of it); ``json.load`` builds all of it as Python objects (several GB) to keep four numbers and a name per box. Here
the file is read as a stream (``_elements``: the standard library's C decoder, ``raw_decode``, over one element of a
top-level array at a time, in 1 MiB chunks), so at most one annotation is a Python object at a time, and what the
grounder needs is kept as columns (``InstanceBoxes``: NumPy arrays sorted by image, a category / colour / size as a
code into a short list). Chosen over an incremental JSON package (none is a dependency) and over pyarrow's JSON
reader (line-delimited JSON only). The checks and their one-line messages are ``read_coco_instances``'s
(``pipeline.captions``); a check that needs the whole file (an annotation id used twice, a category id the
``categories`` list, which COCO writes after the annotations, lacks) runs on the columns after the pass.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import re
from array import array
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from data_schemas import InputFileError

_CHUNK = 1 << 18
_DECODER = json.JSONDecoder()
_NON_SPACE = re.compile(r"\S")
NOT_GIVEN = -1


class InstanceBoxes:
    """Every annotation's box, category, colour and size as columns sorted by image (file order within one);
    ``get(image_id)`` builds one image's annotations as ``read_coco_instances`` rows (the fields the grounder reads)."""

    def __init__(self, image_id: np.ndarray, boxes: np.ndarray, category: np.ndarray, colour: np.ndarray,
                 size: np.ndarray, names: list[str], values: list):
        order = np.argsort(image_id, kind="stable")
        self.image_id, self.boxes = image_id[order], boxes[order]
        self.category, self.colour, self.size = category[order], colour[order], size[order]
        self.names, self.values = names, values  # category names; attribute values (colour and size codes)
        self.images = np.unique(self.image_id)

    @classmethod
    def from_mapping(cls, instances: dict[int, list[dict]]) -> "InstanceBoxes":
        """From ``read_coco_instances``' {image_id: [row]} (callers holding rows, tests)."""
        cols = _Columns()
        for iid, anns in instances.items():
            for a in anns:
                cols.add(iid, a["box_xyxy"], cols.names.setdefault(a["category"], len(cols.names)), a.get("attributes"))
        return cols.done()

    def __len__(self) -> int:
        return len(self.images)

    def get(self, image_id: int, default=()) -> list[dict]:
        lo, hi = np.searchsorted(self.image_id, [image_id, image_id + 1])
        if lo == hi:
            return list(default)
        return [{"box_xyxy": [float(v) for v in self.boxes[k]], "category": self.names[self.category[k]],
                 "attributes": {n: self.values[c[k]] for n, c in (("colour", self.colour), ("size", self.size))
                                if c[k] != NOT_GIVEN}} for k in range(lo, hi)]

    def categories(self) -> set[str]:
        return {self.names[c] for c in np.unique(self.category)}

    def colours(self) -> set:
        return {self.values[c] for c in np.unique(self.colour) if c != NOT_GIVEN}

    def fingerprint(self) -> str:
        """sha256 of the columns (a shard fingerprint's inputs when the caller has no key)."""
        h = hashlib.sha256()
        for a in (self.image_id, self.boxes, self.category, self.colour, self.size):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(json.dumps([self.names, [repr(v) for v in self.values]]).encode())
        return h.hexdigest()


class _Columns:
    """The growing columns of one or more files (``array`` buffers: 8 bytes a number, no object per row)."""

    def __init__(self):
        self.image_id, self.boxes = array("q"), array("d")
        self.category, self.colour, self.size = array("i"), array("i"), array("i")
        self.names: dict[str, int] = {}
        self.values: dict[str, int] = {}
        self.value_list: list = []

    def code(self, value) -> int:
        key = json.dumps(value, sort_keys=True)
        if key not in self.values:
            self.values[key] = len(self.value_list)
            self.value_list.append(value)
        return self.values[key]

    def add(self, image_id: int, xyxy, category: int, attributes) -> None:
        attrs = attributes if isinstance(attributes, dict) else {}
        self.image_id.append(image_id)
        self.boxes.extend(float(v) for v in xyxy)
        self.category.append(category)
        self.colour.append(self.code(attrs["colour"]) if "colour" in attrs else NOT_GIVEN)
        self.size.append(self.code(attrs["size"]) if "size" in attrs else NOT_GIVEN)

    def done(self) -> InstanceBoxes:
        return InstanceBoxes(np.array(self.image_id, dtype=np.int64),
                             np.array(self.boxes, dtype=np.float64).reshape(-1, 4),
                             np.array(self.category, dtype=np.int32), np.array(self.colour, dtype=np.int32),
                             np.array(self.size, dtype=np.int32), list(self.names), self.value_list)


def read_instance_boxes(root: str | Path, splits: Iterable[str]) -> InstanceBoxes:
    """The splits' ``annotations/instances_<split>2014.json`` as ``InstanceBoxes``; an image id in two files is
    refused (``check_ids_across_files``' message)."""
    from pipeline.captions import check_ids_across_files

    cols, owner = _Columns(), {}
    for split in splits:
        path = Path(root) / "annotations" / f"instances_{split}2014.json"
        start = len(cols.image_id)
        _read_file(path, cols)
        found = np.array(cols.image_id[start:], dtype=np.int64)
        _, first = np.unique(found, return_index=True)
        check_ids_across_files(owner, [int(found[i]) for i in np.sort(first)], path, "image id")
    return cols.done()


def _read_file(path: Path, cols: _Columns) -> None:
    """One instances file's annotations appended to ``cols``, with ``read_coco_instances``' checks."""
    from pipeline.captions import _refuse_bad_text, _require, check_unique_id

    cat_ids, ann_ids, other_ids = array("q"), array("q"), {}
    start, seen_keys, categories = len(cols.image_id), set(), None
    for key, i, value in _elements(path, ("annotations", "categories")):
        seen_keys.add(key)
        if key == "categories":  # a short list: kept as it is, checked after the pass
            if i is None:
                categories = value
            else:
                categories = categories or []
                categories.append(value)
            continue
        if i is None:  # "annotations" is not an array
            _require({"annotations": value}, "annotations", path, "top level", list)
        where = f"annotations[{i}]"
        _refuse_bad_text(value, path, where)
        iid = _require(value, "image_id", path, where, int)
        if value.get("id") is not None:
            if isinstance(value["id"], int) and not isinstance(value["id"], bool):
                ann_ids.extend((value["id"], i))
            else:
                check_unique_id(other_ids, value["id"], path, where)
        bbox = _require(value, "bbox", path, where, list)
        if len(bbox) != 4 or not all(isinstance(v, (int, float)) for v in bbox):
            raise InputFileError(f"{path}: {where}: field 'bbox' must be 4 numbers [x, y, w, h], got {bbox!r}")
        cat_ids.extend((_require(value, "category_id", path, where, int), i))
        x, y, w, h = (float(v) for v in bbox)
        cols.add(iid, [x, y, x + w, y + h], NOT_GIVEN, value.get("attributes", {}))  # its code once categories are read
    for key in ("categories", "annotations"):
        if key not in seen_keys:
            _require({}, key, path, "top level", list)
    names = _category_names(path, categories or [])
    _check_ids(path, np.frombuffer(ann_ids, dtype=np.int64).reshape(-1, 2) if ann_ids else np.zeros((0, 2), int))
    _set_categories(path, cols, start, np.frombuffer(cat_ids, dtype=np.int64).reshape(-1, 2)
                    if cat_ids else np.zeros((0, 2), int), names)


def _category_names(path: Path, categories) -> dict[int, str]:
    from pipeline.captions import _refuse_bad_text, _require

    _require({"categories": categories}, "categories", path, "top level", list)
    out = {}
    for i, c in enumerate(categories):
        _refuse_bad_text(c, path, f"categories[{i}]")
        out[_require(c, "id", path, f"categories[{i}]", int)] = _require(c, "name", path, f"categories[{i}]", str)
    return out


def _check_ids(path: Path, ids: np.ndarray) -> None:
    """The first annotation (in file order) whose id an earlier one used: ``check_unique_id``'s message."""
    if not len(ids):
        return
    _, first = np.unique(ids[:, 0], return_index=True)
    later = np.setdiff1d(np.arange(len(ids)), first)
    if len(later):
        j = int(later.min())
        i = int(first[np.searchsorted(np.unique(ids[:, 0]), ids[j, 0])])
        raise InputFileError(f"{path}: annotations[{ids[j, 1]}]: id {ids[j, 0]} already used at "
                             f"annotations[{ids[i, 1]}]")


def _set_categories(path: Path, cols: _Columns, start: int, cat_ids: np.ndarray, names: dict[int, str]) -> None:
    """The file's annotations' category codes (``cols`` rows from ``start``), a category id not in ``categories``
    refused naming the first such annotation."""
    known = np.fromiter(names, dtype=np.int64, count=len(names))
    bad = ~np.isin(cat_ids[:, 0], known)
    if bad.any():
        k = int(np.argmax(bad))
        raise InputFileError(f"{path}: annotations[{cat_ids[k, 1]}]: category_id {cat_ids[k, 0]} not in categories")
    code = {cid: cols.names.setdefault(name, len(cols.names)) for cid, name in names.items()}
    for k, cid in enumerate(cat_ids[:, 0]):
        cols.category[start + k] = code[int(cid)]


def _elements(path: Path, keys: tuple[str, ...]) -> Iterator[tuple[str, int | None, object]]:
    """(key, index, element) for every element of the top-level arrays named ``keys`` of a JSON object file, in
    file order; (key, None, value) for such a key whose value is not an array. Other values are read and dropped
    one element at a time. Malformed JSON or not UTF-8: ``load_json``'s one-line ``InputFileError``."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    r = _Stream(path)
    try:
        if r.peek() != "{":  # valid JSON but not an object: read_coco_instances' first check fails the same way
            r.value()
            raise InputFileError(f"{path}: top level: missing field 'categories'")
        r.pos += 1
        while r.peek() != "}":
            key = r.value()
            if r.peek() != ":":
                r.fail("expected ':'")
            r.pos += 1
            if r.peek() == "[":
                r.pos += 1
                i = 0
                while r.peek() != "]":
                    v = r.value()
                    if key in keys:
                        yield key, i, v
                    i += 1
                    r.separator("]")
                r.pos += 1
            else:
                v = r.value()
                if key in keys:
                    yield key, None, v
            r.separator("}")
    finally:
        r.close()


class _Stream:
    """A UTF-8 JSON file read in chunks; ``value`` decodes the next complete JSON value."""

    def __init__(self, path: Path):
        self.path, self.f = path, open(path, "rb")
        self.dec = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof, self.offset = "", 0, False, 0

    def close(self) -> None:
        self.f.close()

    def fill(self) -> None:
        raw = self.f.read(_CHUNK)
        try:
            text = self.dec.decode(raw, final=not raw)
        except UnicodeDecodeError as exc:
            raise InputFileError(f"{self.path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                                 f"{self.offset + exc.start}): save it as UTF-8") from None
        self.offset += len(raw)
        self.eof = not raw
        self.buf, self.pos = self.buf[self.pos:] + text, 0

    def peek(self) -> str:
        while True:
            m = _NON_SPACE.search(self.buf, self.pos)
            if m is not None:
                self.pos = m.start()
                return self.buf[self.pos]
            if self.eof:
                self.pos = len(self.buf)
                return ""
            self.fill()

    def value(self):
        while True:
            self.peek()
            try:
                v, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof:
                    self.fail(exc.msg)
                self.fill()
                continue
            except RecursionError:
                raise InputFileError(f"{self.path}: JSON nested too deep to read") from None
            if _NON_SPACE.search(self.buf, end) is None and not self.eof:  # a number may go on in the next chunk
                self.fill()
                continue
            self.pos = end
            return v

    def separator(self, close: str) -> None:
        c = self.peek()
        if c == ",":
            self.pos += 1
        elif c != close:
            self.fail(f"expected ',' or '{close}'")

    def fail(self, msg: str):
        raise InputFileError(f"{self.path}: not valid JSON ({msg} near character {self.offset - len(self.buf) + self.pos}"
                             ")")
