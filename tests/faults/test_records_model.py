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



def test_run_labels_are_unique_per_config_in_a_shared_history(tmp_path, monkeypatch):
    """#48 item 10: two configs sharing artifacts/ (each its own clip-ft run) appended rows labelled clip-ft-s0
    both: `where run = 'clip-ft-s0'` mixed two models. A run's label is the config's name and the run's."""
    import model.benchmarks as benchmarks
    from flows.config import load_config
    from flows.registry import BY_NAME
    from flows.runner import Plan, Runner
    from tests_support import tiny_flow_config

    def fake_evaluate(cfg, roots, run):
        res = evaluation(run)
        res["benchmarks"]["sugarcrepe"]["groups"] = {"avg": 0.5}
        return res

    monkeypatch.setattr(benchmarks, "evaluate", fake_evaluate)
    art = tmp_path / "artifacts"
    for name in ("first", "second"):
        c = load_config(tiny_flow_config(tmp_path / name, name=name, evaluate={"roots": {"sugarcrepe": "sc"}, "probes": False}))
        plan = Plan(c)
        export = tmp_path / name / "export.pt"
        export.write_bytes(name.encode())  # each config's own model
        plan.catalog.entries["runs"] = {"kind": "runs", "content_hash": name, "runs": {"clip-ft": [
            {"kind": "run", "name": "clip-ft-s0", "export_pt": str(export), "content_hash": name,
             "arch": "macco-micro", "checkpoint": None}]}}
        BY_NAME["evaluate"].drive(BY_NAME["evaluate"], plan, Runner(art, log=lambda line: None))
    rows = read_table(TABLES["eval_results"], art / "eval_results").to_pylist()
    assert sorted({r["run"] for r in rows}) == ["first/clip-ft-s0", "second/clip-ft-s0"]
