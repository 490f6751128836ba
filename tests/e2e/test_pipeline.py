"""End-to-end: the Prefect flow (flows/pipeline.py) on a tiny world under prefect_test_harness; caching, forcing, a
killed and resumed run, a real server + deployment + process worker, preprocessing shards on a local Dask cluster,
and the whole flow on SigLIP-shaped local-dir folders (every training mode; the tokenizer stage the demo uses)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests_support import kill_group_when, prefect_env as _env, run_flow_states as run

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def tiny_config(tmp_path: Path, **over) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg["artifacts"] = str(tmp_path / "artifacts")
    for k, v in over.items():
        cfg[k] = v
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_full_flow_then_everything_cached_then_changes_rerun_exactly_their_stages(harness, tmp_path):
    cfg = tiny_config(tmp_path)
    out, states = run(cfg)
    assert (Path(out["report"]["markdown"])).exists() and Path(out["report"]["png"]).exists()
    assert set(states["train"]) == {"Completed"} and len(states["train"]) == 4  # 2 base stages, 2 fine-tunes
    md = Path(out["report"]["markdown"]).read_text()
    assert "### macco vs clip-ft: paired tests" in md and "## Probes" in md and "recon: relation words" in md
    ev = json.loads(Path(out["evaluate"]["macco"][0]["results"]).read_text())
    assert ev["probes"]["reconstruction"]["relation_n"] > 0 and "cases" in ev["benchmarks"]["whatsup"]
    assert states["parse-shard"] and states["ground-shard"]

    t0 = time.perf_counter()
    out2, states = run(cfg)
    cached_rerun_s = time.perf_counter() - t0
    expensive = {k: v for k, v in states.items() if k not in ("validate", "report")}
    assert all(set(v) == {"Cached"} for v in expensive.values()), states
    assert "parse-shard" not in states and "ground-shard" not in states  # finished stages map no shards
    assert out2["train"]["macco"][0]["content_hash"] == out["train"]["macco"][0]["content_hash"]
    print(f"fully cached rerun: {cached_rerun_s:.1f} s")

    # a changed fine-tune config: exactly the fine-tunes and their evaluations re-run
    c = yaml.safe_load(cfg.read_text())
    c["train"]["common"]["max_steps"] = 3
    cfg.write_text(yaml.safe_dump(c))
    _, states = run(cfg)
    assert states["train"].count("Completed") == 2 and states["train"].count("Cached") == 2  # base cached
    assert states["evaluate"].count("Completed") == 2 and states["evaluate"].count("Cached") == 1
    for stage in ("world", "captions", "parse", "ground", "masks"):
        assert set(states[stage]) == {"Cached"}, (stage, states[stage])

    # a forced stage whose output content is unchanged does not re-run what depends on it
    _, states = run(cfg, force=["parse"])
    assert states["parse"] == ["Completed"] and set(states["ground"]) == {"Cached"}
    assert set(states["train"]) == {"Cached"}

    # a manifest whose files are gone is not a cache hit
    ground_dir = Path(out["train"]["macco"][0]["dir"]).parents[1] / "masks"
    victim = next(p for p in ground_dir.iterdir() if p.is_dir())
    shutil.rmtree(victim / "patch_masks")
    _, states = run(cfg)
    assert states["masks"] == ["Completed"]


def test_single_stage_needs_its_upstream_and_validation_gates_training(harness, tmp_path):
    from flows.pipeline import StageMissing, macco_pipeline

    cfg = tiny_config(tmp_path)
    with pytest.raises(StageMissing, match="stage 'world' is not selected"):
        macco_pipeline(config=str(cfg), stages=["parse"])
    run(cfg, stages=["world", "captions", "parse", "ground", "masks"])
    with pytest.raises(StageMissing, match="stage .validate. is not selected and has no complete output"):
        macco_pipeline(config=str(cfg), stages=["train"])
    # a threshold the tables cannot meet (another tokenizer's end-of-text id): the gate fails the flow before any
    # training
    c = yaml.safe_load(cfg.read_text())
    c["validate"]["params"]["eot_token_id"] = 5
    cfg.write_text(yaml.safe_dump(c))
    from pipeline.validate import ValidationFailed

    with pytest.raises(ValidationFailed, match="token_masks.eot_consistent"):
        macco_pipeline(config=str(cfg))
    assert not (tmp_path / "artifacts" / "runs").exists()


def test_killed_during_grounding_resumes_to_identical_tables(tmp_path):
    from data_schemas import is_complete

    pre = ["world", "captions", "parse", "ground"]
    ref = tiny_config(tmp_path / "ref")
    r = subprocess.run([sys.executable, "-m", "macco.cli", "run", "--config", str(ref), "--stages", *pre],
                       env=_env(tmp_path / "ref"), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]

    cfg = tiny_config(tmp_path / "kill", ground={"backend": "annotations", "shard_size": 1})
    art = tmp_path / "kill" / "artifacts" / "ground"
    proc = subprocess.Popen([sys.executable, "-m", "macco.cli", "run", "--config", str(cfg), "--stages", *pre],
                            env=_env(tmp_path / "kill"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own group: the kill takes its Prefect server too

    def three_parts_one_shard_finished() -> list[Path]:
        """Kill once 3 shards wrote their regions and one of them its errors part too (a finished shard: shards run
        in parallel, so 3 regions parts alone can all be unfinished)."""
        parts = list(art.glob("*/regions.partial/part-*.parquet")) if art.exists() else []
        finished = [p for p in parts if (p.parents[1] / "errors.partial" / p.name).exists()]
        return parts if len(parts) >= 3 and finished else []

    parts = kill_group_when(proc, three_parts_one_shard_finished, time.time() + 300)
    assert parts, "grounding never started"
    key_dir = parts[0].parents[1]
    assert not is_complete(key_dir / "regions")  # killed mid-stage: nothing looks complete
    # finished shards: written to both tables of the stage (a kill between the two leaves the shard unfinished)
    errs = {p.name for p in (key_dir / "errors.partial").glob("part-*.parquet")}
    before = {p.name: p.stat().st_mtime_ns for p in (key_dir / "regions.partial").glob("part-*.parquet")
              if p.name in errs}
    assert before
    r = subprocess.run([sys.executable, "-m", "macco.cli", "run", "--config", str(cfg), "--stages", *pre],
                       env=_env(tmp_path / "kill"), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert is_complete(key_dir / "regions")
    after = json.loads((key_dir / "regions" / "manifest.json").read_text())
    # the finished shards were not recomputed: their files moved into the table untouched
    for name, mtime in before.items():
        assert (key_dir / "regions" / name).stat().st_mtime_ns == mtime
    from data_schemas import TABLES, read_table

    ref_dir = next(p for p in (tmp_path / "ref" / "artifacts" / "ground").iterdir() if p.is_dir())
    a = sorted(read_table(TABLES["regions"], ref_dir / "regions").to_pylist(), key=lambda x: (x["caption_id"],
                                                                                            x["concept_id"], x["box_id"]))
    b = sorted(read_table(TABLES["regions"], key_dir / "regions").to_pylist(), key=lambda x: (x["caption_id"],
                                                                                             x["concept_id"], x["box_id"]))
    assert a == b and after["rows"] == len(a)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_deployment_on_a_real_server_with_a_process_worker(tmp_path):
    port = _free_port()
    env = {**_env(tmp_path), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api", "PWD": str(REPO)}
    prefect = str(Path(sys.executable).with_name("prefect"))
    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui",
                               "--analytics-off"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        import urllib.request

        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("server did not start")
        cfg = tiny_config(tmp_path)
        sh = lambda *a, **k: subprocess.run([prefect, *a], env=env, cwd=REPO, capture_output=True, text=True,  # noqa
                                            timeout=300, **k)
        r = sh("work-pool", "create", "macco-local", "--type", "process")
        assert r.returncode == 0, r.stderr[-2000:]
        r = sh("--no-prompt", "deploy", "--all")
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
        r = sh("deployment", "run", "macco/parse", "--param", f"config={cfg}")
        assert r.returncode == 0, r.stderr[-2000:]
        r = sh("worker", "start", "--pool", "macco-local", "--run-once")
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
        assert "Completed" in r.stdout + r.stderr
        assert list((tmp_path / "artifacts" / "parse").glob("*/stage.json"))
        r = sh("deployment", "inspect", "macco/reevaluate")
        assert "0 3 * * *" in r.stdout
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_preprocessing_shards_on_a_local_dask_cluster(harness, tmp_path):
    from flows.pipeline import run_flow

    cfg = tiny_config(tmp_path, dask={"address": None, "local_workers": 2})
    out = run_flow(str(cfg), stages=["world", "captions", "parse", "ground"])
    assert out["parse"]["outputs"]["scene_graphs"]["rows"] > 0
    assert out["ground"]["outputs"]["regions"]["rows"] > 0


def test_every_mode_on_siglip_through_the_flow(harness, tmp_path):
    """The whole flow on a SigLIP-shaped local-dir folder: the tables in its tokenizer and patch grid, every
    training mode with the sigmoid objective, the evaluation and the probes on the world; a changed tokenizer
    file is a new parse (and train) key, never a cache hit."""
    import yaml

    from model.benchmarks.registry import world_sets
    from model.factory import CONFIG_DIR
    from pipeline.world import WorldConfig, generate_world
    from pipeline.siglip_folder import build_siglip_folder
    from tests_support import run_flow_states

    world_cfg = {"seed": 3, "images": 30, "size": 32, "eval_fraction": 0.3}
    generate_world(tmp_path / "w", WorldConfig(**world_cfg), world_sets())  # the same world the flow makes: its captions
    coco = json.loads((tmp_path / "w" / "annotations" / "captions_train2014.json").read_text())
    folder = build_siglip_folder([a["caption"] for a in coco["annotations"]], tmp_path / "siglip",
                                 json.loads((CONFIG_DIR / "macco-siglip-tiny.json").read_text()), context_length=32,
                                 vocab_size=400)
    modes = {"clip-ft": {"mode": "clip-ft"}, "macco": {"mode": "macco"}, "text-only": {"mode": "text-only"},
             "image-only": {"mode": "image-only"}, "macco-no-mca": {"mode": "macco", "mca": False},
             "macco-no-mir": {"mode": "macco", "mir": False}, "macco-hn": {"mode": "macco", "hardneg": True}}
    cfg = {"name": "siglip", "artifacts": str(tmp_path / "artifacts"), "world": world_cfg,
           "parse": {"clip_model": folder, "shard_size": 50}, "ground": {"backend": "annotations", "shard_size": 8},
           "masks": {"models": [folder]},
           "validate": {"params": {"min_text_mask_coverage": 0.9, "min_grounded_coverage": 0.9}},
           "train": {"arch": folder, "runs": modes,
                     "common": {"max_steps": 2, "batch_size": 16, "workers": 0, "log_every": 1, "lr_clip": 1e-3}},
           "evaluate": {"benchmarks": ["aro-vgr", "sugarcrepe", "whatsup"], "settings": {"vga_min_count": 1}}}
    path = tmp_path / "siglip.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out, states = run_flow_states(path)
    assert set(out["train"]) == set(modes) and all(s == "Completed" for s in states["train"])
    for label, runs in out["evaluate"].items():
        res = json.loads(Path(runs[0]["results"]).read_text())
        assert set(res["benchmarks"]) == {"aro-vgr", "sugarcrepe", "whatsup"}, label
        assert "r2_x" in res["probes"]["image_global"] and res["probes"]["text"]["relation_swap_cosine"] > 0, label
    masks = out["masks"]["outputs"]["patch_masks"]
    from data_schemas import TABLES, read_table

    assert set(read_table(TABLES["patch_masks"], masks["dir"]).column("grid").to_pylist()) == {4}
    report = (tmp_path / "artifacts" / "runs" / "siglip" / "results.md").read_text()
    assert "macco-hn" in report
    # the tokenizer folder is an input: editing a file in it re-parses (and retrains), never a cache hit
    (Path(folder.removeprefix("local-dir:")) / "tokenizer_config.json").write_text(
        (Path(folder.removeprefix("local-dir:")) / "tokenizer_config.json").read_text() + "\n")
    out2, states2 = run_flow_states(path, stages=["world", "captions", "parse"])
    assert states2["parse"] == ["Completed"] and out2["parse"]["key"] != out["parse"]["key"]


def test_the_tokenizer_stage_builds_the_siglip_folder_the_demo_uses(harness, tmp_path):
    """configs/demo-siglip.yaml's shape at a few steps: the tokenizer stage trains a tokenizer on the world's
    training captions and writes the model folder; built:tokenizer is that folder for parse, masks and train;
    a rerun is all Cached."""
    import yaml

    from flows.config import load_config
    from tests_support import run_flow_states

    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "demo-siglip.yaml").read_text())
    cfg.update(artifacts=str(tmp_path / "artifacts"), world={"seed": 3, "images": 30, "size": 32, "eval_fraction": 0.3},
               tokenizer={"arch": "macco-siglip-tiny", "vocab_size": 400, "context_length": 32})
    cfg["parse"]["shard_size"] = 50
    cfg["ground"]["shard_size"] = 8
    cfg["validate"] = {"params": {"min_text_mask_coverage": 0.9, "min_grounded_coverage": 0.9}}
    for section in (*cfg["train"]["base"], cfg["train"]["common"]):
        section.update(max_steps=2, batch_size=16)
    cfg["train"]["common"].update(workers=0, log_every=1)
    cfg["evaluate"] = {"benchmarks": ["sugarcrepe", "whatsup"], "settings": {"vga_min_count": 1}}
    path = tmp_path / "demo-siglip.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out, states = run_flow_states(path)
    folder = out["tokenizer"]["outputs"]["tokenizer"]["folder"]
    assert folder.startswith("local-dir:") and (Path(folder[len("local-dir:"):]) / "tokenizer.json").is_file()
    train_caps = sum(1 for r in json.loads((Path(out["world"]["dir"]) / "annotations" /
                                            "captions_train2014.json").read_text())["annotations"])
    assert out["tokenizer"]["captions"] == train_caps > 0  # the training split only
    assert all(r["arch"] == folder for runs in out["train"].values() for r in runs)
    _, again = run_flow_states(path)
    assert set(again["tokenizer"]) == {"Cached"} and set(again["train"]) == {"Cached"}
    with pytest.raises(ValueError, match="built:tokenizer.*tokenizer.arch is not set"):
        load_config(path, {"tokenizer": {"arch": None}})
