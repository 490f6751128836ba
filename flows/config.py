"""The pipeline config (one YAML) as one typed tree, ``FlowConfig``: every stage section is its stage's config
dataclass (the one source of its fields, types and defaults), the flow's own sections typed plans. ``load_config``
merges a file (and overrides) over the defaults; unknown keys, wrong types and values out of range are one-line
``ConfigError``s naming the key. Stages receive their typed section, never the YAML dict."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from data_schemas.checks import CheckParams
from data_schemas.config import ConfigError, check_ranges, from_dict, safe_name, shown, unkeyed
from data_schemas.geometry import DEFAULT_ARCH
from model.benchmarks import EvalConfig
from model.train_config import TrainConfig
from pipeline.captions_stage import CaptionsConfig
from pipeline.grounding.base import GroundingConfig
from pipeline.masks_stage import MasksConfig
from pipeline.parse_stage import ParseConfig
from pipeline.siglip_folder import BUILT, TokenizerConfig
from pipeline.world import WorldConfig


# ---- the flow's own sections (what runs, how it is evaluated, where work goes), typed ----------------------
@dataclass
class RunPlan:
    """One named fine-tune: its training settings (``train.common`` under the run's own keys) and its seeds."""
    config: TrainConfig
    seeds: tuple[int, ...]


@dataclass
class TrainPlan:
    """``train``: the runs. ``base``: training sections run first as a chain (each from the previous export; the
    last initialises every run); ``runs``: name -> its settings and seeds; ``pretrained``: the runs' weights when
    there is no base; ``torchrun_nproc`` > 1: each run under torchrun (DDP). In the YAML, ``common`` holds the
    TrainConfig keys every section shares and ``seeds`` the runs' default seeds; both are folded in here."""
    arch: str = DEFAULT_ARCH
    base: tuple[TrainConfig, ...] = ()
    pretrained: str | None = None
    runs: dict[str, RunPlan] = field(default_factory=dict)
    torchrun_nproc: int = 1

    def sections(self) -> list[tuple[str, TrainConfig]]:
        """(where in the config, settings) of every training section."""
        return [*((f"train.base[{i}]", b) for i, b in enumerate(self.base)),
                *((f"train.runs.{n}", r.config) for n, r in self.runs.items())]


TRAIN_KEYS = ("arch", "base", "pretrained", "runs", "seeds", "common", "torchrun_nproc")


def _seeds(value, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or len(set(value)) != len(value) or \
            not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
        raise ConfigError(f"config {where}: {shown(value)}: a non-empty list of distinct integers >= 0 expected")
    return tuple(value)


def train_plan(data: dict) -> TrainPlan:
    """The ``train`` section as a ``TrainPlan``: every base and run section through ``TrainConfig`` (its checks,
    naming the section), run names checked as plain names (they name folders)."""
    unknown = sorted(set(data) - set(TRAIN_KEYS))
    if unknown:
        raise ConfigError(f"config train: unknown key(s) {unknown}; known: {sorted(TRAIN_KEYS)}")
    arch, common = data.get("arch", DEFAULT_ARCH), data.get("common") or {}
    for name, value in (("common", common), ("runs", data.get("runs") or {})):
        if not isinstance(value, dict):
            raise ConfigError(f"config train.{name}: a mapping expected, got {shown(value)}")
    from_dict(TrainConfig, {"arch": arch, **common}, "config train.common")
    base = data.get("base")
    bases = [] if not base else [base] if isinstance(base, dict) else base
    if not isinstance(bases, list) or not all(isinstance(b, dict) for b in bases):
        raise ConfigError(f"config train.base: a section or a list of sections, not {shown(base)}")
    seeds = _seeds(data.get("seeds", [0]), "train.seeds")
    runs = {}
    for name, over in (data.get("runs") or {}).items():
        safe_name(name, "config train.runs")
        if not isinstance(over, dict):
            raise ConfigError(f"config train.runs: a mapping of run name -> training section, not "
                              f"{shown(data['runs'])}")
        own = _seeds(over["seeds"], f"train.runs.{name}.seeds") if "seeds" in over else seeds
        settings = {"arch": arch, **common, **{k: v for k, v in over.items() if k != "seeds"}}
        runs[name] = RunPlan(from_dict(TrainConfig, settings, f"config train.runs.{name}"), own)
    base_configs = tuple(from_dict(TrainConfig, {"arch": arch, **common, **b}, f"config train.base[{i}]")
                         for i, b in enumerate(bases))
    plan = TrainPlan(arch=arch, base=base_configs,
                     pretrained=data.get("pretrained"), runs=runs,
                     torchrun_nproc=data.get("torchrun_nproc", 1))
    check_ranges(plan, "config train", positive=("torchrun_nproc",))
    return plan


@dataclass
class EvaluatePlan:
    """``evaluate``: which benchmarks (``all`` or names) on which roots (none: the synthetic world's own sets),
    which models, the probes on the world, the paired tests' control, and the evaluation ``settings``
    (``EvalConfig``; model, weights and roots are each run's). ``given``: the settings the config set (on the
    synthetic world the others take the world's values, ``protocols.WORLD_SETTINGS``).

    ``weights``: models evaluated without training, as columns beside the runs (label -> weights file, built as
    ``train.arch``): the pretrained CLIP of the paper's tables. ``protocols``: evaluate every model under each of
    these protocols (``macco``: MACCO's scripts, the paper's numbers; ``authors``: each benchmark's own harness),
    one report table each; empty: ``settings.protocol`` alone. ``paper``: our model label -> the paper's row
    (``pipeline/paper_numbers.json``): the report prints the paper's tables beside ours and the registered bar."""
    benchmarks: tuple[str, ...] | None = None  # None: all
    roots: dict[str, str] = field(default_factory=dict)
    settings: EvalConfig = field(default_factory=EvalConfig)
    # unkeyed: which models / protocols and how the report reads them decide no one evaluation (``eval_config``)
    models: tuple[str, ...] | None = unkeyed(None)  # None: all
    probes: bool = True
    control: str = unkeyed("clip-ft")
    given: tuple[str, ...] = unkeyed(())
    weights: dict[str, str] = unkeyed(default_factory=dict)
    protocols: tuple[str, ...] = unkeyed(())
    paper: dict[str, str] = unkeyed(default_factory=dict)

    def eval_config(self, roots: dict[str, str], world_run: bool, protocol: str | None = None) -> EvalConfig:
        """The settings for one evaluation: these ``roots``; on the synthetic world its own settings where the config
        gives none (``protocols.WORLD_SETTINGS``: small VG-A groups, partial groups); with ``protocol``, that
        protocol's defaults for every setting the config does not give."""
        from model.benchmarks.protocols import WORLD_SETTINGS

        world = {k: v for k, v in WORLD_SETTINGS.items() if k not in self.given} if world_run else {}
        settings = self.settings
        if protocol is not None:
            given = {k: getattr(self.settings, k) for k in self.given if k != "protocol"}
            settings = EvalConfig(**given, protocol=protocol)
        return dataclasses.replace(settings, roots=dict(roots), **world)

    def protocol_list(self) -> tuple[str | None, ...]:
        """The protocols to evaluate under (None: the settings' own, one table as before)."""
        return self.protocols or (None,)


EVALUATE_KEYS = tuple(f.name for f in dataclasses.fields(EvaluatePlan) if f.name != "given")  # given: derived


def evaluate_plan(data: dict) -> EvaluatePlan:
    from model.benchmarks.registry import BENCHMARKS, split_name

    unknown = sorted(set(data) - set(EVALUATE_KEYS))
    if unknown:
        raise ConfigError(f"config evaluate: unknown key(s) {unknown}; known: {sorted(EVALUATE_KEYS)}")
    lists = {}
    for name in ("benchmarks", "models"):
        value = data.get(name, "all")
        if isinstance(value, str) and value != "all" or not isinstance(value, (str, list)):
            raise ConfigError(f"config evaluate.{name}: {shown(value)}: 'all' or a list")
        lists[name] = None if value == "all" else tuple(value)
    if lists["benchmarks"] is not None and not {split_name(b)[0] for b in lists["benchmarks"]} <= set(BENCHMARKS):
        raise ConfigError(f"config evaluate.benchmarks: {list(lists['benchmarks'])!r}: 'all' or a list of "
                          f"{list(BENCHMARKS)}")
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise ConfigError(f"config evaluate.settings: a mapping expected, got {shown(settings)}")
    flow_set = sorted({"model", "checkpoint", "roots"} & set(settings))
    if flow_set:
        raise ConfigError(f"config evaluate.settings: {flow_set} are set by the flow (each run's model and weights; "
                          "evaluate.roots)")
    roots = data.get("roots") or {}
    if not isinstance(roots, dict) or not all(isinstance(v, str) for v in roots.values()):
        raise ConfigError(f"config evaluate.roots: a mapping of benchmark -> folder expected, got {shown(roots)}")
    unknown = [k for k in roots if split_name(str(k))[0] not in BENCHMARKS]
    if unknown:
        raise ConfigError(f"config evaluate.roots: unknown benchmark(s) {unknown}; known: {list(BENCHMARKS)}, and "
                          "zeroshot/<dataset>, linear-probe/<dataset>")
    plain = from_dict(EvaluatePlan, {k: data[k] for k in ("probes", "control") if k in data}, "config evaluate")
    weights, paper = (_str_mapping(data.get(k) or {}, f"config evaluate.{k}", what)
                      for k, what in (("weights", "label -> weights file"), ("paper", "model label -> paper row")))
    for label in weights:
        safe_name(label, "config evaluate.weights")
    return dataclasses.replace(plain, benchmarks=lists["benchmarks"], models=lists["models"], roots=dict(roots),
                               settings=from_dict(EvalConfig, settings, "config evaluate.settings"),
                               given=tuple(sorted(settings)), weights=weights,
                               protocols=_protocols(data.get("protocols") or [], settings), paper=paper)


def _str_mapping(value, where: str, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{where}: a mapping of {what} expected, got {shown(value)}")
    return dict(value)


def _protocols(value, settings: dict) -> tuple[str, ...]:
    from model.benchmarks.protocols import PROTOCOLS

    if not isinstance(value, list) or len(set(map(str, value))) != len(value) or not set(value) <= set(PROTOCOLS):
        raise ConfigError(f"config evaluate.protocols: {shown(value)}: a list of distinct protocols from "
                          f"{list(PROTOCOLS)}")
    if value and "protocol" in settings:
        raise ConfigError("config evaluate: give either evaluate.protocols (several) or evaluate.settings.protocol "
                          "(one), not both")
    return tuple(value)


@dataclass
class DaskPlan:
    """``dask``: preprocessing shards on an existing cluster (``address``) or a local one of ``local_workers``."""
    address: str | None = None
    local_workers: int = 0

    def __post_init__(self):
        check_ranges(self, "config dask", non_negative=("local_workers",))


@dataclass
class ValidateConfig:
    """``validate``: the checks' thresholds, and whether every part is re-hashed first (``deep``)."""
    params: CheckParams = field(default_factory=CheckParams)
    deep: bool = True


@dataclass
class FlowConfig:
    """The whole config as one typed tree: every stage section is its stage's config dataclass, the flow's own
    sections the plans above. The stage sections are the registry's: ``flows.registry`` checks each record's
    ``section`` and ``config`` against them, in the registry's order; the defaults and the reading are generated
    from these fields (``sections``). ``data`` with source coco and no root is the synthetic world (the world
    stage's output is its root)."""
    name: str
    artifacts: str
    world: WorldConfig
    data: CaptionsConfig
    tokenizer: TokenizerConfig
    parse: ParseConfig
    ground: GroundingConfig
    masks: MasksConfig
    validate: ValidateConfig
    train: TrainPlan
    evaluate: EvaluatePlan
    dask: DaskPlan

    @property
    def world_run(self) -> bool:
        """The data is the synthetic world (the embedded default): no data root given."""
        return self.data.source == "coco" and self.data.root is None

    def key_view(self) -> dict:
        """The tree as plain data (JSON-able)."""
        return asdict(self)


# ---- the YAML: defaults, merge, the typed tree ---------------------------------------------------------------
def plain(value):
    """``value`` with tuples as lists, recursively (as YAML and JSON write it)."""
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def _validate_section(data: dict, where: str) -> ValidateConfig:
    deep = from_dict(ValidateConfig, {"deep": data.get("deep", True)}, where).deep
    return ValidateConfig(params=from_dict(CheckParams, data.get("params") or {}, f"{where}.params"), deep=deep)


# the flow's plans: (their YAML-level defaults, their reader); every other section is a stage's config dataclass,
# its defaults its fields', read by ``from_dict``
_PLANS = {
    ValidateConfig: (lambda: {"params": asdict(CheckParams()), "deep": True}, _validate_section),
    TrainPlan: (lambda: {"arch": DEFAULT_ARCH, "base": None, "pretrained": None, "runs": {"macco": {"mode": "macco"}},
                         "seeds": [0], "common": {}, "torchrun_nproc": 1}, lambda data, where: train_plan(data)),
    EvaluatePlan: (lambda: {"benchmarks": "all", "roots": {}, "settings": {}, "models": "all", "probes": True,
                            "control": "clip-ft", "weights": {}, "protocols": [], "paper": {}},
                   lambda data, where: evaluate_plan(data)),
}
FLOW_OWN, FLOW_SECTIONS = {"name": "demo", "artifacts": "artifacts"}, ("dask",)  # own keys; sections no stage runs


def sections() -> dict[str, type]:
    """{section: its type} of ``FlowConfig`` in its order: the stages' (``flows.registry`` checks them against
    the records' ``section`` / ``config``, in the registry's order), then the flow's own."""
    hints = typing.get_type_hints(FlowConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(FlowConfig) if f.name not in FLOW_OWN}


def _defaults() -> dict:
    """The YAML-level defaults: every section's fields and defaults are its dataclass's (one source)."""
    from data_schemas.config import defaults
    return {**FLOW_OWN, **{name: _PLANS[cls][0]() if cls in _PLANS else plain(defaults(cls))
                           for name, cls in sections().items()}}


DEFAULTS: dict = _defaults()
# sections whose value replaces the default as a whole (a mapping of names the user chooses, or one section)
_WHOLE = ("runs", "common", "roots", "settings", "base", "extra", "weights", "paper")


def _merge(base: dict, over: dict, path: str = "") -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if k not in base:
            raise ConfigError(f"config: unknown key {shown(path + k)} (known: {sorted(base)})")
        if isinstance(base[k], dict) and v is not None and not isinstance(v, dict):
            raise ConfigError(f"config {path + k}: a mapping expected, got {shown(v)}")
        if isinstance(base[k], dict) and isinstance(v, dict) and k not in _WHOLE:
            out[k] = _merge(base[k], v, f"{path}{k}.")
        else:
            out[k] = v
    return out


def flow_config(cfg: dict) -> FlowConfig:
    """The typed tree of a merged config dict (unknown keys, wrong types, values outside a ``Literal`` or a range
    fail naming the key), then the checks across sections."""
    section = {}
    for name, cls in sections().items():
        data = cfg[name]
        if not isinstance(data, dict):
            raise ConfigError(f"config {name}: a mapping expected, got {shown(data)}")
        read = _PLANS[cls][1] if cls in _PLANS else lambda d, where, cls=cls: from_dict(cls, d, where)
        section[name] = read(data, f"config {name}")
    tree = FlowConfig(name=safe_name(cfg["name"], "config name"), artifacts=str(cfg["artifacts"]), **section)
    _check_across(tree)
    return tree


def _check_across(tree: FlowConfig) -> None:
    """The checks across sections: the official file's parser and boxes, the tokenizers."""
    for where, value in (("parse.parser", tree.parse.parser), ("ground.backend", tree.ground.backend)):
        if value == "official" and tree.data.source != "macco-tsv":
            raise ConfigError(f"config {where}: 'official' reads MACCO's released file: it needs data.source "
                              f"macco-tsv (this config: {tree.data.source!r})")
    _check_tokenizers(tree)
    _check_paper(tree)


def _check_paper(tree: FlowConfig) -> None:
    """``evaluate.paper`` maps models of this config (runs, ``evaluate.weights``) to rows of the paper's tables."""
    ev = tree.evaluate
    if not ev.paper:
        return
    from pipeline.paper import load_paper

    models = {*tree.train.runs, *ev.weights, *(("base",) if tree.train.base else ())}
    rows = {r for t in load_paper()["tables"].values() for r in t["row_names"]}
    for label, row in ev.paper.items():
        if label not in models:
            raise ConfigError(f"config evaluate.paper: {label!r} is not a model of this config ({sorted(models)})")
        if row not in rows:
            raise ConfigError(f"config evaluate.paper.{label}: {row!r} is not a row of the paper's tables "
                              f"({sorted(rows)})")


def _check_tokenizers(tree: FlowConfig) -> None:
    """The token masks must be in the trained model's tokenizer: every CLIP architecture shares one BPE, but a
    model folder (local-dir:, or built:tokenizer) has its own, so parse.clip_model must name the same folder as
    each training section's architecture; built:tokenizer needs a tokenizer stage."""
    def folder(name: str) -> str | None:
        return name if name == BUILT or name.startswith("local-dir:") else None

    parse, archs = tree.parse.clip_model, [("train.arch", tree.train.arch)] + \
        [(where, s.arch) for where, s in tree.train.sections()]
    used = [("parse.clip_model", parse), *archs, *(("masks.models", m) for m in tree.masks.models)]
    if tree.tokenizer.arch is None and any(v == BUILT for _, v in used):
        where = ", ".join(k for k, v in used if v == BUILT)
        raise ConfigError(f"config {where}: {BUILT!r} names the folder the tokenizer stage builds, but "
                          "tokenizer.arch is not set")
    for where, arch in archs:
        if folder(arch) != folder(parse):
            raise ConfigError(f"config {where}: {arch!r} and parse.clip_model {parse!r} tokenize differently (a model "
                              "folder has its own tokenizer): the token masks must be parsed with the trained "
                              "model's tokenizer")


def use_built_folder(tree: FlowConfig, folder: str) -> FlowConfig:
    """``tree`` with every ``built:tokenizer`` model name (parse.clip_model, masks.models, the training sections'
    arch) replaced by the folder the tokenizer stage built."""
    sub = lambda v: folder if v == BUILT else v  # noqa: E731
    train = tree.train
    train = dataclasses.replace(
        train, arch=sub(train.arch), base=tuple(dataclasses.replace(b, arch=sub(b.arch)) for b in train.base),
        runs={n: dataclasses.replace(r, config=dataclasses.replace(r.config, arch=sub(r.config.arch)))
              for n, r in train.runs.items()})
    return dataclasses.replace(tree, parse=dataclasses.replace(tree.parse, clip_model=sub(tree.parse.clip_model)),
                               masks=MasksConfig(tuple(sub(m) for m in tree.masks.models)), train=train)


def load_config(path: str | Path | None, overrides: dict | None = None) -> FlowConfig:
    """The typed config of a YAML file (none: the defaults) with ``overrides`` merged over it."""
    from data_schemas.config import load_yaml

    data = (load_yaml(path) or {}) if path else {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a mapping of sections expected, got {type(data).__name__}")
    cfg = _merge(DEFAULTS, data)
    if overrides:
        cfg = _merge(cfg, overrides)
    return flow_config(cfg)


def key_of(*parts) -> str:
    """A content key: sha256 (16 hex) of JSON-serialised parts (upstream hashes, config, code version)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
