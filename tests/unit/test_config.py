"""Typed stage configs (``data_schemas.config``): one ``from_dict`` for YAML sections, overrides and CLI flags; every
default in one dataclass; bounded YAML and bounded error messages."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from data_schemas.config import choices, from_dict


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
