"""model/benchmarks/winoground.py: scores, the clean subset from an ids file, missing images."""
import json

import pytest
from PIL import Image

from model.benchmarks import EvalConfig, evaluate, winoground
from tests_support import FakeEncoder, ProtocolEncoder, blank_image as _img, micro_checkpoint as _micro_checkpoint


def test_winoground_scores(tmp_path):
    (tmp_path / "images").mkdir()
    for n in ("ex_0_img_0", "ex_0_img_1"):
        Image.new("RGB", (8, 8)).save(tmp_path / "images" / f"{n}.png")
    (tmp_path / "examples.jsonl").write_text(json.dumps({"id": 0, "image_0": "ex_0_img_0", "image_1": "ex_0_img_1",
                                                         "caption_0": "cup on book", "caption_1": "book on cup"}) + "\n")
    img = {str(tmp_path / "images" / "ex_0_img_0.png"): [1, 0, 0, 0], str(tmp_path / "images" / "ex_0_img_1.png"): [0, 1, 0, 0]}
    enc = FakeEncoder(img, {"cup on book": [1, 0.1, 0, 0], "book on cup": [0.2, 1, 0, 0]})
    r = winoground.evaluate(enc, tmp_path, winoground.load(tmp_path))
    assert r == {"n": 1, "missing_images": 0, "text": 1.0, "image": 1.0, "group": 1.0, "missing_ids": []}


def test_winoground_clean_subset_from_an_ids_file(tmp_path):
    from model.benchmarks import winoground

    lines = []
    for i in range(3):
        for k in (0, 1):
            _img(tmp_path / "images" / f"ex_{i}_img_{k}.png")
        lines.append(json.dumps({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1",
                                 "caption_0": f"c{i}0", "caption_1": f"c{i}1"}))
    (tmp_path / "examples.jsonl").write_text("\n".join(lines) + "\n")
    img = {str(tmp_path / "images" / f"ex_{i}_img_{k}.png"): [1.0, 0, 0, 0] if k == 0 else [0, 1.0, 0, 0]
           for i in range(3) for k in (0, 1)}
    txt = {"c00": [1, 0, 0, 0], "c01": [0, 1, 0, 0], "c10": [0, 1, 0, 0], "c11": [1, 0, 0, 0],
           "c20": [1, 0, 0, 0], "c21": [0, 1, 0, 0]}  # example 1 is scored wrong
    tags = tmp_path / "new_tag_assignments.json"
    tags.write_text(json.dumps({"0": [], "1": ["Visually Difficult"], "2": []}))
    cfg = EvalConfig(roots={"winoground": str(tmp_path)}, winoground_clean_ids=str(tags))
    b = evaluate(cfg, ["winoground"], enc=ProtocolEncoder(txt, img))["benchmarks"]["winoground"]
    assert b["groups"]["group"] == pytest.approx(2 / 3) and b["groups"]["clean_group"] == 1.0
    assert b["subsets"]["winoground_clean"]["n"] == 2 and b["settings"]["clean_ids_n"] == 2
    assert len(b["settings"]["clean_ids_sha256"]) == 64
    (tmp_path / "ids.txt").write_text("0\n2\n")
    assert winoground.load_clean_ids(tmp_path / "ids.txt") == [0, 2]
    (tmp_path / "ids.txt").write_text("0\nx2\n")
    with pytest.raises(ValueError, match=r"ids.txt: line 2: 'x2' is not an example id"):
        winoground.load_clean_ids(tmp_path / "ids.txt")
    (tmp_path / "ids.json").write_text("[0, 7]")
    with pytest.raises(ValueError, match=r"id\(s\) \[7\] not in examples.jsonl"):
        evaluate(EvalConfig(roots={"winoground": str(tmp_path)}, winoground_clean_ids=str(tmp_path / "ids.json")),
                 ["winoground"], enc=ProtocolEncoder(txt, img))


def test_missing_images_refused_by_default_and_marked_when_allowed(tmp_path, capsys):
    """#30 item 2: Winoground ignored --strict; every benchmark now refuses partly missing images unless
    --allow-missing, which is recorded in results.json and marked in the report."""
    from macco.cli import main

    ckpt = _micro_checkpoint(tmp_path)
    wg = tmp_path / "wg"
    _dump_lines = [json.dumps({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1",
                               "caption_0": "a cup on a book", "caption_1": "a book on a cup"}) for i in range(3)]
    (wg / "images").mkdir(parents=True)
    (wg / "examples.jsonl").write_text("\n".join(_dump_lines) + "\n")
    for i in range(3):
        for k in (0, 1):
            if (i, k) != (2, 1):  # example 2 lacks one image
                _img(wg / "images" / f"ex_{i}_img_{k}.png")
    args = ["eval", "--model", "macco-micro", "--checkpoint", str(ckpt), "--benchmark", "winoground", "--root",
            str(wg), "--out", str(tmp_path / "r.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "winoground: 1 of 3 case(s) have no image file" in err and "example 2" in err
    assert str(wg / "images" / "ex_2_img_1") in err  # the file, named as the other benchmarks name theirs
    assert main(args + ["--allow-missing"]) == 0
    r = json.loads((tmp_path / "r.json").read_text())["benchmarks"]["winoground"]
    assert r["settings"]["allow_missing"] is True and r["subsets"]["winoground"]["missing_images"] == 1
    assert main(["report", f"macco={tmp_path / 'r.json'}", "--out", str(tmp_path / "rep")]) == 0
    assert "Scored with images missing (`--allow-missing`" in (tmp_path / "rep" / "results.md").read_text()
