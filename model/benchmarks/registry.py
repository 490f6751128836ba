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

Every record may give ``check``: the run's refusals of its inputs that need no model (annotation files, image
folders, the group completeness rule, a named ids file), which ``evaluate`` runs for every requested benchmark
before the model loads (``input_problems``): a wrong path fails in seconds, not after hours of earlier
benchmarks. A check refuses nothing the run would accept; without one, the root must exist.

Every callable takes the benchmark's code module first (``model.benchmarks.<module>``, imported on use), so this
module imports no torch: the CLI reads the names for ``--help``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from data_schemas import InputFileError

from .protocols import check_complete, order_image_root

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
    # both: the input refusals that need no model, run before it loads (``input_problems``)
    check: Callable | None = None  # (mod, root, cfg) -> [exceptions the run would raise]; it may raise one
    # its rows of the report's table: (group key, label, chance accuracy), in the paper's order (``REPORT_ROWS``)
    rows: tuple[tuple[str, str, float], ...] = ()
    # its set in the synthetic world: the folder under ``<world>/benchmarks/`` that the writer of that name in
    # ``pipeline.world_benchmarks`` fills (``world_sets``); None: the world has no set for it
    world: str | None = None

    def code(self):
        """The benchmark's code module."""
        return importlib.import_module(f"{__package__}.{self.module}")


# ---- the input checks (before the model loads) -----------------------------------------------------------
def _file(path: Path, what: str = "file") -> list[Exception]:
    return [] if path.is_file() else [FileNotFoundError(f"{path}: {what} not found")]


def _image_folder(name: str, path: Path, cfg) -> list[Exception]:
    """The folder a benchmark's images are joined under: absent, every image is missing, which the run refuses
    unless ``allow_missing``."""
    if cfg.allow_missing or path.is_dir():
        return []
    from .scoring import MissingImages

    return [MissingImages(f"{name}: image folder {path} not found (every case's image is read below it): fix the "
                          "root, or pass --allow-missing")]


def _attempt(problems: list[Exception], fn: Callable, *args):
    """``fn(*args)``, or None with the input error it raised added to ``problems``."""
    try:
        return fn(*args)
    except (InputFileError, OSError) as exc:
        problems.append(exc)
        return None


def _complete(name: str, expected: dict, present, cfg) -> list[Exception]:
    """The group completeness rule (``protocols.check_complete``) over the files found on disk."""
    out: list[Exception] = []
    _attempt(out, check_complete, name, expected, present, cfg.allow_partial)
    return out


def _present_files(root: Path, files: dict[str, Path], what: str) -> tuple[set[str], list[Exception]]:
    """(subsets whose file is present, [an error when none is]) of ``files`` (subset -> path)."""
    present = {s for s, f in files.items() if f.is_file()}
    names = ", ".join(sorted({f.name for f in files.values()}))
    return present, [] if present else [FileNotFoundError(f"{root}: no {what} file found ({names})")]


def input_problems(name: str, root: str | Path, cfg) -> list[Exception]:
    """What ``name``'s run would refuse in its inputs at ``root``, found without the model: the root missing, or
    its record's ``check`` (an error it raises counts as one problem)."""
    b = get(name)
    root = Path(root)
    if not root.exists():
        return [FileNotFoundError(f"{root}: {name} root not found")]
    if b.check is None:
        return []
    raised: list[Exception] = []
    found = _attempt(raised, b.check, b.code(), root, cfg)
    return raised + list(found or [])


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


def _vg_check(kind: str) -> Callable:
    def check(mod, root: Path, cfg) -> list[Exception]:
        return _file(root / f"visual_genome_{kind}.json") + _image_folder(f"aro-vg{kind[0]}", root / "images", cfg)
    return check


def _order(name: str, help: str, label: str, world: str | None = None) -> Benchmark:
    def image_root(root: Path, cfg) -> Path:
        return order_image_root(name, root, cfg.protocol, cfg.order_image_roots)

    def check(mod, root: Path, cfg) -> list[Exception]:
        return _file(root / cfg.order_files[name], f"{name} annotation file (order_files)") + \
            _image_folder(name, image_root(root, cfg), cfg)

    return Benchmark(
        name, "aro", help,
        load=lambda mod, root, cfg: mod.load_order(root / cfg.order_files[name], image_root(root, cfg), name,
                                                   cfg.seed, cfg.spacy_model),
        settings=lambda mod, root, cfg: {"seed": cfg.seed, "image_root": str(image_root(root, cfg))},
        groups=lambda mod, cases, scores, res, cfg: ({"precision_at_1": res[name].accuracy}, {}),
        report_groups=lambda mod, case, cfg, excluded, counts: ["precision_at_1"], check=check,
        rows=(("precision_at_1", label, 0.2),), world=world)  # 1 of 5 orders


def _sugarcrepe_check(mod, root: Path, cfg) -> list[Exception]:
    present, none = _present_files(root, {s: root / f"{s}.json" for s in mod.SUBSETS}, "SugarCrepe")
    if none:
        return none
    return _complete("sugarcrepe", _group_files(mod, root), present, cfg) + \
        _image_folder("sugarcrepe", root / "val2017", cfg)


def _vlc_check(mod, root: Path, cfg) -> list[Exception]:
    """The layout, every data file's category path, the group completeness (images: per the corpus YAMLs)."""
    layout = mod.layout_of(root)
    data = root / (mod.MACCO_DATA if layout == "macco" else "data")
    files = sorted(data.rglob("*.json"))
    if not files:
        return [FileNotFoundError(f"{data}: no VL-CheckList record found")]
    out: list[Exception] = [InputFileError(f"{f}: not a VL-CheckList {layout}-layout file (unknown category path "
                                           f"{f.relative_to(data).as_posix()})")
                            for f in files if mod.leaf_of(f.relative_to(data), layout) is None]
    present = {f.relative_to(data).with_suffix("").as_posix() for f in files}
    return out + _complete("vl-checklist", mod.expected_for(root), present, cfg)


def _valse_check(mod, root: Path, cfg) -> list[Exception]:
    """The image-root map, the pieces found and the group completeness (images: per ``dataset`` field, found as the
    cases are read)."""
    mod.image_root_map(cfg.valse_image_roots)
    folder = root / ("probing_data" if mod.layout_of(root) == "macco" else "data")
    present = {p for p in mod.PIECES if (folder / f"{p}.json").is_file()}
    if not present:
        return [FileNotFoundError(f"{folder}: no VALSE piece found")]
    return _complete("valse", _group_files(mod, root), present, cfg)


def _whatsup_check(mod, root: Path, cfg) -> list[Exception]:
    files = {s: root / f for s, f in mod.CONTROLLED.items()} | {s: root / f for s, (f, _) in mod.QA.items()}
    present, none = _present_files(root, files, "What's Up annotation")
    return none if none else _complete("whatsup", _group_files(mod, root), present, cfg)


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
def _general_benchmark(name: str, module: str, help: str, check: Callable | None = None,
                       kwargs: Callable = lambda cfg: {}) -> Benchmark:
    """A general-ability or text-tower evaluation: its module's ``evaluate(enc, root, name, **kwargs(cfg))``."""
    def run(mod, enc, root: Path, cfg, settings: dict) -> dict:
        r = mod.evaluate(enc, root, name, **kwargs(cfg))
        return {"subsets": r["subsets"], "groups": r["groups"], "settings": settings | r["settings"]}

    return Benchmark(name, module, help, run=run, check=check)


def _zeroshot(mod, enc, root: Path, cfg, settings: dict) -> dict:
    """groups top1, top5 (None under 5 classes) and mean_per_class_recall; the template set in settings."""
    r = mod.evaluate(enc, root, cfg.zeroshot_dataset, cfg.allow_missing)  # a suite's dataset: run_benchmark sets it
    return {"subsets": r["subsets"], "groups": r["groups"], "settings": settings | r["settings"]}


def _winoground_check(mod, root: Path, cfg) -> list[Exception]:
    """examples.jsonl, its images (the run's missing-image rule), the clean-ids file and its ids against it."""
    from .scoring import check_missing

    out: list[Exception] = []
    examples = _attempt(out, mod.load, root)
    ids = _attempt(out, mod.load_clean_ids, cfg.winoground_clean_ids) if cfg.winoground_clean_ids else None
    if examples is not None:
        _attempt(out, check_missing, "winoground", mod.missing_files(root, examples), len(examples),
                 cfg.allow_missing)
        if ids is not None:
            _attempt(out, mod.clean_subset, examples, ids, cfg.winoground_clean_ids)
    return out


def _folder_check(mod, root: Path, cfg) -> list[Exception]:
    """An ImageFolder benchmark: its module's ``check`` (the listing, no image opened) raises what it finds."""
    mod.check(root)
    return []


def _retrieval_check(name: str) -> Callable:
    def check(mod, root: Path, cfg) -> list[Exception]:
        mod._find(root, name)  # the annotation file the run reads; raises naming the candidates
        return []
    return check


def _sts_check(mod, root: Path, cfg) -> list[Exception]:
    return [] if mod.find_splits(root) else [FileNotFoundError(f"{root}: no SICK or STS-B test file found")]


def _senteval_check(mod, root: Path, cfg) -> list[Exception]:
    return [] if any((root / f).is_file() for f in mod.TASKS.values()) else [
        FileNotFoundError(f"{root}: none of the SentEval probing files ({', '.join(mod.TASKS.values())})")]


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
    Benchmark("aro-vgr", "aro", "visual_genome_relation.json + images/", check=_vg_check("relation"),
              load=lambda mod, root, cfg: mod.load_vg(root, "relation"),
              settings=lambda mod, root, cfg: {"exclusion_list": cfg.aro_exclusion},
              groups=_vgr_groups,
              report_groups=lambda mod, case, cfg, excluded, counts: [] if case.group in excluded else ["macro"],
              report_context=lambda mod, cases, scores, cfg: {"excluded": mod.excluded_relations(cfg.aro_exclusion)},
              rows=(("macro", "ARO VG-Relation (macro)", 0.5),), world="aro"),
    Benchmark("aro-vga", "aro", "visual_genome_attribution.json + images/", check=_vg_check("attribution"),
              load=lambda mod, root, cfg: mod.load_vg(root, "attribution"),
              groups=lambda mod, cases, scores, res, cfg: (mod.vga_groups(cases, scores, cfg.vga_min_count), {}),
              report_groups=lambda mod, case, cfg, excluded, counts: (
                  ["macro"] if (counts or {}).get(case.group, 0) >= cfg.vga_min_count else []),
              report_context=_vga_counts, rows=(("macro", "ARO VG-Attribution (macro)", 0.5),), world="aro"),
    _order("coco-order", "coco_karpathy_test.json", "ARO COCO-Order (P@1)", world="aro"),
    _order("flickr-order", "flickr30k_test.json", "ARO Flickr-Order (P@1)"),
    Benchmark("sugarcrepe", "sugarcrepe", "the seven subset JSONs + val2017/", check=_sugarcrepe_check,
              load=lambda mod, root, cfg: mod.load(root, allow_missing=True),  # a missing file: the group check
              expected=_group_files,
              groups=lambda mod, cases, scores, res, cfg: (mod.groups(res), {}),
              report_groups=lambda mod, case, cfg, excluded, counts: [
                  g for g, subs in mod.GROUPS.items() if case.subset in subs],
              rows=tuple((g, f"SugarCrepe {g}", 0.5) for g in ("attribute", "relation", "object")),
              world="sugarcrepe"),
    Benchmark("vl-checklist", "vlchecklist", "data/ + corpus/ + images, or MACCO's re-packed layout",
              load=lambda mod, root, cfg: mod.load(root, cfg.vlc_mode, cfg.vlc_max_num),
              expected=lambda mod, root: mod.expected_for(root),
              settings=lambda mod, root, cfg: {"mode": cfg.vlc_mode,
                                               "max_num": cfg.vlc_max_num if cfg.vlc_mode == "authors" else None,
                                               "layout": mod.layout_of(root)},
              groups=lambda mod, cases, scores, res, cfg: (mod.groups(cases, res, cfg.vlc_mode), {}),
              report_groups=_vlc_report_groups, check=_vlc_check,
              rows=tuple((g, f"VL-CheckList {g}", 0.5) for g in ("attribute", "relation", "object")),
              world="vl-checklist"),
    Benchmark("valse", "valse", "data/<piece>.json + images/<dataset>/, or MACCO's probing_data/<piece>.json",
              load=lambda mod, root, cfg: mod.load(root, cfg.valse_image_roots, cfg.valse_valid_only),
              expected=_group_files,
              settings=_valse_settings,
              groups=lambda mod, cases, scores, res, cfg: (mod.groups(res), {}),
              report_groups=lambda mod, case, cfg, excluded, counts: ["avg"], check=_valse_check,
              rows=(("avg", "VALSE avg", 0.5),), world="valse"),
    Benchmark("whatsup", "whatsup", "the Controlled / QA JSONs + images",
              load=lambda mod, root, cfg: mod.load(root),
              expected=_group_files,
              groups=_whatsup_groups, check=_whatsup_check,
              report_groups=lambda mod, case, cfg, excluded, counts: (
                  ["whatsup_macro"] if case.subset in mod.CONTROLLED else []),
              rows=(("whatsup_macro", "What's Up controlled", 0.25),), world="whatsup"),  # 1 of 4 spatial words
    Benchmark("winoground", "winoground", "examples.jsonl + images/", run=_winoground, check=_winoground_check),
    Benchmark("zeroshot", "zeroshot", "ImageFolder (--zeroshot-dataset: its template set)", run=_zeroshot,
              check=_folder_check),
    _general_benchmark("linear-probe", "linear_probe", "ImageFolder train/test", check=_folder_check,
                       kwargs=lambda cfg: {"allow_missing": cfg.allow_missing}),
    _general_benchmark("retrieval-coco", "retrieval", "Karpathy test split", check=_retrieval_check("retrieval-coco")),
    _general_benchmark("retrieval-flickr", "retrieval", "Karpathy test split",
                       check=_retrieval_check("retrieval-flickr")),
    _general_benchmark("sts", "sts", "SICK-R, STS-B", check=_sts_check),
    _general_benchmark("senteval-probing", "senteval", "SentEval's data/probing/*.txt", check=_senteval_check),
)
REGISTRY: dict[str, Benchmark] = {b.name: b for b in _RECORDS}
BENCHMARKS = tuple(REGISTRY)  # the names, in the order ``all`` runs them
# the report's rows (benchmark, group key, label, chance accuracy) in the registry's order, the paper's; the report
# stage and ``macco report`` hand them to ``pipeline.report`` (which imports no model)
REPORT_ROWS: tuple[tuple[str, str, str, float], ...] = tuple((b.name, *row) for b in _RECORDS for row in b.rows)


def world_sets() -> dict[str, str]:
    """{benchmark: its set in the synthetic world} in the registry's order: what the world stage has
    ``pipeline.world_benchmarks.write_benchmarks`` write (pipeline imports no model: the record hands it)."""
    return {b.name: b.world for b in _RECORDS if b.world}


SUITES = ("zeroshot", "linear-probe")  # one dataset a root: ``zeroshot/<dataset>``, ``linear-probe/<dataset>``


def split_name(name: str) -> tuple[str, str | None]:
    """(benchmark, dataset) of a name: a suite's ``NAME/<dataset>`` names one dataset of it (the paper's general-
    ability table averages several: each is a root of its own); any other name has no dataset."""
    base, sep, dataset = name.partition("/")
    if sep and base in SUITES and dataset and "/" not in dataset:
        return base, dataset
    return name, None


def get(name: str) -> Benchmark:
    """The record of ``name`` (a suite's ``NAME/<dataset>``: the suite's); ``ValueError`` naming the choices for an
    unknown one."""
    try:
        return REGISTRY[split_name(name)[0]]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose from {BENCHMARKS} (or {'/<dataset>, '.join(SUITES)}"
                         "/<dataset>)") from None


def code_roots(names: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The evaluate stage's code roots: the harness (``model.benchmarks``: its import closure holds the scoring,
    the protocols, the encoders) and each benchmark's rule module (loaded by name, so in no import closure) of
    ``names`` (None: every registered one)."""
    chosen = [b for b in _RECORDS if names is None or b.name in {split_name(n)[0] for n in names}]
    return (__package__, "model.benchmarks.scoring", *dict.fromkeys(f"{__package__}.{b.module}" for b in chosen))


def cli_help() -> str:
    """``macco eval --benchmark``'s help: every name, with what its --root is."""
    return " ".join(f"{b.name} ({b.help})" if b.help else b.name for b in _RECORDS) + " all"
