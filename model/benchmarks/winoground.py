"""Winoground (Thrush et al., CVPR 2022): ``examples.jsonl`` + ``images/<name>.png``; text, image and group
scores with strict comparisons.

The "clean" subset MACCO reports (171 ids hard-coded in its ``eval/evaluate_comp_benchmark.py``) comes from the
fine-grained tags of Diwan et al. 2022, "Why is Winoground Hard?" (ajd12342/why-winoground-hard,
``new_tag_assignments.json``: examples with no tag). No id list ships here: ``load_clean_ids`` reads the user's
file, either that tag file (``{"id": [tags]}``; clean = no tag) or a list of ids (JSON list, or one per line)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from data_schemas import InputFileError, read_text

from .records import record


def load(root: str | Path) -> list[dict]:
    root = Path(root)
    path = root / "examples.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    out = []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputFileError(f"{path}: line {n}: not a JSON record ({type(exc).__name__})") from None
        record(r, path, f"line {n}", text=("image_0", "image_1", "caption_0", "caption_1"), numbers=("id",))
        out.append(r)
    return out


def load_clean_ids(path: str | Path) -> list[int]:
    """Ids of the clean subset from ``path`` (a tag-assignment dict, a JSON list, or one integer per line)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: Winoground clean-ids file not found")
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        items = []
        for k, tags in data.items():
            if not isinstance(tags, list):
                raise InputFileError(f"{path}: id {k!r}: expected a list of tags, got {tags!r}")
            if not tags:
                items.append((f"key {k!r}", k))
    elif isinstance(data, list):
        items = [(f"item {i}", v) for i, v in enumerate(data)]
    else:
        items = [(f"line {n}", ln.strip()) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    ids = []
    for where, v in items:
        try:
            ids.append(int(v))
        except (TypeError, ValueError):
            raise InputFileError(f"{path}: {where}: {v!r} is not an example id") from None
    if not ids:
        raise InputFileError(f"{path}: no Winoground id found")
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise InputFileError(f"{path}: repeated id(s) {dup[:5]}")
    return sorted(ids)


def clean_subset(examples: list[dict], ids: list[int], path: str | Path) -> list[dict]:
    """The examples whose ``id`` is in ``ids``; an id absent from examples.jsonl is an error."""
    by_id = {int(e["id"]): e for e in examples}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise InputFileError(f"{path}: id(s) {unknown[:5]} not in examples.jsonl ({len(unknown)} unknown)")
    return [by_id[i] for i in ids]


def _image(root: Path, name: str) -> Path:
    p = root / "images" / f"{name}.png"
    return p if p.exists() else root / "images" / name


def _has_images(root: Path, e: dict) -> bool:
    return _image(root, e["image_0"]).exists() and _image(root, e["image_1"]).exists()


def missing_ids(root: str | Path, examples: list[dict]) -> list:
    """The ids of the examples lacking an image file (what ``evaluate`` leaves out), checked before encoding."""
    return [e["id"] for e in examples if not _has_images(Path(root), e)]


def missing_files(root: str | Path, examples: list[dict]) -> list[str]:
    """Per example lacking an image file: that file, named as it is looked for (``images/<name>.png``), with the
    example's id — what a missing-image error shows, as the other benchmarks name their files."""
    root = Path(root)
    out = []
    for e in examples:
        lost = [_image(root, e[k]) for k in ("image_0", "image_1") if not _image(root, e[k]).exists()]
        if lost:
            out.append(f"{lost[0]} (example {e['id']})")
    return out


def evaluate(enc, root: str | Path, examples: list[dict]) -> dict:
    root = Path(root)

    def img(name):
        return _image(root, name)

    present = [e for e in examples if _has_images(root, e)]
    keys = [(str(img(e[f"image_{k}"])), None) for e in present for k in (0, 1)]
    I = enc.images(keys).reshape(len(present), 2, -1) if present else np.zeros((0, 2, 1))
    T = enc.texts([e[f"caption_{k}"] for e in present for k in (0, 1)]).reshape(len(present), 2, -1) \
        if present else np.zeros((0, 2, 1))
    text = image = group = 0
    for i in range(len(present)):
        s = I[i] @ T[i].T  # s[k, l] = sim(image k, caption l)
        t_ok = s[0, 0] > s[0, 1] and s[1, 1] > s[1, 0]
        i_ok = s[0, 0] > s[1, 0] and s[1, 1] > s[0, 1]
        text, image, group = text + t_ok, image + i_ok, group + (t_ok and i_ok)
    n = len(present)
    kept = {id(e) for e in present}
    missing = [e["id"] for e in examples if id(e) not in kept]
    return {"n": n, "missing_images": len(missing), "text": text / n if n else None,
            "image": image / n if n else None, "group": group / n if n else None, "missing_ids": missing}
