"""Faults at the stage runner (flows/runner.py): a stage whose listed files are gone is not done, a second writer of
a stage fails with a message, read-only outputs are one line before any work."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from macco.cli import main
from tests_support import one_line_error, run_flow_states, tiny_flow_config as config
from unit.test_runner import counting_stage


def test_a_stage_whose_listed_files_are_gone_or_resized_is_not_done(tmp_path):
    """The world's manifest listed no files: with every training image deleted, world came back Cached."""
    from flows.records_data import FILE_LIST
    from flows.runner import STAGE_FILE, stage_done, write_stage

    out = tmp_path / "world"
    (out / "train2014").mkdir(parents=True)
    for i in range(3):
        (out / "train2014" / f"{i}.jpg").write_bytes(b"x" * (10 + i))
    listing = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    (out / FILE_LIST).write_text(json.dumps(listing))
    write_stage(out, {"stage": "world", "content_hash": "h", "file_list": FILE_LIST})
    assert stage_done(out)
    (out / "train2014" / "1.jpg").write_bytes(b"y" * 11)  # same size: still done (sizes, not content)
    assert stage_done(out)
    (out / "train2014" / "1.jpg").write_bytes(b"y" * 99)  # resized
    assert not stage_done(out)
    (out / "train2014" / "1.jpg").write_bytes(b"x" * 11)
    shutil.rmtree(out / "train2014")
    assert not stage_done(out) and (out / STAGE_FILE).exists()


@pytest.mark.e2e
def test_a_second_writer_of_a_stage_fails_with_a_message(harness, tmp_path):
    from flows.config import load_config
    from flows.pipeline import StageLocked, macco_pipeline
    from flows.registry import BY_NAME
    from flows.runner import output_lock
    from flows.stage import stage_key

    cfg = config(tmp_path)
    c = load_config(cfg)
    key = stage_key(BY_NAME["world"], [], c.world)
    art = Path(c.artifacts)
    lock = art / "world" / f".{key}.output.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from flows.runner import output_lock\n"
        f"with output_lock(Path({str(lock)!r}), Path({str(art / 'world' / key)!r})):\n"
        "    print('locked', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StageLocked, match=rf"world/{key}: another macco process is writing it \(pid "
                                              rf"{holder.pid} "):
            macco_pipeline(config=str(cfg), stages=["world"])
        assert not (art / "world" / key).exists()
    finally:
        holder.kill()
        holder.wait()
    out, states = run_flow_states(cfg, stages=["world"])  # released: the stage runs
    assert states["world"] == ["Completed"]
    with output_lock(lock, art / "world" / key):  # and the lock is free again afterwards
        pass


@pytest.mark.e2e
def test_deleted_world_images_are_not_served_cached(harness, tmp_path):
    """#28: the world stage's manifest listed no files: with every training image deleted, world through masks
    came back Cached and validate passed. Now the world is regenerated (same content, so downstream stays
    Cached) and the images are back."""
    import shutil

    cfg = config(tmp_path)
    stages = ["world", "captions", "parse", "ground", "masks", "validate"]
    out, _ = run_flow_states(cfg, stages=stages)
    images = Path(out["world"]["dir"]) / "train2014"
    n = len(list(images.iterdir()))
    shutil.rmtree(images)
    out2, states = run_flow_states(cfg, stages=stages)
    assert states["world"] == ["Completed"] and len(list(images.iterdir())) == n
    assert out2["world"]["outputs"]["source"]["content_hash"] == out["world"]["outputs"]["source"]["content_hash"]
    assert all(set(states[s]) == {"Cached"} for s in ("captions", "parse", "ground", "masks")), states


def test_read_only_outputs_are_one_line_before_any_work(world, tmp_path, capsys, monkeypatch):
    """Every writer ended in an `OSError [Errno 30]` traceback, and `macco eval --results-table` ran the whole
    evaluation before failing at the lock, losing the work."""
    import model.benchmarks as benchmarks
    from tests_support import read_only_folder

    with read_only_folder(tmp_path / "ro") as ro:
        assert main(["captions", str(world), "--out", str(ro / "T")]) == 2
        assert f"{ro / 'T'}: cannot write here ({ro} is read-only" in one_line_error(capsys, "captions")
        monkeypatch.setattr(benchmarks, "load_encoder", lambda cfg: pytest.fail("evaluated before checking"))
        assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vgr", "--world", str(world),
                     "--results-table", str(ro / "eval_results")]) == 2
        assert "eval_results: cannot write here" in one_line_error(capsys, "eval")
        assert main(["world", "--out", str(ro / "w"), "--images", "4"]) == 2
        assert "cannot write here" in one_line_error(capsys, "world")
        (tmp_path / "c.yaml").write_text(f"artifacts: {ro / 'artifacts'}\nworld: {{images: 4}}\n")
        import subprocess
        import sys

        from tests_support import prefect_env

        r = subprocess.run([sys.executable, "-m", "macco.cli", "run", "--config", str(tmp_path / "c.yaml"),
                            "--stages", "world"], capture_output=True, text=True, env=prefect_env(tmp_path))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert f"macco run: {ro / 'artifacts'}/world" in r.stderr and f"cannot write here ({ro} is read-only" in r.stderr


def test_a_link_at_a_lock_path_is_refused_and_its_target_left_alone(tmp_path):
    """#48: `ln -sf /tmp/victim artifacts/parse/.KEY.output.lock`, then a run: the victim held `pid … since …`. A
    hard link and a FIFO at the lock path are refused as well (never written into, never waited on)."""
    from data_schemas import InputFileError
    from flows.catalog import Catalog
    from flows.runner import Runner, output_lock

    victim = tmp_path / "victim"
    victim.write_text("precious")
    art, calls = tmp_path / "art", []
    runner = Runner(art, ["world"], log=lambda line: None)
    first = runner.run(counting_stage(calls), {"seed": 0}, Catalog())  # finds the key and the lock's name
    out = Path(first["dir"])
    lock = out.with_name(f".{out.name}.output.lock")
    lock.unlink()
    lock.symlink_to(victim)
    with pytest.raises(InputFileError, match=rf"{lock}: the lock file is a symbolic link \(to {victim}\)"):
        runner.run(counting_stage(calls), {"seed": 0}, Catalog())
    assert victim.read_text() == "precious" and len(calls) == 1
    lock.unlink()
    dangling = tmp_path / "nothing-here"
    lock.symlink_to(dangling)
    with pytest.raises(InputFileError, match="is a symbolic link"):
        runner.run(counting_stage(calls), {"seed": 0}, Catalog())
    assert not dangling.exists()
    lock.unlink()
    lock.hardlink_to(victim)
    with pytest.raises(InputFileError, match=r"the lock file is a hard link \(2 names\)"):
        runner.run(counting_stage(calls), {"seed": 0}, Catalog())
    assert victim.read_text() == "precious"
    lock.unlink()
    import os

    os.mkfifo(lock)
    with pytest.raises(InputFileError, match="the lock file is not a regular file"):
        with output_lock(lock, out):
            pass
    lock.unlink()
    runner.run(counting_stage(calls), {"seed": 0}, Catalog())  # a lock file the runner makes: as before
    assert "pid " in lock.read_text() and victim.read_text() == "precious"


def test_a_stage_folder_that_is_a_link_is_refused_in_one_line_forced_or_not(tmp_path):
    """#48: `--force` on a stage folder that is a symlink ended in an `rmtree` traceback; without it the stage wrote
    through the link. Now both are one line and nothing outside the artifacts folder is written or removed; the
    artifacts root itself may be a link."""
    from data_schemas import InputFileError
    from flows.catalog import Catalog
    from flows.runner import Runner

    calls: list = []
    real = tmp_path / "real-art"
    real.mkdir()
    art = tmp_path / "art"
    art.symlink_to(real)  # the root a link: the user's choice, followed
    m = Runner(art, ["world"], log=lambda line: None).run(counting_stage(calls), {"seed": 0}, Catalog())
    out = Path(m["dir"])
    assert (real / "world" / out.name / "f.txt").is_file()
    elsewhere = tmp_path / "elsewhere"
    (out).rename(elsewhere)
    (elsewhere / "keep.txt").write_text("mine")
    out.symlink_to(elsewhere)
    for force in ([], ["world"]):
        with pytest.raises(InputFileError, match=rf"{out}: is a symbolic link \(to {elsewhere}\)"):
            Runner(art, ["world"], force=force, log=lambda line: None).run(counting_stage(calls), {"seed": 0},
                                                                           Catalog())
    assert (elsewhere / "keep.txt").read_text() == "mine" and len(calls) == 1
    out.unlink()
    shutil.move(str(real / "world"), str(tmp_path / "world-elsewhere"))
    (real / "world").symlink_to(tmp_path / "world-elsewhere")  # a folder above the stage folder
    with pytest.raises(InputFileError, match=rf"{art / 'world'}: is a symbolic link"):
        Runner(art, ["world"], force=["world"], log=lambda line: None).run(counting_stage(calls), {"seed": 0},
                                                                           Catalog())
    assert len(calls) == 1


def test_a_verb_refuses_a_table_path_that_is_a_link(tmp_path, capsys):
    """`macco captions --out T` with `T/captions` a link to a folder elsewhere: one line naming the link; the folder
    it points to untouched."""
    from pipeline.world import WorldConfig, generate_world

    generate_world(tmp_path / "w", WorldConfig(seed=1, images=4, size=32, eval_fraction=0.5, benchmarks=False))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "T").mkdir()
    (tmp_path / "T" / "captions").symlink_to(tmp_path / "elsewhere")
    assert main(["captions", str(tmp_path / "w"), "--out", str(tmp_path / "T")]) == 2
    assert f"{tmp_path / 'T' / 'captions'}: is a symbolic link" in one_line_error(capsys, "captions")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _table_stage(calls: list):
    """A stand-in for a data stage: writes one ``errors`` table of 6 rows in two parts, records it as the flow's
    data stages do (``flows.catalog.table_entry``)."""
    from data_schemas import TABLES, write_table
    from flows.catalog import table_entry
    from flows.stage import Stage, roots
    from tests_support import error_rows

    def run(call):
        calls.append(call.out)
        spec = TABLES["errors"]
        m = write_table(spec, call.out / "errors", spec.from_rows(error_rows(6)), rows_per_part=3)
        return {"outputs": {"errors": table_entry(m, call.out / "errors")}}

    return Stage("captions", "data", (), ("errors",), roots("pipeline.captions_stage"), run)


@pytest.mark.parametrize("edit", ["drop a part", "content hash"])
def test_a_hand_edited_manifest_is_named_and_its_stage_redone(tmp_path, edit):
    """#48: drop one listed part of a table (from `parts` and its entry) and lower `rows` to match, or change
    `content_hash`: every stage came back Cached and `macco validate` passed; only `--deep` noticed. The manifest
    is now compared with what its stage recorded (rows, content hash; no byte of a part read): named, redone."""
    from flows.catalog import Catalog
    from flows.runner import Runner, stage_done

    calls, lines = [], []
    runner = Runner(tmp_path / "art", ["captions"], log=lines.append)
    m = runner.run(_table_stage(calls), {"seed": 0}, Catalog())
    out = Path(m["dir"])
    mpath = out / "errors" / "manifest.json"
    original = json.loads(mpath.read_text())
    if edit == "drop a part":
        dropped = original["parts"][1]
        edited = {**original, "parts": original["parts"][:1], "rows": 3,
                  "part_info": {p: i for p, i in original["part_info"].items() if p != dropped}}
        differs = "says rows 3 (the stage recorded 6)"
    else:
        edited = {**original, "content_hash": "0" * 64}
        differs = f"says content_hash '{'0' * 64}' (the stage recorded '{original['content_hash']}')"
    mpath.write_text(json.dumps(edited))
    assert not stage_done(out, lines.append)
    assert any(f"{out}: table errors: {mpath} {differs}: the manifest was changed after its stage wrote it" in line
               for line in lines), lines
    runner.run(_table_stage(calls), {"seed": 0}, Catalog())
    assert len(calls) == 2 and stage_done(out)  # redone: the table is whole again
    assert json.loads(mpath.read_text())["rows"] == 6
    runner.run(_table_stage(calls), {"seed": 0}, Catalog())
    assert len(calls) == 2  # and then done: read back


def test_every_folder_and_input_is_checked_before_the_first_stage_works(tmp_path):
    """#48 item 8: a file where artifacts/ground goes was found after world, captions and parse ran; a bad Winoground
    clean-ids file (or benchmark root) named in the config after training and every earlier benchmark. Now both are
    refused before the world stage starts (nothing written under artifacts/ but the file)."""
    from data_schemas import InputFileError
    from flows.config import load_config
    from flows.runner import Runner

    def run(c):
        Runner(load_config(c).artifacts, log=lambda line: None).run_dag(load_config(c))

    art = tmp_path / "a" / "artifacts"
    art.mkdir(parents=True)
    (art / "ground").write_text("mine")
    with pytest.raises(InputFileError, match=r"artifacts/ground: is a file, not a folder"):
        run(config(tmp_path / "a"))
    assert sorted(p.name for p in art.iterdir()) == ["ground"]
    ids = tmp_path / "ids.txt"
    ids.write_text("12\nseven\n")
    settings = {"vga_min_count": 1, "winoground_clean_ids": str(ids)}
    with pytest.raises(InputFileError, match=r"ids.txt: line 2: 'seven' is not an example id"):
        run(config(tmp_path / "b", evaluate={"benchmarks": ["aro-vgr"], "settings": settings}))
    (tmp_path / "sc").mkdir()  # a SugarCrepe root without its files
    with pytest.raises(FileNotFoundError, match=r"sc: no SugarCrepe file found"):
        run(config(tmp_path / "c", evaluate={"roots": {"sugarcrepe": str(tmp_path / "sc")}}))
    assert not (tmp_path / "b" / "artifacts").exists() and not (tmp_path / "c" / "artifacts").exists()
