import json

import pytest

from data_schemas import TABLES, read_table
from macco.cli import main
from pipeline.captions import InputFileError
from pipeline.captions_stage import read_caption_input
from pipeline.parse_stage import ParseConfig, parse_stage


def test_cli_parse_coco_json_writes_tables_that_validate(world, tmp_path, capsys):
    out = tmp_path / "parsed"
    assert main(["parse", str(world / "annotations" / "captions_val2014.json"), "--out", str(out)]) == 0
    sg = read_table(TABLES["scene_graphs"], out / "scene_graphs").to_pylist()
    caps = json.loads((world / "annotations" / "captions_val2014.json").read_text())["annotations"]
    assert {r["caption_id"] for r in sg} == {c["id"] for c in caps}
    assert {r["kind"] for r in sg} == {"object", "attribute", "relation"}
    tm = read_table(TABLES["token_masks"], out / "token_masks").to_pylist()
    assert len(tm) == len(caps) and all(r["tokenizer"] == "clip-bpe" for r in tm)
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0


def test_cli_parse_jsonl_and_error_rows(tmp_path, capsys):
    src = tmp_path / "caps.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        {"id": 5, "image_id": 1, "caption": "a cat sitting on a red mat"},
        {"id": 6, "image_id": 1, "caption": ""},
        {"id": 7, "image_id": 2, "caption": 42}]) + "\n")
    assert main(["parse", str(src), "--out", str(tmp_path / "o")]) == 0
    errs = read_table(TABLES["errors"], tmp_path / "o" / "errors").to_pylist()
    assert {(e["item_id"], e["reason"]) for e in errs} == {("6", "empty_caption"), ("7", "non_text_caption")}
    assert "errors: 2" in capsys.readouterr().out


def test_bad_jsonl_names_file_and_line(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": 1, "image_id": 1, "caption": "x"}\n{"id": 2, "caption": "y"}\n')
    with pytest.raises(InputFileError, match=r"bad.jsonl: line 2: missing field 'image_id'"):
        read_caption_input(src)


def test_parse_stage_resumes_unfinished_shards(world, tmp_path):
    rows = read_caption_input(world / "annotations" / "captions_val2014.json")
    cfg = ParseConfig(shard_size=10)
    seen = []
    full = parse_stage(cfg, rows, tmp_path / "a", progress=lambda i, n: seen.append((i, n)))
    n = full["scene_graphs"]["shards"]
    assert n == -(-len(rows) // 10) and seen[-1] == (n, n)
    # a killed run: shard 0 written, nothing published
    assert parse_stage(cfg, rows, tmp_path / "b", only=[0], finalize=False) == {}
    assert not (tmp_path / "b" / "scene_graphs").exists()
    calls = []
    import pipeline.scene_graph as sgmod
    orig = sgmod.parse_captions

    def counting(r, *a, **k):
        calls.append(len(r))
        return orig(r, *a, **k)

    sgmod.parse_captions = counting
    try:
        resumed = parse_stage(cfg, rows, tmp_path / "b")
    finally:
        sgmod.parse_captions = orig
    assert len(calls) == n - 1  # shard 0 was not recomputed
    assert resumed["scene_graphs"]["content_hash"] == full["scene_graphs"]["content_hash"]
    assert resumed["token_masks"]["content_hash"] == full["token_masks"]["content_hash"]
    # shards written under another config are not reused
    parse_stage(cfg, rows, tmp_path / "c", only=[0], finalize=False)
    other = ParseConfig(shard_size=10, context_length=76)
    calls.clear()
    sgmod.parse_captions = counting
    try:
        parse_stage(other, rows, tmp_path / "c")
    finally:
        sgmod.parse_captions = orig
    assert len(calls) == n


def test_parse_stage_with_worker_processes_writes_the_same_tables(world, tmp_path):
    """n_process=2: worker processes parse chunks end to end; rows, order and errors equal one process."""
    rows = read_caption_input(world / "annotations" / "captions_val2014.json")[:60]
    rows[3] = {**rows[3], "caption": "   "}  # an error row inside a chunk
    one = parse_stage(ParseConfig(shard_size=25), rows, tmp_path / "one")
    two = parse_stage(ParseConfig(shard_size=25, n_process=2, batch_size=8), rows, tmp_path / "two")
    for name in ("scene_graphs", "token_masks", "errors"):
        assert two[name]["rows"] == one[name]["rows"] and two[name]["content_hash"] == one[name]["content_hash"]
    assert one["errors"]["rows"] == 1


def test_a_1mb_caption_in_a_captions_table_is_an_error_row_and_the_rest_is_parsed(tmp_path):
    """spaCy refuses a text over 1,000,000 characters (E088): no scene graph for any caption, *.partial left."""
    from data_schemas import write_table

    rows = [{"caption_id": i, "image_id": 1, "file_name": "a.jpg", "width": 64, "height": 64, "split": "train",
             "caption": text} for i, text in enumerate(["a red circle left of a blue square", "a cat " * 200_000])]
    write_table(TABLES["captions"], tmp_path / "captions", TABLES["captions"].from_rows(rows))
    parse_stage(ParseConfig(clip_model="macco-micro"), read_caption_input(tmp_path / "captions"), tmp_path)
    sg = read_table(TABLES["scene_graphs"], tmp_path / "scene_graphs").to_pylist()
    [e] = read_table(TABLES["errors"], tmp_path / "errors").to_pylist()
    assert {r["caption_id"] for r in sg} == {0} and (e["item_id"], e["reason"]) == ("1", "caption_too_long")
    assert "1,200,000 characters" in e["message"] and not list(tmp_path.glob("*.partial"))
