"""Faults in the evaluation history (data_schemas/eval_results.py): tables of earlier schema versions are read in the
view and upgraded with every row; the history holds group averages, a timestamp and its trigger."""
from __future__ import annotations

from data_schemas import TABLES, read_table, write_table
from macco.cli import main
from tests_support import evaluation


def test_a_version_1_table_is_upgraded_with_its_rows_and_read_in_the_view(tmp_path, capsys):
    """A history written before the run/eval_id columns keeps its rows: appended to, every old row is carried
    into the new schema; read by `macco sql` as it is, its rows appear with run = its model_id."""
    from data_schemas.eval_results import LEGACY_SPEC
    from model.benchmarks import EvalConfig, append_results

    old = [dict(benchmark="sugarcrepe", subset="swap_att", model_id="old-model", n=10, correct=7, accuracy=0.7,
                ties=0, missing_images=0, checkpoint_sha256="abc", config='{"protocol": "authors"}',
                created="2026-01-01T00:00:00Z")]
    write_table(LEGACY_SPEC, tmp_path / "legacy" / "eval_results", LEGACY_SPEC.from_rows(old))
    write_table(LEGACY_SPEC, tmp_path / "upgraded" / "eval_results", LEGACY_SPEC.from_rows(old))
    assert main(["sql", "select run, protocol, accuracy from eval_results", "--root", str(tmp_path / "legacy"),
                 "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["old-model,authors,0.7"]
    append_results(tmp_path / "upgraded" / "eval_results", evaluation("new"), EvalConfig())
    rows = read_table(TABLES["eval_results"], tmp_path / "upgraded" / "eval_results").to_pylist()
    assert sorted(r["run"] for r in rows) == ["new", "new", "old-model"]


def test_the_history_holds_group_averages_a_timestamp_and_what_triggered_it(tmp_path, capsys):
    """`created` was a string, the report's group averages were not in the history, and nothing told a scheduled
    re-evaluation from a manual one but the time. A version-2 table is read and upgraded with every row."""
    from data_schemas.eval_results import V2_SPEC
    from model.benchmarks import EvalConfig, append_results

    table = tmp_path / "eval_results"
    old = [dict(eval_id="e0", run="old", benchmark="sugarcrepe", subset="s0", model_id="m", n=10, correct=5,
                accuracy=0.5, ties=0, missing_images=0, checkpoint_sha256="x", config="{}", config_key="k",
                protocol="authors", activation="gelu", code_version="c", created="2026-12-01T00:00:00.000000Z")]
    write_table(V2_SPEC, table, V2_SPEC.from_rows(old))
    assert main(["sql", "select typeof(created) t, level, trigger from eval_results", "--root", str(table),
                 "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "TIMESTAMP WITH TIME ZONE,subset,"  # v2 in the view
    ev = evaluation("macco-s0")
    ev["benchmarks"]["sugarcrepe"]["groups"] = {"relation": 0.25}
    ev["benchmarks"]["sugarcrepe"]["cases"] = {"relation": "1000x"}
    append_results(table, ev, EvalConfig(), trigger="flow run calm-fox, deployment reevaluate")
    rows = read_table(TABLES["eval_results"], table).to_pylist()
    assert len(rows) == 4 and {r["run"] for r in rows} == {"old", "macco-s0"}  # upgraded, every row kept
    [group] = [r for r in rows if r["level"] == "group"]
    assert (group["subset"], group["n"], group["accuracy"], group["missing_images"]) == ("relation", 4, 0.25, 1)
    assert group["trigger"] == "flow run calm-fox, deployment reevaluate" and group["created"].year == 2026
    assert main(["sql", "select run, level from eval_results order by created desc limit 1", "--root", str(table),
                 "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("macco-s0,")  # the newest first, by time


def test_a_version_1_rows_null_protocol_reads_the_same_upgraded_and_in_the_view(tmp_path, capsys):
    """The view maps a null protocol to '' and the upgrade wrote 'None': one history, two spellings."""
    from data_schemas.eval_results import LEGACY_SPEC, upgrade_v1

    old = [dict(benchmark="aro", subset="vg_relation", model_id="m", n=1, correct=1, accuracy=1.0, ties=0,
                missing_images=0, checkpoint_sha256="s", config='{"protocol": null, "activation": null}',
                created="2026-01-01T00:00:00Z")]
    write_table(LEGACY_SPEC, tmp_path / "eval_results", LEGACY_SPEC.from_rows(old))
    assert main(["sql", "select protocol, activation from eval_results", "--root", str(tmp_path), "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [","]
    [row] = upgrade_v1(LEGACY_SPEC.from_rows(old)).to_pylist()
    assert (row["protocol"], row["activation"]) == ("", "")
