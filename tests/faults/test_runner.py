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
    lock = art / ".locks" / f"world-{key}.lock"
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
        assert f"macco run: {ro / 'artifacts'}/world/" in r.stderr and f"cannot write here ({ro} is read-only" in r.stderr
