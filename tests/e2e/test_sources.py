"""Each non-COCO source (open_clip CSV/TSV, image folder + JSONL, webdataset shards) through the whole flow:
captions -> parse -> ground (a model backend: a tiny random GroundingDINO) -> masks -> validate -> train ->
evaluate -> report; a changed input file re-runs the captions stage, and the annotations backend says it is
COCO-only."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from pipeline.captions import read_coco_root
from pipeline.world_benchmarks import benchmark_roots
from tests_support import build_tiny_hf_groundingdino, run_flow_states, write_shard

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gdino(tmp_path_factory):
    return build_tiny_hf_groundingdino(tmp_path_factory.mktemp("gdino"))


def flow_log_lines(text: str, wait_s: float = 30.0) -> list[str]:
    """The flow's log lines containing ``text``, read back from the API (logs are shipped in the background:
    drained first, then polled)."""
    import time

    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterTextSearch
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all()
    deadline = time.time() + wait_s
    while True:
        with get_client(sync_client=True) as c:
            lines = [log.message for log in c.read_logs(log_filter=LogFilter(text=LogFilterTextSearch(query=text)))]
        if lines or time.time() > deadline:
            return lines
        time.sleep(0.5)


def progress_artifact(key: str) -> float:
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as c:
        arts = c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert arts, f"no artifact {key!r}"
    return float(arts[-1].data)


def write_source(kind: str, world: Path, d: Path) -> dict:
    """The world's captions as a user's source of ``kind``: the config's data section."""
    pairs = read_coco_root(world).rows
    d.mkdir(parents=True, exist_ok=True)
    if kind == "csv":
        with (d / "train.tsv").open("w", newline="") as f:
            w = csv.writer(f, delimiter="\t")
            w.writerow(["filepath", "title"])
            w.writerows([p["file_name"], p["caption"]] for p in pairs)
        return {"source": "csv", "path": str(d / "train.tsv"), "image_root": str(world)}
    if kind == "folder":
        (d / "captions.jsonl").write_text("".join(json.dumps({"file_name": p["file_name"], "caption": p["caption"]})
                                                  + "\n" for p in pairs))
        return {"source": "folder", "path": str(d / "captions.jsonl"), "image_root": str(world)}
    half = len(pairs) // 2
    for i, part in enumerate((pairs[:half], pairs[half:])):
        write_shard(d / f"shard-{i:05d}.tar", [{"__key__": f"{i}{k:06d}", "jpg": (world / p["file_name"]).read_bytes(),
                                               "txt": p["caption"]} for k, p in enumerate(part)])
    return {"source": "webdataset", "path": str(d / "shard-{00000..00001}.tar")}


def source_config(tmp_path: Path, data: dict, world: Path, gdino: Path) -> Path:
    cfg = {
        "name": "src", "artifacts": str(tmp_path / "artifacts"), "data": data,
        "parse": {"clip_model": "macco-micro", "shard_size": 60},
        "ground": {"backend": "hf", "model_dir": str(gdino), "box_threshold": 0.0, "text_threshold": 0.0,
                   "shard_size": 20},
        "masks": {"models": ["macco-micro"]},
        "validate": {"params": {"min_text_mask_coverage": 0.5, "min_grounded_coverage": 0.5}},
        "train": {"arch": "macco-micro", "runs": {"macco": {"mode": "macco"}},
                  "common": {"max_steps": 2, "batch_size": 8, "workers": 0, "log_every": 1}},
        "evaluate": {"benchmarks": ["whatsup"], "roots": benchmark_roots(world), "control": "macco",
                     "settings": {"allow_partial": True}},  # the world's What's Up has Controlled A only
    }
    p = tmp_path / "src.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


@pytest.mark.parametrize("kind", ["csv", "folder", "webdataset"])
def test_source_through_the_whole_flow(harness, world, gdino, tmp_path, kind):
    data = write_source(kind, world, tmp_path / "data")
    cfg = source_config(tmp_path, data, world, gdino)
    out, states = run_flow_states(cfg)
    caps = out["captions"]
    n_pairs = len(read_coco_root(world).rows)
    assert caps["outputs"]["captions"]["rows"] == n_pairs and caps["outputs"]["errors"]["rows"] == 0
    assert caps["outputs"]["captions"]["source"] == kind
    root = caps["outputs"]["images"]["dir"]
    if kind == "webdataset":  # training and grounding read the content-addressed store
        assert Path(root) == Path(caps["dir"]).resolve() / "images"
        assert len(list(Path(root).rglob("*.jpg"))) == len({p["file_name"] for p in read_coco_root(world).rows})
    assert out["ground"]["outputs"]["regions"]["rows"] > 0 and out["masks"]["outputs"]["patch_masks"]["rows"] > 0
    assert set(states["train"]) == {"Completed"} and out["train"]["macco"][0]["last"]["total_loss"] > 0
    ev = json.loads(Path(out["evaluate"]["macco"][0]["results"]).read_text())
    assert "whatsup" in ev["benchmarks"] and "probes" not in ev  # the probes need the world's scene truth
    assert Path(out["report"]["markdown"]).exists()
    if kind == "csv":  # training progress: a flow log line per logged step and a progress artifact at 100 %
        assert "train macco-s0: step 2/2 (100 %)" in " ".join(flow_log_lines("train macco-s0: step"))
        assert progress_artifact("train-macco-s0") == 100.0

    _, states = run_flow_states(cfg)  # unchanged inputs: served from the cache
    assert set(states["captions"]) == {"Cached"} and set(states["train"]) == {"Cached"}

    if kind == "csv":  # an edited input file is a new captions key (and content), not a cache hit
        lines = Path(data["path"]).read_text().splitlines()
        Path(data["path"]).write_text("\n".join(lines[:-3]) + "\n")
        out2, states = run_flow_states(cfg, stages=["captions"])
        assert states["captions"] == ["Completed"] and out2["captions"]["outputs"]["captions"]["rows"] == n_pairs - 3
        c = yaml.safe_load(cfg.read_text())
        c["ground"] = {"backend": "annotations"}
        cfg.write_text(yaml.safe_dump(c))
        from flows.pipeline import macco_pipeline

        with pytest.raises(ValueError, match="the annotations backend reads COCO instance boxes"):
            macco_pipeline(config=str(cfg), stages=["captions", "parse", "ground"])
