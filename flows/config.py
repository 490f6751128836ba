"""The pipeline config (one YAML): sections per stage, unknown keys rejected, content keys per stage."""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import yaml

STAGES = ("world", "captions", "parse", "ground", "masks", "validate", "train", "evaluate", "report")

DEFAULTS: dict = {
    "name": "demo",
    "artifacts": "artifacts",
    "world": {"seed": 0, "images": 1000, "size": 64, "eval_fraction": 0.2},  # used when data.root is null
    "data": None,  # pipeline.stages.CaptionsConfig's fields (filled below: one source for the defaults)
    "parse": None,  # pipeline.stages.ParseConfig's defaults for these keys (filled below)
    "ground": None,  # pipeline.grounding.base.GroundingConfig's defaults for these keys (filled below)
    "masks": {"models": ["ViT-B-32"]},
    "validate": {"params": {}},
    "train": {
        "arch": "ViT-B-32",
        "base": None,  # a training section (or a list: a chain) run first; the last export initialises runs
        "pretrained": None,  # weights file for the fine-tunes when there is no base
        "runs": {"macco": {"mode": "macco"}},  # name -> overrides of `common`
        "seeds": [0],
        "common": {},  # model.train.TrainConfig fields shared by every run
        "torchrun_nproc": 1,  # >1: launch each run under torchrun (DDP)
    },
    "evaluate": {"benchmarks": "all", "roots": {}, "settings": {}, "models": "all",
                 "probes": True,  # on the synthetic world: model.probes for every model
                 "control": "clip-ft"},  # every other model is tested against it (paired McNemar) in the report
    "dask": {"address": None, "local_workers": 0},
}


def _data_defaults() -> dict:
    from dataclasses import asdict

    from pipeline.stages import CaptionsConfig

    d = asdict(CaptionsConfig(root="."))  # root: a placeholder for the check; null means the synthetic world
    return {k: list(v) if isinstance(v, tuple) else v for k, v in {**d, "root": None}.items()}


def _stage_defaults(config, keys: tuple[str, ...], **own) -> dict:
    """The stage config dataclass's defaults for the flow section's ``keys`` (one source for each default), plus
    the flow's own settings ``own``."""
    return {**{k: getattr(config, k) for k in keys}, **own}


def _parse_ground_defaults() -> tuple[dict, dict]:
    from pipeline.grounding.base import GroundingConfig
    from pipeline.stages import ParseConfig

    parse = _stage_defaults(ParseConfig, ("parser", "spacy_model", "clip_model", "n_process", "shard_size"))
    ground = _stage_defaults(GroundingConfig, ("backend", "box_threshold", "text_threshold", "checkpoint",
                                               "config_file", "bert_dir", "model_dir", "device", "batch_size"),
                             shard_size=500)
    return parse, ground


DEFAULTS["data"] = _data_defaults()
DEFAULTS["parse"], DEFAULTS["ground"] = _parse_ground_defaults()


def _merge(base: dict, over: dict, path: str = "") -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if k not in base:
            raise ValueError(f"config: unknown key {path + k!r} (known: {sorted(base)})")
        if isinstance(base[k], dict) and isinstance(v, dict) and k not in ("runs", "common", "roots", "settings",
                                                                          "params", "base"):
            out[k] = _merge(base[k], v, f"{path}{k}.")
        else:
            out[k] = v
    return out


def load_config(path: str | Path | None, overrides: dict | None = None) -> dict:
    data = {}
    if path:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"{p}: config file not found")
        data = yaml.safe_load(p.read_text()) or {}
    cfg = _merge(DEFAULTS, data)
    if overrides:
        cfg = _merge(cfg, overrides)
    return cfg


def key_of(*parts) -> str:
    """A content key: sha256 (16 hex) of JSON-serialised parts (upstream hashes, config, code version)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
