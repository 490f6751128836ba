"""SugarCrepe (Hsieh et al., NeurIPS 2023): seven JSONs ``{id: {filename, caption, negative_caption}}`` and
``val2017/``. Values are taken in order (keys are not contiguous: swap_obj has no "108"). Correct iff
sim(caption) > sim(negative) strictly (options [negative, caption], truth at 1)."""
from __future__ import annotations

from pathlib import Path

from data_schemas import InputFileError, load_json

from .records import record
from .scoring import Case, mean

SUBSETS = ("add_att", "replace_att", "swap_att", "replace_rel", "add_obj", "replace_obj", "swap_obj")
GROUPS = {"attribute": ("add_att", "replace_att", "swap_att"), "relation": ("replace_rel",),
          "object": ("add_obj", "replace_obj", "swap_obj")}
GROUP_FILES = {**GROUPS, "micro_overall": SUBSETS}


def load(root: str | Path, image_dir: str = "val2017", subsets=SUBSETS, allow_missing: bool = False) -> list[Case]:
    """Cases of ``subsets``; a missing subset file is an error unless ``allow_missing`` (then the group check
    reports it: ``protocols.check_complete``)."""
    root = Path(root)
    cases = []
    for s in subsets:
        path = root / f"{s}.json"
        if not path.exists():
            if allow_missing:
                continue
            raise FileNotFoundError(f"{path}: file not found")
        data = load_json(path)
        if not isinstance(data, dict):
            raise InputFileError(f"{path}: expected a dict of id -> record")
        for key, rec in data.items():
            r = record(rec, path, f"record {key!r}", text=("filename", "caption", "negative_caption"))
            cases.append(Case(str(root / image_dir / r["filename"]), [r["negative_caption"], r["caption"]], 1, s,
                              meta={"id": key}))
    if not cases:
        raise FileNotFoundError(f"{root}: no SugarCrepe file found ({', '.join(subsets)}.json)")
    return cases


def groups(results: dict) -> dict:
    acc = {s: r.accuracy for s, r in results.items()}
    out = {g: mean(acc.get(s) for s in subs) for g, subs in GROUPS.items()}
    n = sum(r.n for r in results.values())
    out["micro_overall"] = sum(r.correct for r in results.values()) / n if n else None
    return out
