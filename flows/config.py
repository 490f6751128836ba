"""The pipeline config (one YAML): sections per stage, unknown keys rejected, content keys per stage."""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from data_schemas.config import ConfigError, check_ranges
from data_schemas.geometry import DEFAULT_ARCH

STAGES = ("world", "captions", "tokenizer", "parse", "ground", "masks", "validate", "train", "evaluate", "report")


# ---- the flow's own sections (what runs, how they are evaluated, where work goes), typed -------------------
@dataclass
class TrainPlan:
    """``train``: the runs. ``base`` is a training section (or a list of them: a chain) run first, the last
    export initialising every run; ``runs`` maps a name to its overrides of ``common`` (``seeds`` too)."""
    arch: str = DEFAULT_ARCH
    base: dict | list | None = None
    pretrained: str | None = None  # weights file for the runs when there is no base
    runs: dict = field(default_factory=lambda: {"macco": {"mode": "macco"}})
    seeds: list[int] = field(default_factory=lambda: [0])
    common: dict = field(default_factory=dict)  # model.train_config.TrainConfig fields shared by every run
    torchrun_nproc: int = 1  # > 1: each run under torchrun (DDP)

    def __post_init__(self):
        check_ranges(self, "config train", positive=("torchrun_nproc",), non_negative=("seeds",))
        for where, seeds in [("train.seeds", self.seeds), *((f"train.runs.{n}.seeds", r.get("seeds"))
                                                            for n, r in self.runs.items() if isinstance(r, dict))]:
            if seeds is not None and (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
                                      or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                 for x in seeds)):
                raise ConfigError(f"config {where}: {seeds!r}: a non-empty list of distinct integers >= 0 expected")
        if not all(isinstance(r, dict) for r in self.runs.values()):
            raise ConfigError(f"config train.runs: a mapping of run name -> training section, not {self.runs!r}")


@dataclass
class EvaluatePlan:
    """``evaluate``: which benchmarks (``all`` or names) on which roots (none: the synthetic world's own sets),
    which models, the probes on the world, the paired tests' control, and ``settings`` (EvalConfig's)."""
    benchmarks: str | list[str] = "all"
    roots: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    models: str | list[str] = "all"
    probes: bool = True
    control: str = "clip-ft"

    def __post_init__(self):
        from model.benchmarks.registry import BENCHMARKS

        for name, value in (("benchmarks", self.benchmarks), ("models", self.models)):
            if isinstance(value, str) and value != "all":
                raise ConfigError(f"config evaluate.{name}: {value!r}: 'all' or a list")
        if self.benchmarks != "all" and not set(self.benchmarks) <= set(BENCHMARKS):
            raise ConfigError(f"config evaluate.benchmarks: {self.benchmarks!r}: 'all' or a list of "
                              f"{list(BENCHMARKS)}")


@dataclass
class DaskPlan:
    """``dask``: preprocessing shards on an existing cluster (``address``) or a local one of ``local_workers``."""
    address: str | None = None
    local_workers: int = 0

    def __post_init__(self):
        check_ranges(self, "config dask", non_negative=("local_workers",))


@dataclass
class ValidatePlan:
    params: dict = field(default_factory=dict)  # the checks' thresholds (data_schemas.checks.DEFAULT_PARAMS)


@dataclass
class FlowConfig:
    """The whole config as one typed tree: every stage section is its stage's config dataclass itself (its
    fields, types and defaults, the one source of them), the flow's own sections the plans above."""
    name: str
    artifacts: str
    world: Any  # pipeline.world.WorldConfig
    data: Any  # pipeline.stages.CaptionsConfig (root None: the synthetic world)
    tokenizer: Any  # pipeline.siglip_folder.TokenizerConfig
    parse: Any  # pipeline.stages.ParseConfig
    ground: Any  # pipeline.grounding.base.GroundingConfig
    masks: dict
    validate: ValidatePlan
    train: TrainPlan
    evaluate: EvaluatePlan
    dask: DaskPlan


def _section_classes() -> dict[str, type]:
    from pipeline.grounding.base import GroundingConfig
    from pipeline.siglip_folder import TokenizerConfig
    from pipeline.stages import CaptionsConfig, ParseConfig
    from pipeline.world import WorldConfig

    return {"world": WorldConfig, "data": CaptionsConfig, "tokenizer": TokenizerConfig, "parse": ParseConfig,
            "ground": GroundingConfig, "validate": ValidatePlan, "train": TrainPlan, "evaluate": EvaluatePlan,
            "dask": DaskPlan}


def _plain(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def _defaults() -> dict:
    """The flow config's defaults: every section's fields and defaults are its dataclass's (one source)."""
    from data_schemas.config import defaults

    out = {"name": "demo", "artifacts": "artifacts",
           **{name: _plain(defaults(cls)) for name, cls in _section_classes().items() if name != "data"},
           "masks": {"models": [DEFAULT_ARCH]}}  # the architectures whose patch grids to write
    from pipeline.stages import CaptionsConfig

    out["data"] = {**_plain(asdict(CaptionsConfig(root="."))), "root": None}  # root null: the synthetic world
    return out


DEFAULTS: dict = _defaults()


def flow_config(cfg: dict) -> FlowConfig:
    """The typed tree of a merged config dict (every section through its dataclass's ``from_dict``: unknown keys,
    wrong types, values outside a ``Literal`` or a range fail naming the key)."""
    from data_schemas.config import from_dict

    sections = {}
    for name, cls in _section_classes().items():
        value = cfg[name]
        if name == "data" and value["source"] == "coco" and value["root"] is None:
            value = {**value, "root": "."}  # the synthetic world's root: the world stage's output
        sections[name] = from_dict(cls, value, f"config {name}")
    return FlowConfig(cfg["name"], cfg["artifacts"], masks=cfg["masks"], **sections)


def check_sections(cfg: dict) -> FlowConfig:
    """The typed tree (``flow_config``) and the checks across sections: the runs' training sections, the
    evaluation settings, the tokenizers, the official file's parser and boxes."""
    from data_schemas.config import from_dict
    from model.benchmarks import EvalConfig
    from model.train_config import TrainConfig

    tree = flow_config(cfg)
    data = cfg["data"]
    _check_tokenizers(cfg)
    for where, value in (("parse.parser", cfg["parse"].get("parser")), ("ground.backend", cfg["ground"]["backend"])):
        if value == "official" and data["source"] != "macco-tsv":
            raise ConfigError(f"config {where}: 'official' reads MACCO's released file: it needs data.source "
                              f"macco-tsv (this config: {data['source']!r})")
    train = cfg["train"]
    for where, section in [("train.common", train["common"]),
                           *((f"train.base[{i}]", b) for i, b in enumerate(base_sections(train["base"]))),
                           *((f"train.runs.{n}", r) for n, r in train["runs"].items())]:
        from_dict(TrainConfig, {"arch": train["arch"], **train["common"],
                                **{k: v for k, v in section.items() if k != "seeds"}}, f"config {where}")
    settings = cfg["evaluate"]["settings"]
    flow_set = sorted({"model", "checkpoint", "roots"} & set(settings))
    if flow_set:
        raise ConfigError(f"config evaluate.settings: {flow_set} are set by the flow (each run's model and weights; "
                          "evaluate.roots)")
    from_dict(EvalConfig, settings, "config evaluate.settings")
    return tree


def run_archs(train: dict) -> list[tuple[str, str]]:
    """(where, architecture) of every training section: its own ``arch``, else common's, else ``train.arch``."""
    default = train["common"].get("arch", train["arch"])
    return [("train.arch", train["arch"]), *((f"train.base[{i}]", b.get("arch", default))
                                             for i, b in enumerate(base_sections(train["base"]))),
            *((f"train.runs.{n}", r.get("arch", default)) for n, r in train["runs"].items())]


def _check_tokenizers(cfg: dict) -> None:
    """The token masks must be in the trained model's tokenizer: every CLIP architecture shares one BPE, but a
    model folder (local-dir:, or built:tokenizer) has its own, so parse.clip_model must name the same folder as
    each training section's architecture; built:tokenizer needs a tokenizer stage."""
    from pipeline.siglip_folder import BUILT

    def folder(name: str) -> str | None:
        return name if name == BUILT or name.startswith("local-dir:") else None

    parse, archs = cfg["parse"]["clip_model"], run_archs(cfg["train"])
    used = [("parse.clip_model", parse), *archs, *(("masks.models", m) for m in cfg["masks"]["models"])]
    if cfg["tokenizer"]["arch"] is None and any(v == BUILT for _, v in used):
        where = ", ".join(k for k, v in used if v == BUILT)
        raise ConfigError(f"config {where}: {BUILT!r} names the folder the tokenizer stage builds, but "
                          "tokenizer.arch is not set")
    for where, arch in archs:
        if folder(arch) != folder(parse):
            raise ConfigError(f"config {where}: {arch!r} and parse.clip_model {parse!r} tokenize differently (a model "
                              "folder has its own tokenizer): the token masks must be parsed with the trained "
                              "model's tokenizer")


def use_built_folder(cfg: dict, folder: str) -> dict:
    """``cfg`` with every ``built:tokenizer`` model name (parse.clip_model, masks.models, train.arch and the train
    sections' arch) replaced by the folder the tokenizer stage built."""
    from pipeline.siglip_folder import BUILT

    cfg = copy.deepcopy(cfg)
    sub = lambda v: folder if v == BUILT else v  # noqa: E731
    cfg["parse"]["clip_model"] = sub(cfg["parse"]["clip_model"])
    cfg["masks"]["models"] = [sub(m) for m in cfg["masks"]["models"]]
    train = cfg["train"]
    train["arch"] = sub(train["arch"])
    for section in [train["common"], *base_sections(train["base"]), *train["runs"].values()]:
        if "arch" in section:
            section["arch"] = sub(section["arch"])
    return cfg


def base_sections(base: dict | list | None) -> list[dict]:
    """``train.base``: nothing, one training section, or a list of sections run as a chain (each initialised
    from the previous one's export; the last is the base the fine-tunes start from)."""
    if not base:
        return []
    if isinstance(base, dict):
        return [base]
    if not all(isinstance(b, dict) for b in base):
        raise ConfigError(f"config train.base: a section or a list of sections, not {base!r}")
    return list(base)


def _merge(base: dict, over: dict, path: str = "") -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if k not in base:
            raise ConfigError(f"config: unknown key {path + k!r} (known: {sorted(base)})")
        if isinstance(base[k], dict) and v is not None and not isinstance(v, dict):
            raise ConfigError(f"config {path + k}: a mapping expected, got {v!r}")
        if isinstance(base[k], dict) and isinstance(v, dict) and k not in ("runs", "common", "roots", "settings",
                                                                          "params", "base"):
            out[k] = _merge(base[k], v, f"{path}{k}.")
        else:
            out[k] = v
    return out


def load_config(path: str | Path | None, overrides: dict | None = None) -> dict:
    from data_schemas.config import load_yaml

    data = (load_yaml(path) or {}) if path else {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a mapping of sections expected, got {type(data).__name__}")
    cfg = _merge(DEFAULTS, data)
    if overrides:
        cfg = _merge(cfg, overrides)
    check_sections(cfg)
    return cfg


def key_of(*parts) -> str:
    """A content key: sha256 (16 hex) of JSON-serialised parts (upstream hashes, config, code version)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
