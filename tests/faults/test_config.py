"""Faults in reading configs (data_schemas/config.py): a string-amplifying alias bomb (under the value cap), a deeply
nested YAML file or ``key=[[[...]]]`` override, an alias inside the node it names — each one line before any stage."""
from __future__ import annotations

import pytest

from data_schemas.config import ConfigError, load_yaml
from macco.cli import main


def last_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err) < 400, err[-2000:]
    return err.strip().splitlines()[-1]


def test_a_string_amplifying_alias_bomb_is_refused_before_any_stage(tmp_path, capsys, monkeypatch):
    """One 200 KB string x 50,000 aliases is 50,001 values (under the 100,000 cap) and 10 GB of text: json.dumps in
    the flow's stage keys took ~10 GB after the world stage had run."""
    monkeypatch.chdir(tmp_path)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(f"big: &s {'x' * 200_000}\nvalidate:\n  params:\n    bomb: [{', '.join(['*s'] * 50_000)}]\n")
    with pytest.raises(ConfigError, match=r"bomb.yaml: the YAML expands to more than 16,777,216 bytes of text"):
        load_yaml(bomb)
    assert main(["run", "--config", str(bomb)]) == 2
    assert "expands to more than 16,777,216 bytes of text" in last_line(capsys)
    assert not (tmp_path / "artifacts").exists()  # nothing ran


def test_deep_nesting_in_a_file_an_override_or_through_an_alias_is_one_line(tmp_path, capsys):
    """`[[[...]]]` 2,000 deep, in a file or a `macco train key=value` override, was a RecursionError traceback."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("train:\n  tables: " + "[" * 2000 + "]" * 2000 + "\n")
    with pytest.raises(ConfigError, match=r"deep.yaml: line 2: nested deeper than 64 levels"):
        load_yaml(deep)
    assert main(["train", "tables=" + "[" * 3000 + "]" * 3000]) == 2
    assert "macco train: override tables: line 1: nested deeper than 64 levels" in last_line(capsys)
    (tmp_path / "cycle.yaml").write_text("train:\n  tables: &a [*a]\n")
    with pytest.raises(ConfigError, match=r"cycle.yaml: line 2: nested deeper than 64 levels once its aliases"):
        load_yaml(tmp_path / "cycle.yaml")
    (tmp_path / "ok.yaml").write_text("a: " + "[" * 60 + "1" + "]" * 60 + "\n")  # deep, but within the bound
    assert load_yaml(tmp_path / "ok.yaml")["a"][0][0][0]
