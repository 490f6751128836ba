"""The benchmark registry: one :class:`Benchmark` record per benchmark name, the one place that says how a name is
run. The harness (``run_benchmark``, ``case_groups``), the flow (the evaluate stage's code roots) and the CLI
(``macco eval --benchmark``) all read it.

Two kinds of record:

- **case benchmarks** (ARO, Order, SugarCrepe, VL-CheckList, VALSE, What's Up) give ``load`` (root -> ``Case``s),
  ``expected`` (group -> the files it averages: the completeness rule of ``protocols.check_complete``),
  ``settings`` (what the run records besides the common settings), ``groups`` (the report groups from the
  scored cases) and ``report_groups`` (which report groups pool one case: the paired tests' strings);
- **direct benchmarks** (Winoground, zero-shot, the general-ability and text-tower evaluations) give ``run``,
  which returns the whole entry (``subsets``, ``groups``, ``settings``).

Every callable takes the benchmark's code module first (``model.benchmarks.<module>``, imported on use), so this
module imports no torch: the CLI reads the names for ``--help``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .protocols import order_image_root

@dataclass(frozen=True)
class Benchmark:
    name: str
    module: str  # the code module under model/benchmarks/ holding its rule (files, what counts as correct)
    help: str = ""  # what --root is, for the CLI help
    # case benchmarks
    load: Callable | None = None  # (mod, root, cfg) -> list[Case]
    expected: Callable | None = None  # (mod, root) -> {group: [files it averages]}; None: no completeness rule
    settings: Callable | None = None  # (mod, root, cfg) -> extra settings (after the common ones)
    groups: Callable | None = None  # (mod, cases, scores, results, cfg) -> (groups, extra entry keys)
    report_groups: Callable | None = None  # (mod, case, cfg, excluded, group_counts) -> [report groups]
    report_context: Callable | None = None  # (mod, cases, scores, cfg) -> extra kwargs of report_groups
    # direct benchmarks
    run: Callable | None = None  # (mod, enc, root, cfg, settings) -> {"subsets", "groups", "settings", ...}

    def code(self):
        """The benchmark's code module."""
        return importlib.import_module(f"{__package__}.{self.module}")


# ---- the case benchmarks ----------------------------------------------------------------------------------
def _group_files(mod, root: Path) -> dict[str, list[str]]:
    """The module's fixed ``GROUP_FILES``: group -> the files it averages."""
    return {g: list(v) for g, v in mod.GROUP_FILES.items()}


def _vgr_groups(mod, cases, scores, res, cfg) -> tuple[dict, dict]:
    g = mod.vgr_groups(cases, scores, cfg.aro_exclusion)
    g.pop("per_relation")
    return g, {}


def _vga_counts(mod, cases, scores, cfg) -> dict:
    """Cases with an image per VG-A group: VG-A keeps groups of at least ``vga_min_count``."""
    from .scoring import group_accuracy

    return {"group_counts": {g: n for g, (_, n) in group_accuracy(cases, scores).items()}}


def _order(name: str, help: str) -> Benchmark:
    def image_root(root: Path, cfg) -> Path:
        return order_image_root(name, root, cfg.protocol, cfg.order_image_roots)

    return Benchmark(
        name, "aro", help,
        load=lambda mod, root, cfg: mod.load_order(root / cfg.order_files[name], image_root(root, cfg), name,
                                                   cfg.seed, cfg.spacy_model),
        settings=lambda mod, root, cfg: {"seed": cfg.seed, "image_root": str(image_root(root, cfg))},
        groups=lambda mod, cases, scores, res, cfg: ({"precision_at_1": res[name].accuracy}, {}),
        report_groups=lambda mod, case, cfg, excluded, counts: ["precision_at_1"])


_VLC_GROUPS = {"A": "attribute", "R": "relation", "O": "object"}


def _vlc_report_groups(mod, case, cfg, excluded, counts) -> list[str]:
    return [_VLC_GROUPS[case.group[0]]] if case.group[:2] in ("A-", "R-", "O-") else []


def _whatsup_groups(mod, cases, scores, res, cfg) -> tuple[dict, dict]:
    g = mod.groups(res)
    details = mod.details(cases, scores)
    for s in mod.CONTROLLED:
        for k in ("pair_accuracy", "set_accuracy"):
            if details.get(s, {}).get(k) is not None:
                g[f"{s}_{k.split('_')[0]}"] = details[s][k]
    return g, {"details": details}


# ---- the direct benchmarks --------------------------------------------------------------------------------
def _general_benchmark(name: str, module: str, help: str) -> Benchmark:
    """A general-ability or text-tower evaluation: its module's ``evaluate(enc, root, name)``."""
    def run(mod, enc, root: Path, cfg, settings: dict) -> dict:
        r = mod.evaluate(enc, root, name)
        return {"subsets": r["subsets"], "groups": r["groups"], "settings": settings | r["settings"]}

    return Benchmark(name, module, help, run=run)


def _zeroshot(mod, enc, root: Path, cfg, settings: dict) -> dict:
    r = mod.evaluate(enc, root)
    return {"subsets": {"zeroshot": r}, "groups": {"top1": r["top1"]}, "settings": settings}


def _valse_settings(mod, root: Path, cfg) -> dict:
    """MACCO's probing_data is filtered already: the valid-only filter applies to the original layout only."""
    layout = mod.layout_of(root)
    return {"valid_only": "pre-filtered (probing_data)" if layout == "macco" else cfg.valse_valid_only,
            "layout": layout, "image_roots": dict(cfg.valse_image_roots)}


def _winoground(mod, enc, root: Path, cfg, settings: dict) -> dict:
    """Full set, and with ``winoground_clean_ids`` the clean subset (``clean_text`` / ``clean_image`` / ...)."""
    from data_schemas.provenance import file_sha256

    from .scoring import check_missing

    examples = mod.load(root)
    check_missing("winoground", mod.missing_files(root, examples), len(examples),
                  cfg.allow_missing)  # before the encoding
    r = mod.evaluate(enc, root, examples)
    r.pop("missing_ids")
    subsets, g = {"winoground": r}, {k: r[k] for k in ("text", "image", "group")}
    if cfg.winoground_clean_ids:
        ids = mod.load_clean_ids(cfg.winoground_clean_ids)
        rc = mod.evaluate(enc, root, mod.clean_subset(examples, ids, cfg.winoground_clean_ids))
        rc.pop("missing_ids")
        subsets["winoground_clean"] = rc
        g.update({f"clean_{k}": rc[k] for k in ("text", "image", "group")})
        settings.update(clean_ids_file=str(cfg.winoground_clean_ids), clean_ids_n=len(ids),
                        clean_ids_sha256=file_sha256(cfg.winoground_clean_ids))
    return {"subsets": subsets, "groups": g, "settings": settings}


_RECORDS = (
    Benchmark("aro-vgr", "aro", "visual_genome_relation.json + images/",
              load=lambda mod, root, cfg: mod.load_vg(root, "relation"),
              settings=lambda mod, root, cfg: {"exclusion_list": cfg.aro_exclusion},
              groups=_vgr_groups,
              report_groups=lambda mod, case, cfg, excluded, counts: [] if case.group in excluded else ["macro"],
              report_context=lambda mod, cases, scores, cfg: {"excluded": mod.excluded_relations(cfg.aro_exclusion)}),
    Benchmark("aro-vga", "aro", "visual_genome_attribution.json + images/",
              load=lambda mod, root, cfg: mod.load_vg(root, "attribution"),
              groups=lambda mod, cases, scores, res, cfg: (mod.vga_groups(cases, scores, cfg.vga_min_count), {}),
              report_groups=lambda mod, case, cfg, excluded, counts: (
                  ["macro"] if (counts or {}).get(case.group, 0) >= cfg.vga_min_count else []),
              report_context=_vga_counts),
    _order("coco-order", "coco_karpathy_test.json"),
    _order("flickr-order", "flickr30k_test.json"),
    Benchmark("sugarcrepe", "sugarcrepe", "the seven subset JSONs + val2017/",
              load=lambda mod, root, cfg: mod.load(root, allow_missing=True),  # a missing file: the group check
              expected=_group_files,
              groups=lambda mod, cases, scores, res, cfg: (mod.groups(res), {}),
              report_groups=lambda mod, case, cfg, excluded, counts: [
                  g for g, subs in mod.GROUPS.items() if case.subset in subs]),
    Benchmark("vl-checklist", "vlchecklist", "data/ + corpus/ + images, or MACCO's re-packed layout",
              load=lambda mod, root, cfg: mod.load(root, cfg.vlc_mode, cfg.vlc_max_num),
              expected=lambda mod, root: mod.expected_for(root),
              settings=lambda mod, root, cfg: {"mode": cfg.vlc_mode,
                                               "max_num": cfg.vlc_max_num if cfg.vlc_mode == "authors" else None,
                                               "layout": mod.layout_of(root)},
              groups=lambda mod, cases, scores, res, cfg: (mod.groups(cases, res, cfg.vlc_mode), {}),
              report_groups=_vlc_report_groups),
    Benchmark("valse", "valse", "data/<piece>.json + images/<dataset>/, or MACCO's probing_data/<piece>.json",
              load=lambda mod, root, cfg: mod.load(root, cfg.valse_image_roots, cfg.valse_valid_only),
              expected=_group_files,
              settings=_valse_settings,
              groups=lambda mod, cases, scores, res, cfg: (mod.groups(res), {}),
              report_groups=lambda mod, case, cfg, excluded, counts: ["avg"]),
    Benchmark("whatsup", "whatsup", "the Controlled / QA JSONs + images",
              load=lambda mod, root, cfg: mod.load(root),
              expected=_group_files,
              groups=_whatsup_groups,
              report_groups=lambda mod, case, cfg, excluded, counts: (
                  ["whatsup_macro"] if case.subset in mod.CONTROLLED else [])),
    Benchmark("winoground", "winoground", "examples.jsonl + images/", run=_winoground),
    Benchmark("zeroshot", "zeroshot", "ImageFolder", run=_zeroshot),
    _general_benchmark("linear-probe", "linear_probe", "ImageFolder train/test"),
    _general_benchmark("retrieval-coco", "retrieval", "Karpathy test split"),
    _general_benchmark("retrieval-flickr", "retrieval", "Karpathy test split"),
    _general_benchmark("sts", "sts", "SICK-R, STS-B"),
    _general_benchmark("senteval-probing", "senteval", "SentEval's data/probing/*.txt"),
)
REGISTRY: dict[str, Benchmark] = {b.name: b for b in _RECORDS}
BENCHMARKS = tuple(REGISTRY)  # the names, in the order ``all`` runs them


def get(name: str) -> Benchmark:
    """The record of ``name``; ``ValueError`` naming the choices for an unknown one."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose from {BENCHMARKS}") from None


def code_roots(names: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The evaluate stage's code roots: the harness (``model.benchmarks``: its import closure holds the scoring,
    the protocols, the encoders) and each benchmark's rule module (loaded by name, so in no import closure) of
    ``names`` (None: every registered one)."""
    chosen = [b for b in _RECORDS if names is None or b.name in names]
    return (__package__, "model.benchmarks.scoring", *dict.fromkeys(f"{__package__}.{b.module}" for b in chosen))


def cli_help() -> str:
    """``macco eval --benchmark``'s help: every name, with what its --root is."""
    return " ".join(f"{b.name} ({b.help})" if b.help else b.name for b in _RECORDS) + " all"
