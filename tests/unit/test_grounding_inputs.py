"""pipeline/grounding/inputs.py: the ground stage holds one shard's rows, so its peak memory does not grow with the
number of shards it grounds.

The same verb (``macco ground``: the record, ``ground_inputs``, ``ground_stage``) is run in a fresh process on the
tables of 1 and of 8 shards of the same size (synthetic captions, scene graphs and COCO-style instance boxes with
their polygons); the peak is the Python heap's (``tracemalloc``, started after the CLI's imports: the verb's own
lazy imports count alike in both) plus Arrow's memory pool's. Before the stage read by shard (its inputs whole as
Python rows) 8 shards took ≈ 30 MB more than 1.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from data_schemas import TABLES, read_manifest, write_table

SHARD = 150  # images a shard
CAPTIONS = 5  # captions an image, as in COCO
MEASURE = """
import json, sys, tracemalloc
import pyarrow as pa
from macco.cli import main
tracemalloc.start()
rc = main(["ground", sys.argv[1], "--instances", sys.argv[2], "--shard-size", sys.argv[3]])
print(json.dumps({"rc": rc, "python": tracemalloc.get_traced_memory()[1],
                  "arrow": pa.default_memory_pool().max_memory()}))
"""


def _concepts(cid: int) -> list[dict]:
    base = {"caption_id": cid, "parser": "rules", "subject_id": None, "object_id": None}
    return [{**base, "concept_id": 0, "kind": "object", "text": "circle", "char_start": 6, "char_end": 12,
             "phrase": "red circle"},
            {**base, "concept_id": 1, "kind": "object", "text": "square", "char_start": 30, "char_end": 36,
             "phrase": "blue square"},
            {**base, "concept_id": 2, "kind": "attribute", "text": "red", "char_start": 2, "char_end": 5,
             "object_id": 0, "phrase": "red circle"},
            {**base, "concept_id": 3, "kind": "attribute", "text": "blue", "char_start": 25, "char_end": 29,
             "object_id": 1, "phrase": "blue square"},
            {**base, "concept_id": 4, "kind": "relation", "text": "left", "char_start": 13, "char_end": 17,
             "subject_id": 0, "object_id": 1, "phrase": "circle left of a blue square"}]


def _write_inputs(root: Path, n_images: int) -> None:
    """``root/t/{captions,scene_graphs}`` and ``root/coco/annotations/instances_train2014.json``."""
    caps, sg, anns = [], [], []
    for i in range(n_images):
        iid = 1000 + i
        for k in range(CAPTIONS):
            cid = iid * 10 + k
            caps.append({"caption_id": cid, "image_id": iid, "file_name": f"train2014/{iid}.jpg", "width": 640,
                         "height": 480, "caption": f"a red circle left of a blue square, take {k}", "split": "train"})
            sg += _concepts(cid)
        for j, (cat, x) in enumerate(((1, 10), (2, 300), (1, 500))):
            poly = [float(x + (v % 7)) for v in range(60)]
            anns.append({"id": iid * 10 + j, "image_id": iid, "category_id": cat, "bbox": [x, 20.0, 90.5, 80.25],
                         "area": 7000.0, "iscrowd": 0, "segmentation": [poly]})
    # parts of a fixed size, as the stages before write them (a part a shard of theirs), whatever the data's size
    write_table(TABLES["captions"], root / "t" / "captions", TABLES["captions"].from_rows(caps),
                rows_per_part=SHARD * CAPTIONS)
    write_table(TABLES["scene_graphs"], root / "t" / "scene_graphs", TABLES["scene_graphs"].from_rows(sg),
                rows_per_part=SHARD * CAPTIONS * 5)
    (root / "coco" / "annotations").mkdir(parents=True)
    doc = {"info": {}, "images": [{"id": 1000 + i, "file_name": f"{1000 + i}.jpg", "width": 640, "height": 480}
                                  for i in range(n_images)],
           "annotations": anns, "categories": [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}]}
    (root / "coco" / "annotations" / "instances_train2014.json").write_text(json.dumps(doc))


def _peak(root: Path, n_shards: int) -> int:
    _write_inputs(root, n_shards * SHARD)
    run = subprocess.run([sys.executable, "-c", MEASURE, str(root / "t"), str(root / "coco"), str(SHARD)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0
    regions = read_manifest(root / "t" / "ground" / "regions")
    # every shard grounded: a caption's red circle 2 boxes (two circles), its blue square 1, its relation 3
    assert regions["shards"] == n_shards and regions["rows"] == n_shards * SHARD * CAPTIONS * 6
    return got["python"] + got["arrow"]


def test_peak_memory_does_not_grow_with_the_shards(tmp_path):
    one, eight = _peak(tmp_path / "one", 1), _peak(tmp_path / "eight", 8)
    assert eight - one < 3 * 2 ** 20, f"peak {one / 2 ** 20:.1f} MB for 1 shard, {eight / 2 ** 20:.1f} MB for 8"
