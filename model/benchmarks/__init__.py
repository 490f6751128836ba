"""Benchmark evaluation over the original released files: readers per benchmark, one shared scorer.

``evaluate(cfg, names)`` checks every benchmark's inputs (``check_inputs``: a missing file or folder fails before
the model loads, all of them named at once), loads the model once, runs each benchmark, and returns
``{benchmark: {"subsets": {name: {n, correct, accuracy, ties, missing_images}}, "groups": {...},
"settings": {...}}}``. ``settings`` records every protocol choice (``protocol``, the ``activation`` the towers
actually use, exclusion list, VL-CheckList mode, image roots, ...). A group average over an incomplete set of its
files is refused (``protocols.IncompleteGroup``) unless ``allow_partial``; then the benchmark's entry carries
``"partial": true`` and ``"missing_files": {group: [files]}``. What's Up adds ``details`` (pair / set /
per-preposition accuracy). What a name reads, records and reports is its record in ``registry.REGISTRY``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from data_schemas import InputFileError
from data_schemas.config import check_ranges, unkeyed
from data_schemas.geometry import DEFAULT_ARCH
from data_schemas.provenance import closure_version
from data_schemas.scene_graphs import SPACY_MODEL

from .protocols import (ACTIVATIONS, ARO_EXCLUSIONS, ORDER_BENCHMARKS, PROTOCOLS, VLC_MODES, Activation,
                        AroExclusion, IncompleteGroup, Protocol, VlcMode, check_choice, check_complete,
                        protocol_default)
from .registry import BENCHMARKS, REGISTRY, Benchmark, code_roots
from .registry import get as get_benchmark

if TYPE_CHECKING:  # the scoring core imports torch: on use only, so the registry's names stay cheap to read
    from .scoring import Case, Encoder

__all__ = ["BENCHMARKS", "REGISTRY", "Benchmark", "EvalConfig", "IncompleteGroup", "InputsNotReady",
           "activation_kwargs", "append_results", "case_groups", "check_inputs", "common_settings",
           "default_run_label", "evaluate", "get_benchmark", "load_encoder", "paired_cases", "result_rows",
           "run_benchmark"]


@dataclass
class EvalConfig:
    """Every evaluation setting; the ones that change published numbers are explicit choices, recorded in each
    benchmark's ``settings``.

    ``activation``: the MLP activation of the evaluated towers. ``auto`` (default) builds what
    ``model.factory.resolve_arch`` decides, i.e. the training activation (QuickGELU for OpenAI-initialised ViT-B/L with a
    weights file); ``quickgelu`` / ``gelu`` force one. MACCO's evaluation scripts all reload checkpoints as
    ``ViT-B-32`` with nn.GELU (its ``eval/evaluate_comp_benchmark.py``, ``evaluate_aro_order.py:21``,
    ``evaluate_vl_checklist.py:19``): pass ``gelu`` to reproduce its numbers (ARO issue #32: ~6 points on VG-R).
    ``protocol``: ``authors`` (each benchmark's own harness) or ``macco`` (MACCO's scripts); it sets the defaults
    of ``activation``, ``aro_exclusion``, ``vlc_mode`` and the Order image roots (``protocols.DEFAULTS``); explicit
    values win. ``allow_missing``: a benchmark whose images are partly missing is an error naming the count and
    examples (the authors' harnesses crash on a missing file) unless allowed; allowed, the missing cases are left
    out of ``n``, counted per subset, and the run is marked (``settings.allow_missing``, the report).
    """
    model: str = DEFAULT_ARCH  # open_clip architecture or local-dir:PATH
    checkpoint: str | None = None  # weights file (or an open_clip pretrained tag)
    roots: dict = field(default_factory=dict)  # benchmark -> root directory
    device: str = unkeyed("cpu")  # unkeyed: where it runs (the evaluate stage's key)
    batch_size: int = 64
    autocast: bool = False  # fp32 by default, as SugarCrepe and MACCO
    allow_missing: bool = False  # score a benchmark whose images are partly missing (else an error), recorded
    seed: int = 1  # Order perturbations (the ARO authors' seed; MACCO's script is unseeded)
    spacy_model: str = SPACY_MODEL
    activation: Activation | None = None  # None: the protocol's (authors: auto; macco: gelu, MACCO's scripts)
    protocol: Protocol = "authors"
    aro_exclusion: AroExclusion | None = None  # macco: 3 more relations; None: the protocol's
    vga_min_count: int = 25
    order_files: dict = field(default_factory=lambda: {"coco-order": "coco_karpathy_test.json",
                                                       "flickr-order": "flickr30k_test.json"})
    order_image_roots: dict = field(default_factory=dict)  # default: the protocol's join (protocols.order_image_root)
    vlc_mode: VlcMode | None = None  # None: the protocol's
    vlc_max_num: int = 2000
    valse_valid_only: bool = True
    valse_image_roots: dict = field(default_factory=dict)  # dataset field (normalised) -> image directory
    allow_partial: bool = False  # report a group average over an incomplete set of files, marked partial
    winoground_clean_ids: str | None = None  # ids file for Winoground's clean subset (winoground.load_clean_ids)
    zeroshot_dataset: str | None = None  # zero-shot's template set (clip_benchmark's name); None: the root's name

    def __post_init__(self):
        check_choice("protocol", self.protocol, PROTOCOLS)
        if self.activation is None:
            self.activation = protocol_default(self.protocol, "activation")
        check_choice("activation", self.activation, ACTIVATIONS)
        if self.aro_exclusion is None:
            self.aro_exclusion = protocol_default(self.protocol, "aro_exclusion")
        if self.vlc_mode is None:
            self.vlc_mode = protocol_default(self.protocol, "vlc_mode")
        check_choice("aro_exclusion", self.aro_exclusion, ARO_EXCLUSIONS)
        check_choice("vlc_mode", self.vlc_mode, VLC_MODES)
        for k in self.order_image_roots:
            check_choice("order_image_roots key", k, ORDER_BENCHMARKS)
        check_ranges(self, "evaluate", positive=("batch_size", "vlc_max_num"), non_negative=("vga_min_count",))


def activation_kwargs(cfg: EvalConfig) -> dict:
    """open_clip model kwargs for ``cfg.activation`` (``quick_gelu`` overrides the config's own value)."""
    return {} if cfg.activation == "auto" else {"quick_gelu": cfg.activation == "quickgelu"}


def load_encoder(cfg: EvalConfig) -> tuple[Encoder, str, str]:
    """(encoder, model id, checkpoint sha256) for an architecture + weights file, or a local-dir export, built
    with ``cfg.activation`` (``Encoder.activation`` says what the towers use)."""
    import open_clip

    from model.factory import folder_weights, register_model_configs, resolve_arch, weights_file

    from data_schemas.provenance import file_sha256 as sha256_file
    from .scoring import Encoder

    register_model_configs()
    kw = activation_kwargs(cfg)
    if cfg.checkpoint and (Path(cfg.checkpoint).suffix or "/" in cfg.checkpoint) and \
            not Path(cfg.checkpoint).is_file():  # a path, not an open_clip tag such as "openai"
        raise FileNotFoundError(f"{cfg.checkpoint}: checkpoint file not found (--checkpoint: a weights file, e.g. "
                                "a run's export.pt, or an open_clip pretrained tag)")
    if cfg.model.startswith("local-dir:"):
        weights = folder_weights(cfg.model)
        with weights_file(weights, cfg.model):  # the folder's own weights, read by its loader
            model, _, preprocess = open_clip.create_model_and_transforms(cfg.model, device=cfg.device, **kw)
        tokenizer = open_clip.get_tokenizer(cfg.model)
        if cfg.checkpoint:  # the folder's loader reads its own weights and ignores a file: load the file's
            with weights_file(cfg.checkpoint, cfg.model):
                open_clip.load_checkpoint(model, cfg.checkpoint, device=cfg.device)
            weights = Path(cfg.checkpoint)
        sha = sha256_file(weights) if weights else ""
    else:
        # auto: resolve_arch's choice; forced: the plain architecture with quick_gelu overridden
        arch = resolve_arch(cfg.model, cfg.checkpoint) if cfg.activation == "auto" else \
            cfg.model.removesuffix("-gelu")
        with weights_file(cfg.checkpoint, arch):
            model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=cfg.checkpoint,
                                                                         device=cfg.device, **kw)
        tokenizer = open_clip.get_tokenizer(arch)
        sha = sha256_file(cfg.checkpoint) if cfg.checkpoint and Path(cfg.checkpoint).is_file() else ""
    return Encoder(model, preprocess, tokenizer, cfg.device, cfg.batch_size, cfg.autocast), cfg.model, sha


def common_settings(root: Path, cfg: EvalConfig, enc) -> dict:
    return {"root": str(root), "precision": "autocast" if cfg.autocast else "fp32", "protocol": cfg.protocol,
            "activation": getattr(enc, "activation", "unknown"), "activation_setting": cfg.activation,
            "allow_partial": cfg.allow_partial, "allow_missing": cfg.allow_missing}


def _subsets(res: dict) -> dict:
    return {k: v.as_dict() for k, v in sorted(res.items())}


def run_benchmark(enc: Encoder, name: str, root: str | Path, cfg: EvalConfig) -> dict:
    """One benchmark's entry of ``evaluate``'s result, as its :class:`~.registry.Benchmark` record says."""
    from .registry import split_name

    b = get_benchmark(name)
    mod = b.code()
    root = Path(root)
    dataset = split_name(name)[1]
    if dataset is not None and b.name == "zeroshot" and cfg.zeroshot_dataset is None:
        cfg = dataclasses.replace(cfg, zeroshot_dataset=dataset)  # zeroshot/<dataset>: that dataset's templates
    settings: dict = common_settings(root, cfg, enc)
    if b.run is not None:  # a direct benchmark: its own scoring
        return b.run(mod, enc, root, cfg, settings)
    from .scoring import check_missing, score_cases, tally

    cases = b.load(mod, root, cfg)
    expected = b.expected(mod, root) if b.expected else {}  # group -> files it averages (the completeness rule)
    settings.update(b.settings(mod, root, cfg) if b.settings else {})
    check_complete(name, expected, {c.subset for c in cases}, cfg.allow_partial)  # before the encoding
    check_missing(name, [c.image for c in cases if not Path(c.image).is_file()], len(cases), cfg.allow_missing)
    scores = score_cases(enc, cases)
    res = tally(cases, scores, cfg.allow_missing, name)
    # a file none of whose cases could be scored (every image missing) counts as missing from its groups
    missing = check_complete(name, expected, {s for s, r in res.items() if r.n}, cfg.allow_partial)
    g, extra = b.groups(mod, cases, scores, res, cfg)
    out = {"subsets": _subsets(res), "groups": g, "settings": settings, **extra,
           "cases": paired_cases(name, cases, scores, cfg)}
    if missing:
        out.update(partial=True, missing_files=missing)
    return out


def case_groups(name: str, case: Case, cfg: EvalConfig, excluded: set[str] = frozenset(),
                group_counts: dict[str, int] | None = None) -> list[str]:
    """The report groups (keys of ``groups``) whose score pools ``case``: the cases a paired test compares.
    ``excluded``: ARO VG-R's excluded relations; ``group_counts``: cases with an image per group (VG-A keeps
    groups of at least ``vga_min_count``)."""
    b = REGISTRY.get(name)
    if b is None or b.report_groups is None:
        return []
    return b.report_groups(b.code(), case, cfg, excluded, group_counts)


def paired_cases(name: str, cases, scores, cfg: EvalConfig) -> dict[str, str]:
    """{report group: one character per case it pools, in the benchmark's case order}: '1' right, '0' wrong,
    'x' image missing. Two models' strings over the same files line up case by case (McNemar's test)."""
    b = REGISTRY.get(name)
    context = b.report_context(b.code(), cases, scores, cfg) if b is not None and b.report_context else {}
    out: dict[str, list[str]] = {}
    for c, s in zip(cases, scores):
        bit = "x" if s is None else ("1" if int(np.argmax(s)) == c.true_index else "0")
        for g in case_groups(name, c, cfg, **context):
            out.setdefault(g, []).append(bit)
    return {g: "".join(v) for g, v in out.items()}


def default_run_label(cfg: EvalConfig) -> str:
    """``macco eval``'s run label when none is given: the weights file's name, else the model's."""
    if cfg.checkpoint:
        return Path(cfg.checkpoint).stem
    return Path(cfg.model.removeprefix("local-dir:")).name or cfg.model


class InputsNotReady(InputFileError):
    """Several benchmarks' inputs refused before the model loads (``check_inputs``); ``problems``: (name, error)."""

    def __init__(self, problems: list[tuple[str, Exception]]):
        self.problems = problems
        super().__init__(f"{len(problems)} input problem(s), found before loading the model: " +
                         "; ".join(f"{n}: {e}" for n, e in problems))


def check_inputs(cfg: EvalConfig, names: list[str]) -> None:
    """Each benchmark's input check (its registry record's ``check``: roots, annotation files, image folders, group
    completeness, named ids files) for every name, before any model is built. One problem is raised as the run
    would raise it (its type kept: ``IncompleteGroup``, ``MissingImages``, ``FileNotFoundError``); several as one
    :class:`InputsNotReady` naming each."""
    from .registry import input_problems

    problems = [(n, e) for n in names for e in input_problems(n, cfg.roots[n], cfg)]
    if len(problems) == 1:
        raise problems[0][1]
    if problems:
        raise InputsNotReady(problems)


def evaluate(cfg: EvalConfig, names: list[str], out_json: str | Path | None = None,
             results_table: str | Path | None = None, enc: Encoder | None = None, run: str | None = None,
             progress: bool = False) -> dict:
    """Every benchmark of ``names`` for one model; ``run`` labels the evaluation in results.json and in the
    ``eval_results`` history (``results_table``), default ``default_run_label``. The inputs of every benchmark are
    checked first (``check_inputs``), so a wrong path never costs the model load or the earlier benchmarks."""
    if "all" in names:
        from .registry import split_name

        names = [n for b in BENCHMARKS for n in cfg.roots if split_name(n)[0] == b]  # a suite's datasets too
    missing = [n for n in names if n not in cfg.roots]
    if missing:
        raise InputFileError(f"no root given for benchmark(s) {missing}")
    check_inputs(cfg, names)
    model_id, sha = cfg.model, ""
    if enc is None:
        enc, model_id, sha = load_encoder(cfg)
    out = {"model": model_id, "checkpoint": cfg.checkpoint, "checkpoint_sha256": sha, "protocol": cfg.protocol,
           "activation": getattr(enc, "activation", "unknown"), "run": run or default_run_label(cfg),
           "eval_id": uuid.uuid4().hex, "code_version": closure_version(*code_roots(tuple(names))),
           "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "benchmarks": {}}
    from tqdm import tqdm

    bar = tqdm(names, desc="macco eval", unit="benchmark", disable=not progress, leave=False)
    for n in bar:
        bar.set_postfix_str(n)
        t0 = time.perf_counter()
        out["benchmarks"][n] = run_benchmark(enc, n, cfg.roots[n], cfg)
        out["benchmarks"][n]["seconds"] = round(time.perf_counter() - t0, 2)
    if out_json:
        from data_schemas import replace_file

        Path(out_json).parent.mkdir(parents=True, exist_ok=True)
        replace_file(out_json, lambda tmp: tmp.write_text(json.dumps(out, indent=2, default=str)))
    if results_table:
        append_results(results_table, out, cfg)
    return out


def result_rows(out: dict, cfg: EvalConfig, trigger: str = "macco eval") -> list[dict]:
    """The ``eval_results`` rows of one evaluation (``evaluate``'s result): one per benchmark subset and one per
    report group (its average, the report's number; ``n`` the cases it pools where the per-case strings say), all
    with the evaluation's ``eval_id``, ``run`` label, ``created`` time and ``trigger``. A group's number goes in
    ``accuracy`` or, when its name says it is something else (a count, a setting, a correlation: ``metric_of``), in
    ``value``; a group averaged over part of its files is ``partial``, with the files it lacks in ``missing``; an
    accuracy group's per-case outcomes (``cases``: 1/0/x per case) are stored with it, for paired comparisons."""
    from data_schemas.eval_results import parse_created

    conf = json.dumps(asdict(cfg), sort_keys=True, default=str)
    config_key = hashlib.sha256(conf.encode()).hexdigest()[:16]
    common = {"eval_id": out["eval_id"], "run": out["run"], "model_id": out["model"],
              "checkpoint_sha256": out["checkpoint_sha256"], "config": conf, "config_key": config_key,
              "protocol": cfg.protocol, "activation": str(out.get("activation", "unknown")),
              "code_version": out["code_version"], "created": parse_created(out["created"]), "trigger": trigger}
    rows = []
    for b, r in out["benchmarks"].items():
        for s, v in r["subsets"].items():
            n = v.get("n", 0)
            acc = v.get("accuracy", v.get("top1", v.get("group")))
            rows.append({**common, "benchmark": b, "level": "subset", "subset": s, "n": n,
                         "correct": v.get("correct", round((acc or 0) * n)), "metric": "accuracy", "accuracy": acc,
                         "value": None, "partial": False, "missing": [], "cases": None, "ties": v.get("ties", 0),
                         "missing_images": v.get("missing_images", 0)})
        rows += [{**common, **row} for row in _group_rows(b, r)]
    return rows


def _group_rows(bench: str, r: dict) -> list[dict]:
    """The group rows of one benchmark's entry: each group's number under its metric, its completeness."""
    from data_schemas.eval_results import metric_of

    rows = []
    for g, num in r.get("groups", {}).items():
        if isinstance(num, bool) or not isinstance(num, (int, float)):
            continue  # flags, names and nested details beside the averages (ARO's exclusion_list, VL's leaves)
        metric = metric_of("group", g)
        if metric == "accuracy" and not 0 <= num <= 1:
            raise ValueError(f"benchmarks.{bench}.groups.{g}: {num!r} is not an accuracy in [0, 1] and its name is "
                             "not a known count or measure (data_schemas.eval_results.NOT_ACCURACY)")
        cases = r.get("cases", {}).get(g) if metric == "accuracy" else None
        n = len(cases) - cases.count("x") if cases is not None else 0
        missing = sorted(r.get("missing_files", {}).get(g, []))
        rows.append({"benchmark": bench, "level": "group", "subset": g, "n": n, "metric": metric,
                     "correct": round(num * n) if n else 0, "accuracy": float(num) if metric == "accuracy" else None,
                     "value": None if metric == "accuracy" else float(num), "partial": bool(missing),
                     "missing": missing, "cases": cases, "ties": 0,
                     "missing_images": cases.count("x") if cases is not None else 0})
    return rows


def append_results(table_dir: str | Path, out: dict, cfg: EvalConfig, trigger: str = "macco eval") -> dict:
    """Append one evaluation's rows to the ``eval_results`` history in ``table_dir`` (one new part; concurrent
    writers take turns, every row is kept; a table of an earlier schema version is upgraded first, its rows kept).
    An evaluation whose ``eval_id`` the table holds already adds nothing (a retried append). A table that cannot be
    read (damaged part, bad manifest) is an error, never replaced."""
    from data_schemas import TABLES, append_table
    from data_schemas.eval_results import LEGACY

    spec = TABLES["eval_results"]
    return append_table(spec, table_dir, spec.from_rows(result_rows(out, cfg, trigger)), config={"append": True},
                        code_version=out["code_version"],
                        legacy={v: (old_spec, upgrade) for v, (old_spec, _, upgrade) in LEGACY.items()},
                        once=("eval_id", out["eval_id"]))
