import json

import pytest

from pipeline.captions import (InputFileError, read_coco_captions, read_coco_instances, read_karpathy)


def _write(path, obj):
    path.write_text(json.dumps(obj))
    return path


COCO = {
    "info": {"description": "COCO 2014 Dataset"}, "licenses": [{"id": 1, "name": "x", "url": ""}],
    "images": [
        {"license": 1, "file_name": "COCO_val2014_000000000042.jpg", "coco_url": "", "height": 480, "width": 640,
         "date_captured": "2013-11-14 16:28:13", "flickr_url": "", "id": 42},
        {"license": 1, "file_name": "COCO_val2014_000000000073.jpg", "coco_url": "", "height": 427, "width": 640,
         "date_captured": "2013-11-14 16:28:13", "flickr_url": "", "id": 73},
    ],
    "annotations": [
        {"image_id": 42, "id": 1, "caption": "A man riding a brown horse next to the beach. "},
        {"image_id": 73, "id": 2, "caption": "Two dogs playing with a red frisbee."},
        {"image_id": 99, "id": 3, "caption": "An orphan caption."},
        {"image_id": 42, "id": 4, "caption": "   "},
    ],
}


def test_coco_captions_rows_and_error_rows(tmp_path):
    p = _write(tmp_path / "captions_val2014.json", COCO)
    r = read_coco_captions(p, split="val")
    assert [row["caption_id"] for row in r.rows] == [1, 2]
    assert r.rows[0] == {"caption_id": 1, "image_id": 42, "file_name": "COCO_val2014_000000000042.jpg",
                         "width": 640, "height": 480, "caption": "A man riding a brown horse next to the beach.",
                         "split": "val"}
    assert {(e["item_id"], e["reason"]) for e in r.errors} == {("3", "unknown_image"), ("4", "empty_caption")}
    assert r.summary()["error_reasons"] == {"unknown_image": 1, "empty_caption": 1}


def test_missing_image_file_is_an_error_row(tmp_path):
    p = _write(tmp_path / "captions_val2014.json", COCO)
    imgs = tmp_path / "val2014"
    imgs.mkdir()
    (imgs / "COCO_val2014_000000000042.jpg").write_bytes(b"x")
    r = read_coco_captions(p, split="val", images_dir=imgs)
    assert [row["caption_id"] for row in r.rows] == [1]
    assert ("2", "missing_image") in {(e["item_id"], e["reason"]) for e in r.errors}


def test_missing_and_malformed_files_name_file_and_field(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_coco_captions(tmp_path / "nope.json", split="val")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputFileError, match="bad.json.*not valid JSON"):
        read_coco_captions(bad, split="val")
    no_images = _write(tmp_path / "c1.json", {"annotations": []})
    with pytest.raises(InputFileError, match=r"c1.json: top level: missing field 'images'"):
        read_coco_captions(no_images, split="val")
    broken = json.loads(json.dumps(COCO))
    del broken["images"][1]["width"]
    with pytest.raises(InputFileError, match=r"images\[1\]: missing field 'width'"):
        read_coco_captions(_write(tmp_path / "c2.json", broken), split="val")
    broken = json.loads(json.dumps(COCO))
    broken["annotations"][0]["image_id"] = "42"
    with pytest.raises(InputFileError, match=r"annotations\[0\]: field 'image_id' must be int"):
        read_coco_captions(_write(tmp_path / "c3.json", broken), split="val")


def test_instances_reader(tmp_path):
    inst = {"images": COCO["images"], "categories": [{"supercategory": "person", "id": 1, "name": "person"},
                                                     {"supercategory": "animal", "id": 19, "name": "horse"}],
            "annotations": [{"segmentation": [[1, 2, 3, 4]], "area": 10.0, "iscrowd": 0, "image_id": 42,
                             "bbox": [100.5, 50.0, 200.0, 150.0], "category_id": 19, "id": 7}]}
    out = read_coco_instances(_write(tmp_path / "instances_val2014.json", inst))
    assert out == {42: [{"ann_id": 7, "box_xyxy": [100.5, 50.0, 300.5, 200.0], "category": "horse",
                         "attributes": {}, "iscrowd": 0}]}
    inst["annotations"][0]["bbox"] = [1, 2, 3]
    with pytest.raises(InputFileError, match="bbox"):
        read_coco_instances(_write(tmp_path / "i2.json", inst))
    inst["annotations"][0]["bbox"] = [1, 2, 3, 4]
    inst["annotations"][0]["category_id"] = 5
    with pytest.raises(InputFileError, match="category_id 5"):
        read_coco_instances(_write(tmp_path / "i3.json", inst))


def test_karpathy_reader(tmp_path):
    kp = {"dataset": "coco", "images": [
        {"filepath": "val2014", "sentids": [10, 11], "filename": "COCO_val2014_000000000042.jpg", "imgid": 0,
         "split": "test", "cocoid": 42, "sentences": [
             {"tokens": ["a", "man"], "raw": "A man riding a horse.", "imgid": 0, "sentid": 10},
             {"tokens": [], "raw": " ", "imgid": 0, "sentid": 11}]},
        {"filepath": "train2014", "sentids": [12], "filename": "COCO_train2014_000000000073.jpg", "imgid": 1,
         "split": "restval", "cocoid": 73, "sentences": [
             {"tokens": ["dogs"], "raw": "Dogs.", "imgid": 1, "sentid": 12}]}]}
    p = _write(tmp_path / "dataset_coco.json", kp)
    r = read_karpathy(p, splits=("test",), sizes={42: (640, 480)})
    assert r.rows == [{"caption_id": 10, "image_id": 42, "file_name": "val2014/COCO_val2014_000000000042.jpg",
                       "width": 640, "height": 480, "caption": "A man riding a horse.", "split": "test"}]
    assert [(e["item_id"], e["reason"]) for e in r.errors] == [("11", "empty_caption")]
    r2 = read_karpathy(p, splits=("restval",), image_root=tmp_path)
    assert r2.rows == [] and [(e["item_id"], e["reason"]) for e in r2.errors] == [("12", "missing_image")]
    with pytest.raises(InputFileError, match="no image size"):
        read_karpathy(p, splits=("test",))


def test_ids_reused_across_split_files_are_refused_in_one_line(world, tmp_path, capsys):
    """Renumbering the val split to reuse train's ids was accepted: captions through masks exited 0 (300 rows, 250
    distinct ids) and train images got val boxes. The source refuses it, as a duplicate within one file."""
    import shutil

    from macco.cli import main
    from pipeline.grounding.stage import read_instances

    root = tmp_path / "coco"
    shutil.copytree(world, root)
    ann = root / "annotations"
    train_caps = json.loads((ann / "captions_train2014.json").read_text())
    val = json.loads((ann / "captions_val2014.json").read_text())
    first = train_caps["annotations"][0]["id"]
    val["annotations"][0]["id"] = first  # one caption id twice
    (ann / "captions_val2014.json").write_text(json.dumps(val))
    assert main(["captions", str(root), "--out", str(tmp_path / "T")]) == 2
    err = capsys.readouterr().err
    assert f"captions_val2014.json: caption id {first} is also used in" in err and "captions_train2014.json" in err
    assert not (tmp_path / "T" / "captions").exists()
    inst_train = json.loads((ann / "instances_train2014.json").read_text())
    inst_val = json.loads((ann / "instances_val2014.json").read_text())
    shared = inst_train["images"][0]["id"]
    old = inst_val["images"][0]["id"]
    inst_val["images"][0]["id"] = shared
    for a in inst_val["annotations"]:
        a["image_id"] = shared if a["image_id"] == old else a["image_id"]
    (ann / "instances_val2014.json").write_text(json.dumps(inst_val))
    with pytest.raises(InputFileError, match=rf"instances_val2014.json: image id {shared} is also used in .*"
                                             r"instances_train2014.json"):
        read_instances(root, ["train", "val"])
