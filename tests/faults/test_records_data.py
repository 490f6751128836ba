"""Faults in the data stages' records (flows/records_data.py): edited instance annotations under a COCO root are
regrounded, not served Cached."""
from __future__ import annotations

import json

import pytest

from tests_support import run_flow_states, tiny_flow_config as config


@pytest.mark.e2e
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
