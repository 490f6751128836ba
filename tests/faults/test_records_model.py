"""Faults in the model stages' records (flows/records_model.py): an evaluate stopped before its stage record appends
once when resumed."""
from __future__ import annotations

import pytest

from data_schemas import TABLES, read_table
from tests_support import evaluation


def test_an_evaluate_stopped_before_its_stage_record_appends_once_when_resumed(tmp_path, monkeypatch):
    """The flow's evaluate task killed after the append (before write_stage): the rerun reads its results.json
    back, appends nothing new, and completes the stage."""
    import flows.runner as runner
    import model.benchmarks as benchmarks
    from flows.catalog import Catalog
    from flows.config import EvaluatePlan
    from flows.registry import BY_NAME
    from flows.stage import Call
    from model.benchmarks import EvalConfig

    calls = []

    def fake_evaluate(cfg, roots, run):
        calls.append(run)
        res = evaluation(run)
        res["benchmarks"]["sugarcrepe"]["groups"] = {"avg": 0.5}
        return res

    monkeypatch.setattr(benchmarks, "evaluate", fake_evaluate)
    real_write_stage = runner.write_stage
    monkeypatch.setattr(runner, "write_stage", lambda out, m: (_ for _ in ()).throw(KeyboardInterrupt()))
    out, history = tmp_path / "evaluate" / "k", str(tmp_path / "eval_results")
    run = {"arch": "macco-micro", "export_pt": str(tmp_path / "export.pt")}

    def call() -> Call:
        return Call(EvaluatePlan(probes=False), Catalog(), out, "k", label="macco-s0",
                    extra={"run": run, "eval_config": EvalConfig(), "probe": None, "history": history})

    with pytest.raises(KeyboardInterrupt):
        runner.complete(BY_NAME["evaluate"], call())
    monkeypatch.setattr(runner, "write_stage", real_write_stage)
    done = runner.complete(BY_NAME["evaluate"], call())
    rows = read_table(TABLES["eval_results"], history).to_pylist()
    assert calls == ["macco-s0"] and len(rows) == 3 and {r["eval_id"] for r in rows} == {done["eval_id"]}  # 2 subsets, 1 group
