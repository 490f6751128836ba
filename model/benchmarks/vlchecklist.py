"""VL-CheckList (Zhao et al., 2022), in two layouts:

* ``original``: ``<root>/data/`` JSONs of ``[image_path, {"POS": [...], "NEG": [...]}]`` and the ``corpus/`` YAMLs
  (``ANNO_PATH``, ``IMG_ROOT``) as released by om-ai-lab/VL-CheckList;
* ``macco``: MACCO's re-packed bundle, ``<root>/VL_checklist_json_data/{Relation,Attribute,Object}/...`` with
  records ``{image_path, POS, NEG}`` (single strings) and images under ``<root>/VL_checklist_datasets/<source>/``.

Modes: ``authors`` (the toolkit's itc rule: records whose image is missing are dropped first, then the first
``max_num // 2`` of each file are scored, POS[0] vs NEG[0], strict); ``all`` (every record, every POS x NEG pair);
``macco`` (MACCO's ``eval/evaluate_vl_checklist.py``: every record, POS[0] vs NEG[0]). Aggregation: ``authors`` and
``all`` average per-file accuracies within each source, then across sources (radar.py with corpus.json);
``macco`` averages each leaf over all its files (an Object leaf over every file in its folder). Object =
mean(Location, Size), Attribute = mean of the 5 types, Relation = mean(action, spatial).
"""
from __future__ import annotations

from pathlib import Path

from data_schemas import InputFileError, load_json

from .records import texts
from .scoring import Case, mean

ATTR_TYPES = ("action", "color", "material", "size", "state")
LOCATIONS, SIZES = ("center", "mid", "margin"), ("large", "medium", "small")
MODES = ("authors", "all", "macco")
MACCO_DATA, MACCO_IMAGES = "VL_checklist_json_data", "VL_checklist_datasets"
SWIG_ROLES = ("agent", "destination", "item", "tool")


def layout_of(root: Path) -> str:
    if (root / MACCO_DATA).is_dir():
        return "macco"
    if (root / "data").is_dir():
        return "original"
    raise FileNotFoundError(f"{root}: neither data/ (VL-CheckList release) nor {MACCO_DATA}/ (MACCO bundle) found")


def leaf_of(rel: Path, layout: str = "original") -> tuple[str, str] | None:
    """(leaf, source) of a data file path relative to the layout's data directory."""
    parts = rel.with_suffix("").parts
    if layout == "macco":
        if parts[0] == "Relation" and len(parts) == 2:
            if parts[1] == "vg_spatial":
                return "R-spatial", "vg"
            if parts[1].endswith("_action"):
                return "R-action", parts[1].split("_")[0]
        if parts[0] == "Attribute" and len(parts) == 3 and parts[2] in ATTR_TYPES:
            return f"A-{parts[2]}", parts[1]
        if parts[0] == "Object" and len(parts) == 4 and (
                parts[1] == "Location" and parts[2] in LOCATIONS or parts[1] == "Size" and parts[2] in SIZES):
            return f"O-{parts[2]}", parts[3].split("_")[0]
        return None
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


def expected_files(layout: str, data: Path) -> dict[str, list[str]]:
    """{group: data files (relative, no suffix) it averages}: the release's corpus.json file lists, or the files
    MACCO's script names (Relation, Attribute; an Object leaf = its folder, which must hold a file)."""
    attr = [f"Attribute/{s}/{t}" for t in ATTR_TYPES for s in ("vaw", "vg")]
    if layout == "macco":
        rel = ["Relation/hake_action", "Relation/swig_action", "Relation/vg_action", "Relation/vg_spatial"]
        obj = []
        for kind, values in (("Location", LOCATIONS), ("Size", SIZES)):
            for v in values:
                files = sorted(p.relative_to(data).with_suffix("").as_posix()
                               for p in (data / "Object" / kind / v).glob("*.json"))
                obj += files or [f"Object/{kind}/{v}/ (no file)"]
        return {"attribute": attr, "relation": rel, "object": obj}
    rel = ["Relation/hake_action", "Relation/swig_action", "Relation/vg/action", "Relation/vg/spatial"]
    obj = []
    for kind, values in (("Location", LOCATIONS), ("Size", SIZES)):
        k = kind.lower()
        for v in values:
            obj.append(f"Object/{kind}/hake_{k}/hake_obj_{v}")
            obj += [f"Object/{kind}/swig_{k}/swig_{r}/swig_{r}_{v}" for r in SWIG_ROLES]
            obj += [f"Object/{kind}/vg_{k}/vg_{s}_{v}" for s in ("obj", "subj")]
    return {"attribute": attr, "relation": rel, "object": obj}


def image_roots(root: Path) -> dict[str, Path]:
    """ANNO_PATH -> IMG_ROOT from the corpus YAMLs (paths resolved against ``root``)."""
    import yaml

    out = {}
    for y in sorted((root / "corpus").rglob("*.yaml")):
        cfg = yaml.safe_load(y.read_text()) or {}
        if "ANNO_PATH" in cfg and "IMG_ROOT" in cfg:
            out[str((root / cfg["ANNO_PATH"]).resolve())] = root / cfg["IMG_ROOT"]
    return out


def _image_dir(root: Path, layout: str, f: Path, rel: Path, source: str, roots: dict) -> Path:
    if layout == "macco":  # evaluate_vl_checklist.py:152 (Relation), :203 (Attribute: always vg), :254 (Object)
        return root / MACCO_IMAGES / ("vg" if rel.parts[0] == "Attribute" else f.stem.split("_")[0])
    return roots.get(str(f.resolve()), root / "images" / source)


def _record(r, f: Path, i: int) -> tuple[str, list[str], list[str]]:
    if isinstance(r, list) and len(r) == 2 and isinstance(r[1], dict) and {"POS", "NEG"} <= set(r[1]):
        pos, neg = r[1]["POS"], r[1]["NEG"]
        pos, neg = ([pos] if isinstance(pos, str) else list(pos)), ([neg] if isinstance(neg, str) else list(neg))
        path = r[0]
    elif isinstance(r, dict) and {"image_path", "POS", "NEG"} <= set(r):
        path, pos, neg = r["image_path"], [r["POS"]], [r["NEG"]]
    else:
        raise InputFileError(f"{f}: record {i}: expected [path, {{POS, NEG}}] or {{image_path, POS, NEG}}")
    if not pos or not neg:
        raise InputFileError(f"{f}: record {i}: empty POS or NEG")
    texts([path], f, f"record {i}: image path")
    return path, texts(pos, f, f"record {i}: POS"), texts(neg, f, f"record {i}: NEG")


def load(root: str | Path, mode: str = "authors", max_num: int = 2000) -> list[Case]:
    if mode not in MODES:
        raise ValueError(f"VL-CheckList mode {mode!r} not in {MODES}")
    root = Path(root)
    layout = layout_of(root)
    data = root / (MACCO_DATA if layout == "macco" else "data")
    roots = image_roots(root) if layout == "original" else {}
    cap = max_num // 2 if mode == "authors" and max_num else None
    cases = []
    for f in sorted(data.rglob("*.json")):
        rel = f.relative_to(data)
        leaf = leaf_of(rel, layout)
        if leaf is None:
            raise InputFileError(f"{f}: not a VL-CheckList {layout}-layout file (unknown category path {rel.as_posix()})")
        records = load_json(f)
        img_root = _image_dir(root, layout, f, rel, leaf[1], roots)
        subset, kept = rel.with_suffix("").as_posix(), 0
        for i, r in enumerate(records):
            path, pos, neg = _record(r, f, i)
            image = img_root / path
            present = image.is_file()
            if cap is not None and present:
                if kept >= cap:
                    continue  # evaluate.py:98-99 caps after data_loader.py:50 dropped the missing images
                kept += 1
            pairs = [(p, n) for p in pos for n in neg] if mode == "all" else [(pos[0], neg[0])]
            for p, n in pairs:  # a missing image stays a case: counted in missing_images, never in n
                cases.append(Case(str(image), [n, p], 1, subset, group=leaf[0],
                                  meta={"source": leaf[1], "layout": layout}))
    if not cases:
        raise FileNotFoundError(f"{data}: no VL-CheckList record found")
    return cases


def expected_for(root: str | Path) -> dict[str, list[str]]:
    """The group -> expected files map of the layout found under ``root``."""
    root = Path(root)
    layout = layout_of(root)
    return expected_files(layout, root / (MACCO_DATA if layout == "macco" else "data"))


def groups(cases, results: dict, mode: str = "authors") -> dict:
    """The leaf and category means; ``mode`` ``macco`` follows evaluate_vl_checklist.py, the others radar.py."""
    files: dict[str, dict[str, list[float]]] = {}
    seen = set()
    for c in cases:
        if c.subset in seen:
            continue
        seen.add(c.subset)
        acc = results[c.subset].accuracy
        if acc is not None:
            files.setdefault(c.group, {}).setdefault(c.meta["source"], []).append(acc)
    if mode == "macco":  # :59-70 type means; :92 Object leaf = round(mean over its folder's files, 4); :38-40
        leaf = {k: mean(a for v in src.values() for a in v) for k, src in files.items()}
        leaf = {k: (round(v, 4) if k.startswith("O-") and v is not None else v) for k, v in leaf.items()}
    else:  # radar.py: per source, then across sources
        leaf = {k: mean(mean(v) for v in src.values()) for k, src in files.items()}
    loc = mean(leaf.get(f"O-{x}") for x in LOCATIONS)
    size = mean(leaf.get(f"O-{x}") for x in SIZES)
    return {"object": mean([loc, size]), "attribute": mean(leaf.get(f"A-{t}") for t in ATTR_TYPES),
            "relation": mean([leaf.get("R-action"), leaf.get("R-spatial")]), "leaves": leaf}
