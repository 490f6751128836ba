"""Image-text sources beyond COCO, each read into the same ``captions`` rows as ``pipeline.captions``.

- ``csv``: open_clip's CSV/TSV (``--csv-img-key filepath --csv-caption-key title``, tab-separated by default);
  image paths relative to ``image_root`` (default: the file's folder) or absolute.
- ``folder``: an image folder plus a captions JSONL of ``{"file_name", "caption"[, "id", "split"]}``.
- ``webdataset``: tar shards (local paths or brace patterns, ``img2dataset`` layout: ``{key}.jpg`` +
  ``{key}.txt``/``{key}.json``), read with the ``webdataset`` library; every image is extracted once into a
  content-addressed store (``<store>/<sha[:2]>/<sha>.<ext>``) that the grounding and training stages read.

Every reader takes the image size from the image itself (never from the input file; as displayed, EXIF
orientation applied), gives each image a stable
``image_id`` (from its path under the image root; in the store the path is the content hash) and turns bad items
(missing or unreadable image, empty caption, a sample without image or caption, a caption, file name, member
name or JSON key that is not valid Unicode: ``pipeline.text_checks.unicode_problem``) into ``errors`` rows.
Malformed files (bad JSON, a missing column) raise ``InputFileError`` naming the file, line and value.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Literal, get_args

from data_schemas.errors import error_row
from pipeline.captions import (STAGE, CaptionRead, InputFileError, NotUtf8, check_unique_id, jsonl_records,
                               not_utf8_error, text_lines)
from pipeline.text_checks import caption_problem, shown, unicode_problem
from pipeline.images import ImageSizes

# macco-tsv: pipeline.macco_tsv (MACCO's file); negclip-tsv: pipeline.negclip_tsv (NegCLIP's); caption-file: a COCO
# captions json or a caption JSONL (pipeline.captions)
Source = Literal["coco", "csv", "folder", "webdataset", "macco-tsv", "negclip-tsv", "caption-file"]
SOURCES = get_args(Source)
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")


COCO_FILE = re.compile(r"COCO_(?:train|val|test)2014_(\d{12})\.jpg$")


def image_id_of(file_name: str) -> int:
    """An image's id from its path under the image root: a COCO 2014 file name's own id
    (``COCO_train2014_000000123456.jpg`` -> 123456, so the rows meet COCO's instance annotations), else a stable
    60-bit hash of the path."""
    m = COCO_FILE.search(file_name)
    if m:
        return int(m.group(1))
    return int(hashlib.sha256(file_name.encode()).hexdigest()[:15], 16)


def _add(out: CaptionRead, images: ImageSizes, caption_id: int, file_name: str, caption, split: str,
         where: str) -> None:
    """One caption row, or the error row that says why not (``caption_problem``: the one caption rule; a file name
    that is not valid Unicode: ``unicode_problem``). ``where`` is shown as valid Unicode (``shown``)."""
    where = shown(where)
    problem = caption_problem(caption) or unicode_problem(file_name, "file name", name=True)
    if problem is not None:
        out.errors.append(error_row(STAGE, caption_id, problem[0], f"{where}: {problem[1]}"))
        return
    size = images.size(file_name)
    if isinstance(size, str):
        out.errors.append(error_row(STAGE, caption_id, size.reason, f"{where}: {shown(size)}"))
        return
    out.rows.append({"caption_id": caption_id, "image_id": image_id_of(file_name), "file_name": file_name,
                     "width": int(size[0]), "height": int(size[1]), "caption": caption.strip(),
                     "split": split})


def add_tsv_row(out: CaptionRead, images: ImageSizes, i: int, rec: dict, root: Path, split: str, where: str) -> bool:
    """A training file's row (``filepath``, ``title``: MACCO's and NegCLIP's) as a caption row, or its error row;
    True when a caption row was written (the row's own annotations then go with it)."""
    if not rec["filepath"]:
        out.errors.append(error_row(STAGE, i, "missing_image", f"{where}: empty 'filepath'"))
        return False
    n = len(out.rows)
    _add(out, images, i, _relative(rec["filepath"], root), rec["title"], split, where)
    return len(out.rows) > n


def _relative(path_value: str, root: Path) -> str:
    """An image path as stored in the table: relative to the image root (absolute paths under it too)."""
    p = Path(path_value)
    if p.is_absolute():
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            return p.as_posix()  # outside the root: kept absolute (root / absolute == absolute)
    return p.as_posix()


def csv_records(path: Path, separator: str, required: tuple[str, ...], errors: list[dict]):
    """(data row index, where, record) for each record of a CSV/TSV read one line at a time (CSV quoting within
    the line): a line with an unclosed or stray quote is a ``csv_quoting`` row in ``errors`` naming file and line
    — it never swallows the lines after it — and a line that is not UTF-8 a ``not_utf8`` row; blank lines are not
    rows. A bad header, a missing ``required`` column or a line with more fields than the header is an
    ``InputFileError``. A record missing trailing fields has None for them."""
    # a field longer than csv's default limit (128 KiB) is read whole: the caption rule then names its length
    # (caption_too_long), instead of a csv error blamed on a quote
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    lines = text_lines(path)
    first = next(lines, (1, ""))[1]
    if isinstance(first, NotUtf8):
        raise InputFileError(f"{path}: line 1 (the header): not UTF-8 text at {first}")
    try:
        header = next(csv.reader([first], delimiter=separator, strict=True), [])
    except csv.Error as exc:
        raise InputFileError(f"{path}: line 1 (the header): {exc}") from exc
    for key in required:
        if key not in header:
            raise InputFileError(f"{path}: line 1: no column {key!r} (columns: {header}; separator {separator!r})")
    i = -1
    for n, line in lines:
        if not isinstance(line, NotUtf8) and not line.strip():
            continue
        where = f"{shown(path)}: line {n}"
        i += 1
        if isinstance(line, NotUtf8):
            errors.append(not_utf8_error(path, n, line, i))
            continue
        try:
            fields = next(csv.reader([line], delimiter=separator, strict=True))
        except csv.Error as exc:
            errors.append(error_row(STAGE, i, "csv_quoting", f"{where}: {exc} (an unclosed or stray quote in "
                                                            f"{line[:60]!r})"))
            continue
        if len(fields) > len(header):
            raise InputFileError(f"{where}: {len(fields)} fields, the header has {len(header)}: "
                                 f"{fields[len(header):]!r}")
        yield i, where, dict(zip(header, fields + [None] * (len(header) - len(fields))))


def read_csv_source(path: str | Path, *, img_key: str = "filepath", caption_key: str = "title",
                    separator: str = "\t", image_root: str | Path | None = None, split: str = "train",
                    split_key: str | None = None) -> CaptionRead:
    """open_clip's CSV/TSV: one caption per line; ``caption_id`` is the data row's index (0-based, blank lines
    not counted); bad lines are error rows (``csv_records``)."""
    path = Path(path)
    root = Path(image_root) if image_root else path.parent
    images, out = ImageSizes(root), CaptionRead()
    for i, where, rec in csv_records(path, separator, (img_key, caption_key, *([split_key] if split_key else [])),
                                     out.errors):
        file_value = rec[img_key]
        if not file_value:
            out.errors.append(error_row(STAGE, i, "missing_image", f"{where}: empty {img_key!r}"))
            continue
        _add(out, images, i, _relative(file_value, root), rec[caption_key],
             rec[split_key] if split_key else split, where)
    return out


def read_folder_source(captions_jsonl: str | Path, *, image_root: str | Path | None = None,
                       split: str = "train") -> CaptionRead:
    """An image folder + a JSONL of ``{"file_name", "caption"[, "id", "split"]}`` (``id`` default: line - 1)."""
    path = Path(captions_jsonl)
    if path.is_dir():
        raise InputFileError(f"{path} is a folder: --source folder reads a JSONL file with one "
                             '{"file_name": ..., "caption": ...} per line (optional "id", "split"), the images '
                             "relative to the file's folder or to --image-root")
    root = Path(image_root) if image_root else path.parent
    images, out = ImageSizes(root), CaptionRead()
    seen: dict[int, str] = {}
    for n, rec in jsonl_records(path, out.errors):
        where = f"{shown(path)}: line {n}"
        for k in ("file_name", "caption"):
            if k not in rec:
                raise InputFileError(f"{where}: missing field {k!r} (fields: {sorted(rec)})")
        cid = rec.get("id", n - 1)
        if not isinstance(cid, int) or isinstance(cid, bool):
            raise InputFileError(f"{where}: field 'id' must be an integer, got {cid!r}")
        check_unique_id(seen, cid, path, f"line {n}")
        _add(out, images, cid, _relative(str(rec["file_name"]), root), rec["caption"], rec.get("split", split),
             where)
    return out


def expand_shards(patterns: str | list[str]) -> list[str]:
    """Tar shard paths from paths and brace patterns (``shards/{00000..00009}.tar``), in the given order."""
    from braceexpand import braceexpand

    out: list[str] = []
    for p in [patterns] if isinstance(patterns, str) else list(patterns):
        out += list(braceexpand(str(p)))
    missing = [p for p in out if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"{missing[0]}: webdataset shard not found"
                                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return out


class BadText(ValueError):
    """A sample's member name or ``.json`` holding a string that is not valid Unicode: (reason, message)."""


def _caption_of(sample: dict) -> str | None:
    """A sample's caption from its ``.txt`` (UTF-8) or its ``.json``'s ``caption``; raises UnicodeDecodeError /
    json.JSONDecodeError for bytes that are not UTF-8 text / not JSON (never stored with U+FFFD), ``BadText`` for
    a member name or a ``.json`` key or string that is not valid Unicode (``unicode_problem``)."""
    for member in [sample.get("__key__", "")] + [k for k in sample if not k.startswith("__")]:
        problem = unicode_problem(member, "member name", name=True)
        if problem is not None:
            raise BadText(*problem)
    if "txt" in sample:
        return sample["txt"].decode("utf-8")
    if "json" in sample:
        meta = json.loads(sample["json"].decode("utf-8"))
        problem = unicode_problem(meta, ".json")
        if problem is not None:
            raise BadText(*problem)
        if isinstance(meta, dict):
            return meta.get("caption")
    return None


def read_webdataset_source(patterns: str | list[str], store: str | Path, *, split: str = "train") -> CaptionRead:
    """Tar shards -> captions rows; images land once in ``store`` (content-addressed, written atomically).

    ``caption_id`` is the sample's index over the shards in order. A shard that cannot be read, a sample
    without an image or a caption, and an image that does not decode are error rows naming shard and key.
    """
    import webdataset as wds

    store = Path(store)
    shards = expand_shards(patterns)
    out = CaptionRead()
    failures: list[str] = []

    def record(exc: Exception) -> bool:  # the library's handler: keep going, remember what failed
        failures.append(f"{type(exc).__name__}: {exc}")
        return True

    dataset = wds.WebDataset(shards, shardshuffle=False, handler=record, empty_check=False,
                             nodesplitter=lambda urls: urls, workersplitter=lambda urls: urls)
    images = ImageSizes(store)
    for i, sample in enumerate(dataset):
        where = shown(f"{sample.get('__url__', '?')}: sample {sample.get('__key__', '?')}")
        ext = next((e for e in IMAGE_EXTS if e in sample), None)
        if ext is None:
            out.errors.append(error_row(STAGE, i, "missing_image", f"{where}: no image ({'/'.join(IMAGE_EXTS)})"))
            continue
        try:
            caption = _caption_of(sample)
        except BadText as exc:
            out.errors.append(error_row(STAGE, i, exc.args[0], f"{where}: {exc.args[1]}"))
            continue
        except UnicodeDecodeError as exc:
            member = "txt" if "txt" in sample else "json"
            out.errors.append(error_row(STAGE, i, "not_utf8", f"{where}: .{member} is not UTF-8 text at byte "
                                                              f"{exc.start}; re-encode it as UTF-8"))
            continue
        except json.JSONDecodeError as exc:
            out.errors.append(error_row(STAGE, i, "bad_metadata", f"{where}: .json is not valid JSON ({exc.msg})"))
            continue
        data = sample[ext]
        sha = hashlib.sha256(data).hexdigest()
        file_name = f"{sha[:2]}/{sha}.{ext}"
        target = store / file_name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
        _add(out, images, i, file_name, caption, split, where)
    for k, msg in enumerate(failures):
        out.errors.append(error_row(STAGE, f"shard-error:{k}", "unreadable_shard", shown(msg)))
    return out
