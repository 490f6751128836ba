"""#28, the user's loop: run the flow, evaluate, re-evaluate as the nightly `reevaluate` deployment does
(`--stages evaluate report --force evaluate`) twice, then read the history with `macco sql`: three dated result
sets for each run, each run by its name; a Cached evaluation adds nothing."""
from __future__ import annotations

import csv
import io
import re
import shlex
from pathlib import Path

import pytest
import yaml

from macco.cli import main
from tests_support import run_flow_states as run

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def sql(capsys, query: str, root: Path) -> list[dict]:
    capsys.readouterr()
    assert main(["sql", query, "--root", str(root), "--csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_forced_reevaluation_adds_dated_sets_and_never_replaces_the_history(harness, tmp_path, capsys):
    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg["artifacts"] = str(tmp_path / "artifacts")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    art = tmp_path / "artifacts"

    run(tmp_path / "c.yaml")  # the whole flow: every model evaluated once
    _, states = run(tmp_path / "c.yaml", stages=["evaluate", "report"])
    assert set(states["evaluate"]) == {"Cached"}
    once = sql(capsys, "select run, count(distinct eval_id) sets from eval_results group by run order by run", art)
    runs = ("tiny/base", "tiny/clip-ft-s0", "tiny/macco-s0")  # the config's name and the run's
    assert once == [{"run": r, "sets": "1"} for r in runs]  # the Cached run added none

    for _ in range(2):  # the reevaluate deployment's parameters
        _, states = run(tmp_path / "c.yaml", stages=["evaluate", "report"], force=["evaluate"])
        assert set(states["evaluate"]) == {"Completed"}
    rows = sql(capsys, "select run, benchmark, subset, accuracy, created, eval_id, checkpoint_sha256, model_id, "
                       "protocol, config_key from eval_results order by created", art)
    by_run: dict[str, set] = {}
    for r in rows:
        by_run.setdefault(r["run"], set()).add((r["created"], r["eval_id"]))
    assert sorted(by_run) == list(runs)
    assert all(len(sets) == 3 and len({c for c, _ in sets}) == 3 for sets in by_run.values()), by_run
    subsets: dict[tuple, list] = {}
    for r in rows:
        subsets.setdefault((r["run"], r["eval_id"]), []).append((r["benchmark"], r["subset"]))
    assert len(subsets) == 9 and len({tuple(sorted(v)) for v in subsets.values()}) == 1  # every set complete
    # the runs are told apart by name and weights; the architecture alone (model_id) would not
    assert {r["model_id"] for r in rows} == {"macco-micro"}
    assert len({r["checkpoint_sha256"] for r in rows}) == 3 and {r["protocol"] for r in rows} == {"authors"}
    # a deterministic evaluation: last night's and tonight's numbers side by side, equal
    first, last = (sql(capsys, f"select run, benchmark, subset, accuracy from eval_results where created = "
                                f"(select {f}(created) from eval_results e where e.run = eval_results.run) "
                                f"order by run, benchmark, subset", art) for f in ("min", "max"))
    assert first == last and first


def test_the_first_hours_tables_and_two_evaluations_in_one_history_validate(tmp_path, monkeypatch, capsys):
    """#47: `macco validate` exited 1 after every evaluation (the history stored ARO's counts, e.g. relations_kept 5,
    as accuracies). The README's first hour, as written, up to its evaluation, a second evaluation appended to the
    same history, then `validate` over everything: exit 0, no accuracy outside [0, 1], the partial groups marked."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index("## A first hour"):], flags=re.S).group(1)
    verbs = ("world --out", "captions", "parse", "ground", "masks", "train", "eval")
    lines = [shlex.split(ln)[1:] for ln in block.splitlines() if ln.startswith(tuple(f"macco {v}" for v in verbs))]
    assert [a[0] for a in lines] == ["world", "captions", "parse", "ground", "masks", "train", "eval"]
    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    for args in lines + [lines[-1][:-1] + ["second-try"]]:  # the eval line again, another run label
        assert main(args) == 0, (args, capsys.readouterr().err[-2000:])
    capsys.readouterr()
    assert main(["validate", "tiny"]) == 0, capsys.readouterr().out[-3000:]
    assert sql(capsys, "select * from eval_results where accuracy > 1 or accuracy < 0", tmp_path / "tiny") == []
    runs = sql(capsys, "select run, count(*) filter (where metric = 'count') counts, count(*) filter (where partial) "
                       "partial from eval_results group by run order by run", tmp_path / "tiny")
    assert [r["run"] for r in runs] == ["first-try", "second-try"] and runs[0] == {**runs[1], "run": "first-try"}
    assert int(runs[0]["counts"]) > 0 and int(runs[0]["partial"]) > 0  # the synthetic world: VALSE is partial
