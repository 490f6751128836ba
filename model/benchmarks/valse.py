"""VALSE (Parcalabescu et al., ACL 2022): ``data/<piece>.json``, dicts of records with ``caption``, ``foil``,
``image_file``, ``dataset`` and ``mturk``. Valid samples: ``mturk.caption >= 2`` (the README's filter, on by
default). Images through an image-root map per ``dataset``, names compared normalised (``coco2017`` =
``coco_2017``: ``protocols.normalise_dataset``); default ``<root>/images/<dataset>/<image_file>``.
acc_r: sim(caption) > sim(foil) strictly. Avg = mean over the 11 pieces."""
from __future__ import annotations

import json
from pathlib import Path

from data_schemas import InputFileError

from .protocols import normalise_dataset
from .scoring import Case, mean

PIECES = ("existence", "plurals", "counting-hard", "counting-small-quant", "counting-adversarial", "relations",
          "action-replacement", "actant-swap", "coreference-standard", "coreference-hard", "foil-it")


def load(root: str | Path, image_roots: dict | None = None, valid_only: bool = True) -> list[Case]:
    root = Path(root)
    roots: dict[str, str] = {}
    for k, v in (image_roots or {}).items():
        if roots.setdefault(normalise_dataset(k), v) != v:
            raise InputFileError(f"valse image roots: {k!r} names the same dataset as another key with another "
                             f"directory ({roots[normalise_dataset(k)]} vs {v})")
    cases = []
    found = False
    for piece in PIECES:
        path = root / "data" / f"{piece}.json"
        if not path.exists():
            continue
        found = True
        for key, r in json.loads(path.read_text()).items():
            for f in ("caption", "foil", "image_file", "dataset"):
                if f not in r:
                    raise InputFileError(f"{path}: record {key!r}: missing field {f!r}")
            if valid_only and r.get("mturk", {}).get("caption", 0) < 2:
                continue
            name = normalise_dataset(r["dataset"])
            base = Path(roots[name]) if name in roots else root / "images" / r["dataset"]
            cases.append(Case(str(base / r["image_file"]), [r["foil"], r["caption"]], 1, piece, meta={"id": key}))
    if not found:
        raise FileNotFoundError(f"{root / 'data'}: no VALSE piece found")
    return cases


GROUP_FILES = {"avg": PIECES, "action_relation": ("actant-swap", "action-replacement"),
               "spatial_relation": ("relations",), "relation": ("actant-swap", "action-replacement", "relations"),
               "counting": ("counting-hard", "counting-small-quant", "counting-adversarial")}


def groups(results: dict) -> dict:
    acc = {s: r.accuracy for s, r in results.items()}
    out = {"avg": mean(acc.values())}
    out["action_relation"] = mean([acc.get("actant-swap"), acc.get("action-replacement")])
    out["spatial_relation"] = acc.get("relations")
    out["relation"] = mean([out["action_relation"], out["spatial_relation"]])
    out["counting"] = mean([acc.get(p) for p in ("counting-hard", "counting-small-quant", "counting-adversarial")])
    return out
