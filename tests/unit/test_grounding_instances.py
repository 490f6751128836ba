"""``pipeline.grounding.instances``: the instance boxes read as a stream into columns give the boxes, and refuse the
files, that ``read_coco_instances`` (the whole document as Python objects) does."""
from __future__ import annotations

import json

import pytest

import pipeline.grounding.instances as instances
from data_schemas import InputFileError
from pipeline.captions import read_coco_instances
from pipeline.grounding.annotations import AnnotationsGrounder
from pipeline.grounding.instances import InstanceBoxes, read_instance_boxes

SPLITS = ["train", "val", "test"]


@pytest.mark.parametrize("chunk", [5, 1 << 18])  # 5 characters: every value cut across chunks
def test_columns_hold_the_documents_boxes(world, monkeypatch, chunk):
    monkeypatch.setattr(instances, "_CHUNK", chunk)
    boxes = read_instance_boxes(world, SPLITS)
    rows = {}
    for split in SPLITS:
        rows.update(read_coco_instances(world / "annotations" / f"instances_{split}2014.json"))
    assert len(boxes) == len(rows) and list(boxes.images) == sorted(rows)
    for iid, anns in rows.items():
        assert boxes.get(iid) == [{"box_xyxy": a["box_xyxy"], "category": a["category"],
                                   "attributes": {k: a["attributes"][k] for k in ("colour", "size")}} for a in anns]
    assert boxes.get(-5) == []
    from_rows = InstanceBoxes.from_mapping(rows)
    assert all(from_rows.get(i) == boxes.get(i) for i in rows)
    g, h = AnnotationsGrounder(boxes), AnnotationsGrounder(rows)
    assert g.colours == h.colours and g.synonyms == h.synonyms


def _doc(tmp_path, annotations, categories=({"id": 1, "name": "dog"},), name="instances_val2014.json"):
    """COCO's key order: the categories after the annotations."""
    (tmp_path / "annotations").mkdir(exist_ok=True)
    path = tmp_path / "annotations" / name
    path.write_text(json.dumps({"info": {"v": 1}, "images": [{"id": 1}], "annotations": list(annotations),
                                "categories": list(categories)}))
    return path


def _ann(i, **kw):
    return {"id": i, "image_id": 1, "category_id": 1, "bbox": [0, 0, 4, 4], **kw}


@pytest.mark.parametrize("annotations", [
    [_ann(1), _ann(2), _ann(1)],  # an annotation id used twice
    [_ann(1), _ann(2, category_id=7)],  # a category the categories list (after the annotations) lacks
    [_ann(1, bbox=[0, 0, 4])],
    [_ann(1, image_id="1")],
    [{"id": 1, "image_id": 1, "bbox": [0, 0, 1, 1]}],
    [_ann(1, attributes={"colour": "\ud800"})],
])
def test_bad_annotations_are_refused_with_read_coco_instances_message(tmp_path, annotations):
    path = _doc(tmp_path, annotations)
    with pytest.raises(InputFileError) as want:
        read_coco_instances(path)
    with pytest.raises(InputFileError) as got:
        read_instance_boxes(tmp_path, ["val"])
    assert str(got.value) == str(want.value) and "\n" not in str(got.value)


def test_bad_documents_are_one_line(tmp_path):
    path = _doc(tmp_path, [_ann(1)])
    path.write_text(json.dumps({"annotations": []}))
    with pytest.raises(InputFileError, match="top level: missing field 'categories'"):
        read_instance_boxes(tmp_path, ["val"])
    path.write_text('{"categories": [], "annotations": [{"id": 1,')
    with pytest.raises(InputFileError, match="instances_val2014.json: not valid JSON"):
        read_instance_boxes(tmp_path, ["val"])
    path.write_bytes(b'{"categories": [{"id": 1, "name": "caf\xe9"}], "annotations": []}')
    with pytest.raises(InputFileError) as want:
        read_coco_instances(path)
    with pytest.raises(InputFileError, match=r"not UTF-8 text \(byte 0xe9 at offset 38\)") as got:
        read_instance_boxes(tmp_path, ["val"])
    assert str(got.value) == str(want.value)
    with pytest.raises(FileNotFoundError, match="instances_train2014.json: file not found"):
        read_instance_boxes(tmp_path, ["train"])
