"""CSV/TSV, image-folder and webdataset sources: the same captions rows as the COCO reader (sizes read from the
images), bad items as error rows, malformed files as one-line errors naming file and line."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from PIL import Image

from macco.cli import main
from pipeline.captions import InputFileError, read_coco_root
from pipeline.sources import (expand_shards, image_id_of, read_csv_source, read_folder_source,
                              read_webdataset_source)
from tests_support import one_line_error, write_shard


def world_pairs(world: Path, split: str = "val") -> list[dict]:
    return [r for r in read_coco_root(world, (split,)).rows]


def write_csv(path: Path, rows: list[dict], sep: str = "\t", keys=("filepath", "title")) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f, delimiter=sep)
        w.writerow(keys)
        for r in rows:
            w.writerow([r[k] for k in keys])
    return path


def test_csv_tsv_rows_match_the_coco_reader_with_sizes_from_the_images(world, tmp_path):
    pairs = world_pairs(world)[:12]
    rows = [{"filepath": str(world / p["file_name"]), "title": p["caption"]} for p in pairs]  # absolute paths
    for sep, name in (("\t", "d.tsv"), (",", "d.csv")):
        read = read_csv_source(write_csv(tmp_path / name, rows, sep), separator=sep, image_root=world)
        assert not read.errors
        assert [(r["caption"], r["file_name"], r["width"], r["height"]) for r in read.rows] == \
            [(p["caption"], p["file_name"], p["width"], p["height"]) for p in pairs]
        assert [r["caption_id"] for r in read.rows] == list(range(12)) and {r["split"] for r in read.rows} == {"train"}
        assert read.rows[0]["image_id"] == image_id_of(pairs[0]["file_name"])
    # other column names, relative paths, a split column
    rel = [{"img": p["file_name"], "text": p["caption"], "part": "val" if i % 2 else "train"}
           for i, p in enumerate(pairs)]
    f = write_csv(tmp_path / "k.csv", rel, ",", ("img", "text", "part"))
    read = read_csv_source(f, img_key="img", caption_key="text", separator=",", image_root=world, split_key="part")
    assert [r["split"] for r in read.rows] == [r["part"] for r in rel]


def test_csv_bad_items_are_error_rows_and_bad_files_one_line_errors(world, tmp_path):
    pair = world_pairs(world)[0]
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    Image.new("RGB", (50, 30)).save(tmp_path / "real.png")
    rows = [{"filepath": "real.png", "title": "a red circle"}, {"filepath": "nope.jpg", "title": "a dog"},
            {"filepath": "broken.jpg", "title": "a cat"}, {"filepath": "real.png", "title": "  "},
            {"filepath": "", "title": "no image"}]
    read = read_csv_source(write_csv(tmp_path / "d.tsv", rows))
    assert [(r["caption_id"], r["width"], r["height"]) for r in read.rows] == [(0, 50, 30)]
    assert [(e["item_id"], e["reason"]) for e in read.errors] == [
        ("1", "missing_image"), ("2", "unreadable_image"), ("3", "empty_caption"), ("4", "missing_image")]
    assert "d.tsv: line 3" in read.errors[0]["message"] and "nope.jpg" in read.errors[0]["message"]
    assert read.summary()["error_reasons"] == {"missing_image": 2, "unreadable_image": 1, "empty_caption": 1}
    with pytest.raises(InputFileError, match=r"d.tsv: line 1: no column 'caption'"):
        read_csv_source(tmp_path / "d.tsv", caption_key="caption")
    (tmp_path / "extra.tsv").write_text(f"filepath\ttitle\n{pair['file_name']}\ta\tb\n")
    with pytest.raises(InputFileError, match=r"extra.tsv: line 2: 3 fields, the header has 2"):
        read_csv_source(tmp_path / "extra.tsv", image_root=world)
    with pytest.raises(FileNotFoundError, match="missing.csv: file not found"):
        read_csv_source(tmp_path / "missing.csv")


def test_folder_jsonl(world, tmp_path):
    pairs = world_pairs(world)[:5]
    lines = [json.dumps({"file_name": p["file_name"], "caption": p["caption"], "id": 100 + i})
             for i, p in enumerate(pairs)]
    lines.insert(2, "")  # blank lines are skipped
    lines.append(json.dumps({"file_name": "val2014/none.jpg", "caption": "x", "id": 7}))
    f = tmp_path / "caps.jsonl"
    f.write_text("\n".join(lines) + "\n")
    read = read_folder_source(f, image_root=world, split="val")
    assert [(r["caption_id"], r["caption"], r["width"], r["split"]) for r in read.rows] == \
        [(100 + i, p["caption"], p["width"], "val") for i, p in enumerate(pairs)]
    assert [(e["item_id"], e["reason"]) for e in read.errors] == [("7", "missing_image")]
    f.write_text(json.dumps({"file_name": "a.jpg", "caption": "x"}) + "\n{not json\n")
    with pytest.raises(InputFileError, match=r"caps.jsonl: line 2: not valid JSON"):
        read_folder_source(f, image_root=world)
    f.write_text(json.dumps({"file": "a.jpg", "caption": "x"}) + "\n")
    with pytest.raises(InputFileError, match=r"caps.jsonl: line 1: missing field 'file_name'"):
        read_folder_source(f)
    f.write_text("\n".join(json.dumps({"file_name": "a.jpg", "caption": "x", "id": 3}) for _ in range(2)) + "\n")
    with pytest.raises(InputFileError, match=r"line 2: id 3 already used at line 1"):
        read_folder_source(f)


def test_webdataset_shards_into_a_content_addressed_store(world, tmp_path):
    pairs = world_pairs(world)[:8]
    samples = [{"__key__": f"{i:05d}", "jpg": (world / p["file_name"]).read_bytes(),
                **({"txt": p["caption"]} if i % 2 else {"json": json.dumps({"caption": p["caption"]})})}
               for i, p in enumerate(pairs)]
    samples.append({"__key__": "00008", "jpg": (world / pairs[0]["file_name"]).read_bytes()})  # no caption
    samples.append({"__key__": "00009", "txt": "an image is missing"})
    samples.append({"__key__": "00010", "jpg": b"garbage", "txt": "undecodable"})
    write_shard(tmp_path / "s-00000.tar", samples[:5])
    write_shard(tmp_path / "s-00001.tar", samples[5:])
    store = tmp_path / "store"
    read = read_webdataset_source(str(tmp_path / "s-{00000..00001}.tar"), store, split="train")
    assert [(r["caption_id"], r["caption"], r["width"], r["height"]) for r in read.rows] == \
        [(i, p["caption"], p["width"], p["height"]) for i, p in enumerate(pairs)]
    for r in read.rows:  # content addressed: the stored bytes are the shard's, named by their hash
        import hashlib

        data = (store / r["file_name"]).read_bytes()
        assert r["file_name"].split("/")[1].split(".")[0] == hashlib.sha256(data).hexdigest()
    assert [(e["item_id"], e["reason"]) for e in read.errors] == [
        ("8", "empty_caption"), ("9", "missing_image"), ("10", "unreadable_image")]
    assert "s-00001.tar: sample 00009" in read.errors[1]["message"]
    n_files = len(list(store.rglob("*.jpg")))
    again = read_webdataset_source([str(tmp_path / "s-00000.tar"), str(tmp_path / "s-00001.tar")], store)
    assert again.rows == read.rows and len(list(store.rglob("*.jpg"))) == n_files  # extracted once
    # a truncated shard: the samples before the damage are kept, the failure is an error row
    data = (tmp_path / "s-00001.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2 + 100])
    cut = read_webdataset_source(str(tmp_path / "cut.tar"), tmp_path / "store2")
    assert any(e["reason"] == "unreadable_shard" and "cut.tar" in e["message"] for e in cut.errors), cut.errors
    assert len(cut.rows) + sum(e["reason"] != "unreadable_shard" for e in cut.errors) >= 1  # what came before
    with pytest.raises(FileNotFoundError, match="s-00002.tar: webdataset shard not found"):
        expand_shards(str(tmp_path / "s-{00000..00002}.tar"))


def test_cli_captions_then_parse(world, tmp_path, capsys):
    from data_schemas import TABLES, read_table
    from macco.cli import main

    pairs = world_pairs(world)[:6]
    f = write_csv(tmp_path / "d.csv", [{"filepath": p["file_name"], "title": p["caption"]} for p in pairs], ",")
    assert main(["captions", str(f), "--source", "csv", "--image-root", str(world), "--csv-separator", ",",
                 "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert "errors: 0" in out and f"image root: {world.resolve()}" in out
    rows = read_table(TABLES["captions"], tmp_path / "t" / "captions").to_pylist()
    assert [r["caption"] for r in rows] == [p["caption"] for p in pairs]
    assert main(["parse", str(tmp_path / "t" / "captions"), "--out", str(tmp_path / "t"), "--model",
                 "macco-micro"]) == 0
    assert read_table(TABLES["scene_graphs"], tmp_path / "t" / "scene_graphs").num_rows > 0
    # webdataset: shards named one by one; a typed "\t" separator is a tab
    write_shard(tmp_path / "a.tar", [{"__key__": "k0", "jpg": (world / pairs[0]["file_name"]).read_bytes(),
                                     "txt": pairs[0]["caption"]}])
    write_shard(tmp_path / "b.tar", [{"__key__": "k1", "txt": "no image"}])
    assert main(["captions", str(tmp_path / "a.tar"), "--source", "webdataset", "--shards", str(tmp_path / "a.tar"),
                 str(tmp_path / "b.tar"), "--out", str(tmp_path / "w")]) == 0
    assert "errors: 1 missing_image=1" in capsys.readouterr().out
    assert len(list((tmp_path / "w" / "images").rglob("*.jpg"))) == 1
    from pipeline.captions_stage import CaptionsConfig

    assert CaptionsConfig(source="csv", path="x.tsv", csv_separator="\\t").csv_separator == "\t"


CONFIGS = sorted(p for p in (Path(__file__).resolve().parents[2] / "configs").glob("*.yaml")
                 if p.name != "train-example.yaml")  # a `macco train` config: tests/unit/test_train_config.py


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_load_with_valid_data_and_train_sections(path):
    from flows.config import FlowConfig, load_config
    from model.train_config import TrainConfig
    from pipeline.captions_stage import CaptionsConfig

    cfg = load_config(path)  # the typed tree: every section through its dataclass, every run a TrainConfig
    assert isinstance(cfg, FlowConfig) and isinstance(cfg.data, CaptionsConfig)
    assert cfg.train.runs and all(isinstance(r.config, TrainConfig) for r in cfg.train.runs.values())


# ---- hostile or careless inputs (bad input, round 3) ------------------------------------------------------------
def test_an_image_whose_header_claims_30000_squared_pixels_is_an_error_row_the_rest_kept(tmp_path, capsys):
    """A 69-byte PNG claiming 30000x30000 aborted the whole source (DecompressionBombError, exit 1, no table)."""
    from data_schemas import TABLES, read_table
    from macco.cli import main
    from tests_support import bomb_png

    Image.new("RGB", (40, 30)).save(tmp_path / "good.png")
    (tmp_path / "bomb.png").write_bytes(bomb_png())
    assert len((tmp_path / "bomb.png").read_bytes()) < 100
    (tmp_path / "d.tsv").write_text("filepath\ttitle\ngood.png\ta red circle\nbomb.png\ta blue square\n")
    assert main(["captions", str(tmp_path / "d.tsv"), "--source", "csv", "--out", str(tmp_path / "T")]) == 0
    rows = read_table(TABLES["captions"], tmp_path / "T" / "captions").to_pylist()
    [e] = read_table(TABLES["errors"], tmp_path / "T" / "errors").to_pylist()
    assert [r["file_name"] for r in rows] == ["good.png"]
    assert e["reason"] == "image_too_large" and "900,000,000 pixels" in e["message"] and "bomb.png" in e["message"]
    good = (tmp_path / "good.png").read_bytes()
    shard = write_shard(tmp_path / "s.tar", [{"__key__": "a", "png": good, "txt": "a cat"},
                                              {"__key__": "b", "png": bomb_png(), "txt": "a dog"}])
    read = read_webdataset_source(str(shard), tmp_path / "store")
    assert len(read.rows) == 1 and [x["reason"] for x in read.errors] == ["image_too_large"]


def test_a_1mb_caption_is_a_caption_too_long_row_not_a_quoting_error(tmp_path):
    """In a CSV a 1 MB caption became a csv_quoting row blaming a quote (it was csv's field size limit)."""
    Image.new("RGB", (40, 30)).save(tmp_path / "a.png")
    long = "a red circle " * 80_000
    write_csv(tmp_path / "d.tsv", [{"filepath": "a.png", "title": long}, {"filepath": "a.png", "title": "a cat"}])
    read = read_csv_source(tmp_path / "d.tsv")
    assert [r["caption"] for r in read.rows] == ["a cat"]
    [e] = read.errors
    assert e["reason"] == "caption_too_long" and f"{len(long):,} characters" in e["message"]


def test_the_caption_rule_at_the_source_control_characters_and_punctuation(tmp_path):
    """A NUL in a caption was stored and parsed as an attribute; punctuation-only captions reached the parser."""
    from pipeline.text_checks import MAX_CAPTION_CHARS, caption_problem

    Image.new("RGB", (40, 30)).save(tmp_path / "a.png")
    write_csv(tmp_path / "d.tsv", [{"filepath": "a.png", "title": t} for t in
                                   ("a red\x00 circle", "... !!", "a cat\ton a mat", "a dog")])
    read = read_csv_source(tmp_path / "d.tsv")
    assert [r["caption"] for r in read.rows] == ["a cat\ton a mat", "a dog"]
    assert [e["reason"] for e in read.errors] == ["control_character", "no_words"]
    assert "U+0000 at character 5" in read.errors[0]["message"]
    assert caption_problem("x" * MAX_CAPTION_CHARS) is None and caption_problem("x" * (MAX_CAPTION_CHARS + 1))


def test_folder_source_pointed_at_a_folder_explains(tmp_path, capsys):
    assert main(["captions", str(tmp_path), "--source", "folder", "--out", str(tmp_path / "T")]) == 2
    assert '--source folder reads a JSONL file with one {"file_name"' in one_line_error(capsys, "captions")
