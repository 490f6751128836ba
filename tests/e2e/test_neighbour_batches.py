"""NegCLIP's hard-negative images through the flow (model/neighbour_batches.py, flows/records_model.py): the tiny
config with a negclip run with ``neg_images: true`` up to training; the run computes its image neighbours from its
starting weights, the base chain's export, keeps them in its folder (the manifest naming those weights), and a
second flow run serves the run from its key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
STAGES_TO_TRAIN = ["world", "captions", "parse", "ground", "masks", "validate", "train"]


def test_a_neg_images_run_in_the_flow_uses_the_base_exports_neighbours(tmp_path):
    from data_schemas import TABLES, read_manifest, read_table
    from data_schemas.provenance import file_sha256
    from flows.config import load_config
    from flows.runner import Runner

    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg["artifacts"] = str(tmp_path / "art")
    cfg["train"]["runs"] = {"negclip": {"mode": "negclip", "neg_images": True}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    lines: list[str] = []
    out = Runner(cfg["artifacts"], STAGES_TO_TRAIN, log=lines.append).run_dag(load_config(tmp_path / "c.yaml"))
    base, [run] = out["train"]["base"][0], out["train"]["negclip"]
    folder = Path(run["export_dir"]).parent
    table = folder / "image_neighbours"
    assert read_manifest(table)["config"]["weights"] == file_sha256(base["export_pt"])
    rows = read_table(TABLES["image_neighbours"], table).to_pylist()
    assert rows and all(r["neighbour_image_id"] != r["image_id"] for r in rows)
    summary = json.loads((folder / "summary.json").read_text())["samples"]["neighbour_images"]
    assert summary["without_neighbour"] == 0 and summary["anchors"] > 0
    assert any("anchors have one among the training samples" in line for line in lines)
    again = Runner(cfg["artifacts"], STAGES_TO_TRAIN, log=lines.append).run_dag(load_config(tmp_path / "c.yaml"))
    assert again["train"]["negclip"][0]["content_hash"] == run["content_hash"]
