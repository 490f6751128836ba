"""macco/flags.py: the verbs' flags are derived from the stage configs (defaults, types, choices)."""
from __future__ import annotations

import argparse

import pytest

from data_schemas.config import choices, defaults


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
