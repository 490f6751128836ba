"""The pipeline config (one YAML): sections per stage, unknown keys rejected, content keys per stage."""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from data_schemas.config import ConfigError

STAGES = ("world", "captions", "tokenizer", "parse", "ground", "masks", "validate", "train", "evaluate", "report")


def _defaults() -> dict:
    """The flow config's defaults. Every stage setting's default is its stage config dataclass's (one source);
    the flow's own keys (which runs, seeds, shard sizes of the mapped stages, roots) are set here."""
    from dataclasses import asdict

    from data_schemas.config import defaults
    from model.train_config import TrainConfig
    from pipeline.grounding.base import GroundingConfig
    from pipeline.siglip_folder import TokenizerConfig
    from pipeline.stages import CaptionsConfig, ParseConfig
    from pipeline.world import WorldConfig

    def pick(config, *keys, **own) -> dict:
        d = defaults(config)
        return {**{k: list(d[k]) if isinstance(d[k], tuple) else d[k] for k in keys}, **own}

    data = asdict(CaptionsConfig(root="."))  # root: a placeholder for the check; null means the synthetic world
    return {
        "name": "demo",
        "artifacts": "artifacts",
        "world": pick(WorldConfig, "seed", "images", "size", "eval_fraction"),  # used when data.root is null
        "data": {k: list(v) if isinstance(v, tuple) else v for k, v in {**data, "root": None}.items()},
        "tokenizer": pick(TokenizerConfig, "arch", "vocab_size", "context_length", "clean"),
        "parse": pick(ParseConfig, "parser", "spacy_model", "clip_model", "n_process", "shard_size"),
        "ground": pick(GroundingConfig, "backend", "box_threshold", "text_threshold", "checkpoint", "config_file",
                       "bert_dir", "model_dir", "device", "batch_size", "shard_size"),
        "masks": {"models": [TrainConfig.arch]},  # the architectures whose patch grids to write
        "validate": {"params": {}},
        "train": {
            "arch": TrainConfig.arch,
            "base": None,  # a training section (or a list: a chain) run first; the last export initialises runs
            "pretrained": None,  # weights file for the fine-tunes when there is no base
            "runs": {"macco": {"mode": "macco"}},  # name -> overrides of `common`
            "seeds": [0],
            "common": {},  # model.train.TrainConfig fields shared by every run
            "torchrun_nproc": 1,  # >1: launch each run under torchrun (DDP)
        },
        "evaluate": {"benchmarks": "all", "roots": {}, "settings": {}, "models": "all",  # settings: EvalConfig's
                     "probes": True,  # on the synthetic world: model.probes for every model
                     "control": "clip-ft"},  # every other model is tested against it (paired McNemar) in the report
        "dask": {"address": None, "local_workers": 0},
    }


DEFAULTS: dict = _defaults()


def check_sections(cfg: dict) -> None:
    """Every stage section through its config dataclass's ``from_dict``: an unknown key, a wrong type or a value
    outside an option's choices fails when the config is read, naming the key — not when the stage starts."""
    from data_schemas.config import from_dict
    from model.benchmarks import EvalConfig
    from model.train_config import TrainConfig
    from pipeline.grounding.base import GroundingConfig
    from pipeline.siglip_folder import TokenizerConfig
    from pipeline.stages import CaptionsConfig, ParseConfig
    from pipeline.world import WorldConfig

    from_dict(WorldConfig, cfg["world"], "config world")
    data = cfg["data"]
    placeholder = {"root": "."} if data["source"] == "coco" and data["root"] is None else {}  # the world's
    from_dict(CaptionsConfig, {**data, **placeholder}, "config data")
    from_dict(TokenizerConfig, cfg["tokenizer"], "config tokenizer")
    _check_tokenizers(cfg)
    from_dict(ParseConfig, cfg["parse"], "config parse")
    from_dict(GroundingConfig, cfg["ground"], "config ground")
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
    _check_plan(cfg)


def _is_int(v, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _check_plan(cfg: dict) -> None:
    """The flow's own keys (which runs and seeds, processes, what to evaluate): types and ranges."""
    from model.benchmarks.registry import BENCHMARKS

    train, ev = cfg["train"], cfg["evaluate"]
    if not isinstance(train["runs"], dict) or not all(isinstance(r, dict) for r in train["runs"].values()):
        raise ConfigError(f"config train.runs: a mapping of run name -> training section, not {train['runs']!r}")
    for where, seeds in [("train.seeds", train["seeds"]),
                         *((f"train.runs.{n}.seeds", r["seeds"]) for n, r in train["runs"].items() if "seeds" in r)]:
        if not isinstance(seeds, list) or not seeds or not all(_is_int(x, 0) for x in seeds) \
                or len(set(seeds)) != len(seeds):
            raise ConfigError(f"config {where}: {seeds!r}: a non-empty list of distinct integers >= 0 expected")
    for where, value, low in (("train.torchrun_nproc", train["torchrun_nproc"], 1),
                              ("dask.local_workers", cfg["dask"]["local_workers"], 0)):
        if not _is_int(value, low):
            raise ConfigError(f"config {where}: {value!r} must be an integer >= {low}")
    if ev["benchmarks"] != "all" and (not isinstance(ev["benchmarks"], list)
                                      or not set(ev["benchmarks"]) <= set(BENCHMARKS)):
        raise ConfigError(f"config evaluate.benchmarks: {ev['benchmarks']!r}: 'all' or a list of {list(BENCHMARKS)}")
    if ev["models"] != "all" and not isinstance(ev["models"], list):
        raise ConfigError(f"config evaluate.models: {ev['models']!r}: 'all' or a list of run names")
    if not isinstance(ev["probes"], bool):
        raise ConfigError(f"config evaluate.probes: {ev['probes']!r} must be true or false")


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
