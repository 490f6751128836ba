"""Faults at the flow (flows/pipeline.py): training killed with SIGKILL continues from its checkpoint on rerun; a
config error fails the flow run with one line."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests_support import kill_group_when, prefect_env as env, tiny_flow_config as config


UP_TO_TRAIN = ["world", "captions", "parse", "ground", "masks", "validate", "train"]


def macco_run(cfg: Path, tmp_path: Path, **kw):
    return subprocess.run([sys.executable, "-m", "macco.cli", "run", "--config", str(cfg), "--stages", *UP_TO_TRAIN],
                          env=env(tmp_path), capture_output=True, text=True, timeout=900, **kw)


def export_tensors(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "run" / "export" / "open_clip_model.safetensors"))


TRAIN = {"arch": "macco-micro", "base": None, "runs": {"macco": {"mode": "macco"}}, "seeds": [0],
         "common": {"max_steps": 40, "batch_size": 8, "workers": 0, "log_every": 1, "save_every": 5,
                    "lr_clip": 1.0e-3}}


@pytest.mark.e2e
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
    ck = kill_group_when(proc, lambda: list(runs.glob("macco-s0-*/run/checkpoints/step-0000012.pt"))
                         if runs.exists() else [], time.time() + 600, poll=0.05)
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


def test_flow_config_error_fails_the_flow_run_with_one_line(harness, tmp_path):
    """A deployment run (no CLI in front): the flow run fails with the config error as its message."""
    from flows.pipeline import macco_pipeline

    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  common: {lr_clip: -1}\n")
    state = macco_pipeline(config=str(bad), return_state=True)
    assert state.is_failed() and state.message.startswith("config error: config train.common lr_clip: -1")


@pytest.mark.e2e
def test_ctrl_c_stops_the_run_and_every_process_it_started_within_seconds_with_one_line(tmp_path):
    """#48 item 7: Ctrl-C (SIGINT to the terminal's process group) killed the temporary Prefect server, the stage went
    on training and then printed connection errors for ~3 min until a second Ctrl-C."""
    import os
    import signal

    cfg = config(tmp_path, train={**TRAIN, "common": {**TRAIN["common"], "max_steps": 100000}})
    runs = tmp_path / "artifacts" / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "macco.cli", "run", "--config", str(cfg), "--stages", *UP_TO_TRAIN],
                            env=env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 600
    while not (runs.exists() and list(runs.glob("*/run/checkpoints/step-*.pt"))):
        assert proc.poll() is None and time.time() < deadline, "training never saved a checkpoint"
        time.sleep(0.1)
    t0 = time.time()
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    _, err = proc.communicate(timeout=60)
    assert time.time() - t0 < 20 and proc.returncode == 128 + signal.SIGINT, err[-2000:]
    assert "macco run: stopped by SIGINT" in err.strip().splitlines()[-1], err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    left = _group_members(proc.pid, within=5)
    assert not left, left  # nothing of the run is left: no server, no stage still working
    assert not list(runs.glob("*/stage.json"))  # the training run is not done: the next run continues it


def _group_members(pgid: int, within: float) -> list[str]:
    """The command lines of the live processes of process group ``pgid`` still there after ``within`` seconds."""
    from pathlib import Path

    from macco.stop import alive

    deadline = time.time() + within
    while True:
        left = []
        for d in Path("/proc").glob("[0-9]*"):
            try:
                in_group = int((d / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
            if in_group and alive(int(d.name)):
                left.append(f"{d.name}: {cmd[:200]}")
        if not left or time.time() > deadline:
            return left
        time.sleep(0.1)
