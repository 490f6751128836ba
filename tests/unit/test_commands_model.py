"""macco/commands_model.py: ``macco eval`` without weights is refused; the world's settings apply unless a flag says
otherwise."""
from __future__ import annotations

import json

from macco.cli import main
from tests_support import one_line_error


def test_eval_without_weights_is_refused_and_the_worlds_settings_apply(world, tmp_path, capsys):
    """`macco eval` without --checkpoint scored a randomly initialised model and exited 0; outside the flow
    --vga-min-count defaulted to 25 (the flow: 5), so on a small world VG-Attribution vanished and the report said
    no case was scored although 8 were."""
    assert main(["eval", "--model", "macco-micro", "--benchmark", "aro-vga", "--world", str(world)]) == 2
    assert "no --checkpoint for macco-micro: that would evaluate a randomly initialised model" in \
        one_line_error(capsys, "eval")
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vga", "--world", str(world),
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["benchmarks"]["aro-vga"]["groups"]["min_count"] == 5  # the world's setting
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vga", "--world", str(world),
                 "--vga-min-count", "2", "--out", str(out)]) == 0  # an explicit flag wins
    assert json.loads(out.read_text())["benchmarks"]["aro-vga"]["groups"]["min_count"] == 2


def test_eval_writes_its_results_file_through_the_runner(world, tmp_path, capsys):
    """``macco eval`` runs the evaluate stage's record through ``run_in_folder``: its --out file is locked (another
    writer holding it: one line, exit 2, before any model loads, nothing written) and a folder there is refused;
    then the same record writes the file and appends the history."""
    from data_schemas import TABLES, lock_file, read_table
    from data_schemas.locks import output_lock

    out, history = tmp_path / "res" / "r.json", tmp_path / "hist"
    args = ["eval", "--model", "macco-micro", "--random-init", "--benchmark", "whatsup", "--world", str(world),
            "--results-table", str(history), "--run", "mine"]
    with output_lock(lock_file(out, "output"), out):
        assert main([*args, "--out", str(out)]) == 2
    assert f"{out}: another macco process is writing it" in one_line_error(capsys, "eval")
    assert not out.exists() and not history.exists()
    (tmp_path / "res" / "d.json").mkdir()
    assert main([*args, "--out", str(tmp_path / "res" / "d.json")]) == 2
    assert "is a folder, not a file" in one_line_error(capsys, "eval")
    assert main([*args, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["run"] == "mine" and "label" not in res and list(res["benchmarks"]) == ["whatsup"]
    rows = read_table(TABLES["eval_results"], history).to_pylist()
    assert {r["eval_id"] for r in rows} == {res["eval_id"]} and {r["trigger"] for r in rows} == {"macco eval"}
    assert "whatsup" in capsys.readouterr().out
