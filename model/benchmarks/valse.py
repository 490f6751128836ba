"""VALSE (Parcalabescu et al., ACL 2022): ``data/<piece>.json``, dicts of records with ``caption``, ``foil``,
``image_file``, ``dataset`` and ``mturk``. Valid samples: ``mturk.caption >= 2`` (the README's filter, on by
default). Images through an image-root map per ``dataset``, names compared normalised (``coco2017`` =
``coco_2017``: ``protocols.normalise_dataset``); default ``<root>/images/<dataset>/<image_file>``.
acc_r: sim(caption) > sim(foil) strictly. Avg = mean over the 11 pieces.

MACCO's re-packed layout (its ``datasets/VALSE/probing_data/<piece>.json``: lists of ``{image_path, pos_caption,
neg_caption}``, already filtered, no ``dataset`` field) is read too: each piece's images under the folder MACCO's
scripts join them to (``MACCO_PIECE_SOURCES``: SWiG in VL-CheckList's image folder, the VALSE folder itself, COCO,
SugarCrepe's COCO val2017), by default beside the VALSE root as in MACCO's ``datasets/`` (``macco_image_root``), or
given per source name through the same image-root map (``swig``, ``valse``, ``coco``, ``coco2017``)."""
from __future__ import annotations

from pathlib import Path

from data_schemas import InputFileError, load_json

from .records import record
from .protocols import normalise_dataset
from .scoring import Case, mean

PIECES = ("existence", "plurals", "counting-hard", "counting-small-quant", "counting-adversarial", "relations",
          "action-replacement", "actant-swap", "coreference-standard", "coreference-hard", "foil-it")


# MACCO's probing_data: the image folder of each piece (its scripts' joins), by source name
MACCO_PIECE_SOURCES = {"actant-swap": "swig", "action-replacement": "swig", "coreference-hard": "valse",
                       "counting-adversarial": "valse", "counting-hard": "valse", "counting-small-quant": "valse",
                       "existence": "valse", "coreference-standard": "coco", "foil-it": "coco",
                       "plurals": "coco2017", "relations": "coco2017"}


def layout_of(root: Path) -> str:
    return "macco" if (Path(root) / "probing_data").is_dir() and not (Path(root) / "data").is_dir() else "original"


def macco_image_root(root: Path, source: str) -> Path:
    """Where MACCO's datasets/ layout keeps a source's images, relative to ``datasets/VALSE``."""
    return {"swig": root.parent / "VL_checklist" / "VL_checklist_datasets", "valse": root,
            "coco": root.parent / "coco", "coco2017": root.parent / "sugar-crepe"}[source]


def _load_macco(root: Path, roots: dict[str, str]) -> list[Case]:
    cases = []
    for piece in PIECES:
        path = root / "probing_data" / f"{piece}.json"
        if not path.exists():
            continue
        records = load_json(path)
        if not isinstance(records, list):
            raise InputFileError(f"{path}: a list of {{image_path, pos_caption, neg_caption}} expected (MACCO's "
                                 "probing_data layout)")
        source = MACCO_PIECE_SOURCES[piece]
        base = Path(roots[source]) if source in roots else macco_image_root(root, source)
        for i, rec in enumerate(records):
            r = record(rec, path, f"record {i}", text=("image_path", "pos_caption", "neg_caption"))
            cases.append(Case(str(base / r["image_path"]), [r["neg_caption"], r["pos_caption"]], 1, piece,
                              meta={"id": i}))
    if not cases:
        raise FileNotFoundError(f"{root / 'probing_data'}: no VALSE piece found")
    return cases


def image_root_map(image_roots: dict | None) -> dict[str, str]:
    """The image-root map keyed by normalised dataset name; two spellings of one dataset with two folders: an error."""
    roots: dict[str, str] = {}
    for k, v in (image_roots or {}).items():
        if roots.setdefault(normalise_dataset(k), v) != v:
            raise InputFileError(f"valse image roots: {k!r} names the same dataset as another key with another "
                                 f"directory ({roots[normalise_dataset(k)]} vs {v})")
    return roots


def load(root: str | Path, image_roots: dict | None = None, valid_only: bool = True) -> list[Case]:
    root = Path(root)
    roots = image_root_map(image_roots)
    if layout_of(root) == "macco":
        return _load_macco(root, roots)
    cases = []
    found = False
    for piece in PIECES:
        path = root / "data" / f"{piece}.json"
        if not path.exists():
            continue
        found = True
        data = load_json(path)
        if not isinstance(data, dict):
            raise InputFileError(f"{path}: a dict of id -> record expected, got {type(data).__name__}")
        for key, rec in data.items():
            r = rec | record(rec, path, f"record {key!r}", text=("caption", "foil", "image_file", "dataset"))
            votes = r.get("mturk", {}).get("caption", 0) if isinstance(r.get("mturk", {}), dict) else None
            if isinstance(votes, bool) or not isinstance(votes, (int, float)):
                raise InputFileError(f"{path}: record {key!r}: mturk.caption is {str(votes)[:40]!r}, not a count")
            if valid_only and votes < 2:
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
