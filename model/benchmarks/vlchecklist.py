"""VL-CheckList (Zhao et al., 2022): ``data/`` JSONs of ``[image_path, {"POS": [...], "NEG": [...]}]`` and the
``corpus/`` YAMLs (``ANNO_PATH``, ``IMG_ROOT``) as released; also MACCO's re-formatted records
``{image_path, POS, NEG}``.

Modes: ``authors`` (the toolkit's itc rule: POS[0] vs NEG[0] on the first ``max_num // 2`` records of each file,
strict) and ``all`` (every record, every POS x NEG pair). Leaves (O-Large ... R-spatial) average per-file
accuracies within each source, then across sources (radar.py); Object = mean(Location, Size), Attribute = mean of
the 5 types, Relation = mean(action, spatial).
"""
from __future__ import annotations

import json
from pathlib import Path

from .scoring import Case, mean

ATTR_TYPES = ("action", "color", "material", "size", "state")
LOCATIONS, SIZES = ("center", "mid", "margin"), ("large", "medium", "small")


def leaf_of(rel: Path) -> tuple[str, str] | None:
    """(leaf, source) of a data file path relative to ``data/``."""
    parts = rel.with_suffix("").parts
    if parts[0] == "Attribute" and len(parts) == 3 and parts[2] in ATTR_TYPES:
        return f"A-{parts[2]}", parts[1]
    if parts[0] == "Relation":
        if len(parts) == 2 and parts[1].endswith("_action"):
            return "R-action", parts[1].split("_")[0]
        if len(parts) == 3 and parts[2] in ("action", "spatial"):
            return f"R-{parts[2]}", parts[1]
    if parts[0] == "Object" and len(parts) >= 3:
        last = parts[-1].split("_")[-1]
        source = parts[2].split("_")[0]
        if parts[1] == "Location" and last in LOCATIONS or parts[1] == "Size" and last in SIZES:
            return f"O-{last}", source
    return None


def image_roots(root: Path) -> dict[str, Path]:
    """ANNO_PATH -> IMG_ROOT from the corpus YAMLs (paths resolved against ``root``)."""
    import yaml

    out = {}
    for y in sorted((root / "corpus").rglob("*.yaml")):
        cfg = yaml.safe_load(y.read_text()) or {}
        if "ANNO_PATH" in cfg and "IMG_ROOT" in cfg:
            out[str((root / cfg["ANNO_PATH"]).resolve())] = root / cfg["IMG_ROOT"]
    return out


def load(root: str | Path, mode: str = "authors", max_num: int = 2000) -> list[Case]:
    if mode not in ("authors", "all"):
        raise ValueError(f"VL-CheckList mode {mode!r} not in ('authors', 'all')")
    root = Path(root)
    data = root / "data"
    if not data.is_dir():
        raise FileNotFoundError(f"{data}: directory not found")
    roots = image_roots(root)
    cases = []
    for f in sorted(data.rglob("*.json")):
        rel = f.relative_to(data)
        leaf = leaf_of(rel)
        if leaf is None:
            continue
        records = json.loads(f.read_text())
        if mode == "authors":
            records = records[: max_num // 2]
        img_root = roots.get(str(f.resolve()), root / "images" / leaf[1])
        for i, r in enumerate(records):
            if isinstance(r, list):
                path, d = r[0], r[1]
                pos, neg = list(d["POS"]), list(d["NEG"])
            elif isinstance(r, dict) and {"image_path", "POS", "NEG"} <= set(r):
                path, pos, neg = r["image_path"], [r["POS"]], [r["NEG"]]
            else:
                raise ValueError(f"{f}: record {i}: expected [path, {{POS, NEG}}] or {{image_path, POS, NEG}}")
            pairs = [(pos[0], neg[0])] if mode == "authors" else [(p, n) for p in pos for n in neg]
            for p, n in pairs:
                cases.append(Case(str(img_root / path), [n, p], 1, str(rel.with_suffix("")), group=leaf[0],
                                  meta={"source": leaf[1]}))
    if not cases:
        raise FileNotFoundError(f"{data}: no VL-CheckList annotation file found")
    return cases


def groups(cases, results: dict) -> dict:
    by_leaf: dict[str, dict[str, list[float]]] = {}
    seen = set()
    for c in cases:
        if c.subset in seen:
            continue
        seen.add(c.subset)
        acc = results[c.subset].accuracy
        if acc is not None:
            by_leaf.setdefault(c.group, {}).setdefault(c.meta["source"], []).append(acc)
    leaf = {k: mean(mean(v) for v in src.values()) for k, src in by_leaf.items()}
    loc = mean(leaf.get(f"O-{x}") for x in LOCATIONS)
    size = mean(leaf.get(f"O-{x}") for x in SIZES)
    return {"object": mean([loc, size]), "attribute": mean(leaf.get(f"A-{t}") for t in ATTR_TYPES),
            "relation": mean([leaf.get("R-action"), leaf.get("R-spatial")]), "leaves": leaf}
