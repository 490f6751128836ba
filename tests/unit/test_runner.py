"""flows/runner.py: the guarantees the runner owns for the flow and the verbs — the done rule (a damaged stage
record named and redone), one lock per output (a second writer fails at once), nothing written outside the folder
given, a file where a table goes never replaced."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_schemas import TableError
from flows.catalog import Catalog
from flows.runner import (STAGE_FILE, Runner, StageLocked, output_lock, read_stage, run_in_folder, stage_done,
                          write_stage)
from flows.stage import Stage, roots
from tests_support import without_logging_errors

REPO = Path(__file__).resolve().parents[2]


def counting_stage(calls: list) -> Stage:
    """A stand-in for the world stage: writes one file, counts its runs."""
    def run(call):
        calls.append(call.out)
        call.out.mkdir(parents=True, exist_ok=True)
        (call.out / "f.txt").write_text("x")
        return {"files": [str(call.out / "f.txt")], "outputs": {"source": {"kind": "folder", "dir": str(call.out),
                                                                           "content_hash": "h"}}}

    return Stage("world", "world", (), ("source",), roots("pipeline.world"), run)


def test_a_damaged_stage_record_is_named_and_the_stage_redone(tmp_path):
    """A truncated stage.json stopped every later run with a JSONDecodeError naming no file, and the stage was
    never redone."""
    calls, lines = [], []
    runner = Runner(tmp_path / "art", ["world"], log=lines.append)
    stage = counting_stage(calls)
    m = runner.run(stage, {"seed": 0}, Catalog())
    out = Path(m["dir"])
    assert stage_done(out) and len(calls) == 1
    runner.run(stage, {"seed": 0}, Catalog())
    assert len(calls) == 1  # done: read back
    (out / STAGE_FILE).write_text('{"stage": "wor')  # truncated
    with pytest.raises(TableError, match=rf"{out / STAGE_FILE}: the stage record is damaged"):
        read_stage(out)
    assert not stage_done(out, lines.append)
    runner.run(stage, {"seed": 0}, Catalog())
    assert len(calls) == 2 and stage_done(out)  # redone
    assert any(str(out) in line and "not done, redone" in line for line in lines)
    (out / STAGE_FILE).write_text("[1, 2]")  # valid JSON, not a record
    assert not stage_done(out, lines.append)


def test_a_stage_not_selected_whose_record_is_damaged_is_missing_in_one_line(tmp_path):
    from flows.runner import StageMissing

    calls = []
    stage = counting_stage(calls)
    m = Runner(tmp_path / "art", ["world"], log=lambda line: None).run(stage, {"seed": 0}, Catalog())
    (Path(m["dir"]) / STAGE_FILE).write_bytes(b"\xff\xfe")
    with pytest.raises(StageMissing, match="stage 'world' is not selected and has no complete output"):
        Runner(tmp_path / "art", ["captions"], log=lambda line: None).run(stage, {"seed": 0}, Catalog())


def hold_lock(lock: Path, what: Path) -> subprocess.Popen:
    """Another process holding ``output_lock(lock, what)`` for a minute (killed by the caller)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from pathlib import Path; from flows.runner import output_lock\n"
        f"with output_lock(Path({str(lock)!r}), Path({str(what)!r})):\n"
        "    print('locked', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_writer_of_one_output_fails_at_once_naming_the_holder(tmp_path):
    lock, what = tmp_path / ".locks" / "x.lock", tmp_path / "out"
    holder = hold_lock(lock, what)
    try:
        with pytest.raises(StageLocked, match=rf"{what}: another macco process is writing it \(pid {holder.pid} "):
            with output_lock(lock, what):
                pass
    finally:
        holder.kill()
        holder.wait()
    with output_lock(lock, what):  # released with its process
        pass


def test_two_macco_train_into_one_out_dir_the_second_fails_at_once(tmp_path, capsys):
    """Two `macco train` into one out_dir interleaved: every step twice in metrics.csv, and the second died on a
    shared temporary file. The train verb locks its out_dir for the whole run."""
    import yaml

    from macco.cli import main

    out = tmp_path / "run"
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"train": {"arch": "macco-micro", "out_dir": str(out)}}))
    holder = hold_lock(tmp_path / ".run.output.lock", out)
    try:
        assert main(["train", "--config", str(tmp_path / "t.yaml")]) == 2
        err = without_logging_errors(capsys.readouterr().err)
        assert f"macco train: {out}: another macco process is writing it (pid {holder.pid}" in err
        assert len(err.strip().splitlines()) == 1 and not out.exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_file_where_a_table_goes_is_refused_before_any_work_and_left_alone(world, tmp_path, capsys):
    """A regular file named `captions` in --out was moved aside and replaced by a folder."""
    from macco.cli import main

    out = tmp_path / "T"
    out.mkdir()
    (out / "captions").write_text("my notes")
    assert main(["captions", str(world), "--out", str(out)]) == 2
    err = without_logging_errors(capsys.readouterr().err)
    assert f"{out / 'captions'}: is a file, not a table folder; refusing to replace it" in err
    assert (out / "captions").read_text() == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["captions"]


def test_a_results_table_that_is_a_file_is_refused_and_left_alone(tmp_path):
    from model.benchmarks import EvalConfig, append_results

    afile = tmp_path / "afile"
    afile.write_text("keep")
    res = {"eval_id": "e", "run": "r", "model": "m", "checkpoint_sha256": "", "code_version": "", "created": "2026-12-04T00:00:00.000000Z",
           "benchmarks": {"b": {"subsets": {"s": {"n": 1, "correct": 1, "accuracy": 1.0}}}}}
    with pytest.raises(TableError, match="is a file, not a table folder"):
        append_results(afile, res, EvalConfig())
    assert afile.read_text() == "keep"


def test_a_verb_writes_only_into_its_out_folder(world, tmp_path):
    """The tables and their lock files inside the --out folder; nothing elsewhere."""
    from flows.catalog import Catalog
    from pipeline.captions_stage import CaptionsConfig

    before = set(tmp_path.iterdir())
    run_in_folder("captions", CaptionsConfig(root=str(world)), Catalog(), tmp_path / "T", log=lambda line: None)
    new = set(tmp_path.iterdir()) - before
    assert {p.name for p in new} == {"T"}
    assert sorted(p.name for p in (tmp_path / "T").iterdir() if not p.name.startswith(".")) == ["captions", "errors"]


def test_write_stage_records_file_sizes_and_done_checks_them(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    assert not stage_done(out)
    (out / "f.txt").write_text("x")
    write_stage(out, {"files": [str(out / "f.txt")], "outputs": {}})
    assert stage_done(out) and json.loads((out / STAGE_FILE).read_text())["file_bytes"]
    (out / "f.txt").write_text("xx")  # resized
    assert not stage_done(out)
    write_stage(out, {"outputs": {"captions": {"kind": "table", "dir": str(out / "captions")}}})
    assert not stage_done(out)  # a table it lists is not complete


@pytest.mark.e2e
def test_two_runs_of_a_small_flow_are_byte_identical_and_each_stage_is_served_what_it_reads(tmp_path):
    """The tiny flow run twice (in-process executor) into two artifacts folders: every table, export and report is
    the same bytes; and each stage's run was handed exactly the outputs it declares (its reads; an optional one
    when some stage wrote it) — a record that read anything else would fail on its catalog."""
    import yaml

    from flows.config import load_config
    from flows.registry import BY_NAME
    from flows.runner import LocalExecutor

    served: dict[str, set] = {}

    class Recording(LocalExecutor):
        def execute(self, stage, call, refresh):
            served.setdefault(stage.name, set()).update(call.inputs.entries)
            if call.inputs.errors:
                served[stage.name].add("errors")
            return super().execute(stage, call, refresh)

    outs = []
    for name in ("a", "b"):
        cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
        cfg["artifacts"] = str(tmp_path / name)
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        outs.append(Runner(cfg["artifacts"], executor=Recording(), log=lambda line: None).run_dag(
            load_config(tmp_path / f"{name}.yaml")))
    a, b = outs

    def fingerprint(out: dict) -> dict:
        tables = {f"{s}.{t}": e["content_hash"] for s in ("world", "captions", "parse", "ground", "masks")
                  for t, e in out[s]["outputs"].items() if e.get("content_hash")}
        exports = {r["name"]: r["content_hash"] for runs in out["train"].values() for r in runs}
        scores = {r["label"]: json.loads(Path(r["results"]).read_text())["benchmarks"]
                  for runs in out["evaluate"].values() for r in runs}
        return {"tables": tables, "exports": exports, "scores": json.dumps(scores, sort_keys=True, default=str),
                "report": Path(out["report"]["markdown"]).read_text()}

    fa, fb = fingerprint(a), fingerprint(b)
    assert fa["tables"] == fb["tables"] and len(fa["tables"]) >= 10
    assert fa["exports"] == fb["exports"] and len(fa["exports"]) == 3  # the base, clip-ft, macco
    assert fa["report"] == fb["report"]
    written = {"runs", "evaluations"} | {n for s in ("world", "captions", "parse", "ground", "masks", "validate")
                                         for n in a[s]["outputs"]}
    for stage, names in served.items():
        declared = {r.rstrip("?") for r in BY_NAME[stage].reads if not r.endswith("?") or r.rstrip("?") in written}
        assert names == declared, stage
    assert set(served) == {"world", "captions", "parse", "ground", "masks", "validate", "train", "evaluate", "report"}


def test_a_file_in_the_way_of_a_stage_folder_is_one_line_before_any_work(tmp_path):
    """`artifacts/world` a regular file: the world stage died on NotADirectoryError inside its temporary folder."""
    from data_schemas import InputFileError

    calls: list = []
    art = tmp_path / "art"
    art.mkdir()
    (art / "world").write_text("not a folder")
    with pytest.raises(InputFileError, match=rf"{art / 'world'}: is a file, not a folder"):
        Runner(art, ["world"], log=lambda line: None).run(counting_stage(calls), {"seed": 0}, Catalog())
    assert calls == [] and (art / "world").read_text() == "not a folder"


def test_a_single_stage_run_without_its_upstream_fails_with_one_line(harness, tmp_path, capsys):
    """The reevaluate deployment on a config that was never trained: one line naming the missing stage (the
    flow run's message; `macco run` prints it, exit 2), no traceback."""
    import yaml

    from flows.pipeline import StageMissing, macco_pipeline

    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg["artifacts"] = str(tmp_path / "artifacts")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    state = macco_pipeline(config=str(tmp_path / "c.yaml"), stages=["evaluate", "report"], force=["evaluate"],
                           return_state=True)
    assert state.is_failed() and "\n" not in state.message
    assert state.message.startswith("stage 'world' is not selected and has no complete output")
    # every stage it lacks named at once, not one retry at a time
    assert "(and the stages after it that are not selected: captions, parse, ground, masks, validate, " \
           "train); run them first" in state.message
    with pytest.raises(StageMissing):
        state.result()


def table_stage(calls: list) -> Stage:
    """A stand-in for a table stage: writes one errors table, counts its runs."""
    from data_schemas import TABLES, write_table
    from flows.catalog import table_entry
    from tests_support import error_rows

    def run(call):
        calls.append(call.out)
        m = write_table(TABLES["errors"], call.out / "errors", TABLES["errors"].from_rows(error_rows(2)))
        return {"outputs": {"errors": table_entry(m, call.out / "errors")}}

    return Stage("captions", "data", (), ("errors",), roots("pipeline.captions_stage"), run)


def test_a_copied_artifacts_folder_whose_tables_were_deleted_is_redone_not_served_the_originals(tmp_path):
    """#47: stage.json named absolute paths, so a copy of artifacts/ (an absolute `artifacts:` setting) whose tables
    were deleted read the original's and reported every stage Cached. Its paths are relative to artifacts/ now."""
    import shutil

    calls = []
    stage = table_stage(calls)
    m = Runner(tmp_path / "art", ["captions"], log=lambda line: None).run(stage, {"n": 1}, Catalog())
    assert "$ARTIFACTS/captions/" in (Path(m["dir"]) / STAGE_FILE).read_text()
    shutil.copytree(tmp_path / "art", tmp_path / "copy")
    out = tmp_path / "copy" / Path(m["dir"]).relative_to(tmp_path / "art")
    assert read_stage(out)["outputs"]["errors"]["dir"] == str(out / "errors")  # the copy's own table
    shutil.rmtree(out / "errors")
    assert not stage_done(out, lambda line: None)
    again = Runner(tmp_path / "copy", ["captions"], log=lambda line: None).run(stage, {"n": 1}, Catalog())
    assert len(calls) == 2 and again["outputs"]["errors"]["dir"] == str(out / "errors") and stage_done(out)
