"""Injected faults at the flow level (issue #19 items 2, 4, 5): training killed with SIGKILL and rerun, edited
instance annotations under a COCO root, a second writer of the same stage."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests_support import prefect_env as env, run_flow_states

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e
UP_TO_TRAIN = ["world", "captions", "parse", "ground", "masks", "validate", "train"]


def config(tmp_path: Path, **over) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg["artifacts"] = str(tmp_path / "artifacts")
    cfg.update(over)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "c.yaml"


def macco_run(cfg: Path, tmp_path: Path, **kw):
    return subprocess.run([sys.executable, "-m", "macco.cli", "run", "--config", str(cfg), "--stages", *UP_TO_TRAIN],
                          env=env(tmp_path), capture_output=True, text=True, timeout=900, **kw)


def export_tensors(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "run" / "export" / "open_clip_model.safetensors"))


TRAIN = {"arch": "macco-micro", "base": None, "runs": {"macco": {"mode": "macco"}}, "seeds": [0],
         "common": {"max_steps": 40, "batch_size": 8, "workers": 0, "log_every": 1, "save_every": 5,
                    "lr_clip": 1.0e-3}}


def test_training_killed_with_sigkill_continues_from_its_checkpoint_on_rerun(tmp_path):
    import torch

    ref = config(tmp_path / "ref", train=TRAIN)
    r = macco_run(ref, tmp_path / "ref")
    assert r.returncode == 0, r.stderr[-3000:]

    # the same run with other checkpoint settings: resume and save_every are not part of the run key
    cfg = config(tmp_path / "kill", train={**TRAIN, "common": {**TRAIN["common"], "save_every": 4}})
    runs = tmp_path / "kill" / "artifacts" / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "macco.cli", "run", "--config", str(cfg), "--stages", *UP_TO_TRAIN],
                            env=env(tmp_path / "kill"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 600
    ck: list[Path] = []
    while time.time() < deadline and proc.poll() is None:
        ck = list(runs.glob("macco-s0-*/run/checkpoints/step-0000012.pt")) if runs.exists() else []
        if ck:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert ck, "training never reached step 12"
    run_dir = ck[0].parents[2]
    assert not (run_dir / "stage.json").exists()  # killed mid-run: not done
    ref_dir = next((tmp_path / "ref" / "artifacts" / "runs").glob("macco-s0-*"))
    assert run_dir.name == ref_dir.name  # the same key

    r = macco_run(cfg, tmp_path / "kill")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((run_dir / "run" / "summary.json").read_text())
    assert summary["start_step"] >= 12 and summary["steps"] == 40  # continued, not restarted
    steps = [int(row["step"]) for row in csv.DictReader((run_dir / "run" / "metrics.csv").open())]
    assert steps == list(range(1, 41))  # no duplicate rows from the killed attempt
    a, b = export_tensors(ref_dir), export_tensors(run_dir)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k  # equals the uninterrupted run


def test_edited_instances_under_a_coco_root_reground(harness, world, tmp_path):
    import shutil

    root = tmp_path / "coco"
    shutil.copytree(world, root)
    cfg = config(tmp_path, data={"root": str(root)}, parse={"clip_model": "macco-micro", "shard_size": 50})
    stages = ["captions", "parse", "ground"]
    out, _ = run_flow_states(cfg, stages=stages)
    inst = root / "annotations" / "instances_train2014.json"
    data = json.loads(inst.read_text())
    for a in data["annotations"]:  # corrected boxes: one pixel narrower
        a["bbox"][2] = max(1, a["bbox"][2] - 1)
    inst.write_text(json.dumps(data))
    out2, states = run_flow_states(cfg, stages=stages)
    assert states["ground"] == ["Completed"]  # not Cached with the old regions
    assert out2["ground"]["outputs"]["regions"]["content_hash"] != out["ground"]["outputs"]["regions"]["content_hash"]


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
