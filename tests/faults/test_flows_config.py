"""Faults in the flow config (flows/config.py): config errors are one line from the CLI."""
from __future__ import annotations

import pytest

from macco.cli import main
from tests_support import one_line_error


def test_flow_config_errors_are_one_line_from_the_cli(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntrain:\n  common: {batch_size: 0}\n")
    assert main(["run", "--config", str(bad)]) == 2
    assert "config train.common batch_size: 0 must be > 0" in one_line_error(capsys, "run")
    bad.write_text("name: x\ntrain:\n  seeds: [0]\nworld: {seed: 1}\ntrain:\n  seeds: [1]\n")  # a section twice
    assert main(["run", "--config", str(bad)]) == 2
    assert "line 5: key 'train' is written twice" in one_line_error(capsys, "run")
    bad.write_text("train: {seeds: [0, 0]}\n")
    assert main(["run", "--config", str(bad)]) == 2
    assert "train.seeds" in one_line_error(capsys, "run")
    assert main(["run", "--config", str(bad), "--stages", "evaluat"]) == 2
    assert "unknown stage(s) ['evaluat']" in one_line_error(capsys, "run")
    (tmp_path / "t.yaml").write_text("train: {batch_size: 8}\ntrain: {batch_size: 16}\n")
    assert main(["train", "--config", str(tmp_path / "t.yaml")]) == 2
    assert "written twice" in one_line_error(capsys, "train")


@pytest.mark.parametrize("seeds", [[-1], [0, -3]])
def test_a_runs_own_negative_seed_is_one_line_as_the_flows_is(seeds):
    from data_schemas.config import ConfigError
    from flows.config import train_plan

    with pytest.raises(ConfigError, match=r"train.runs.m.seeds: .* integers >= 0"):
        train_plan({"runs": {"m": {"mode": "macco", "seeds": seeds}}})
