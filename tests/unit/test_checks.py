"""Table I/O and every DuckDB check: a clean fixture passes, one violating fixture per check fails."""
import json
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from data_schemas import TABLES, ShardedTableWriter, TableError, is_complete, read_table, write_table
from data_schemas.checks import run_checks


def clean_rows():
    cap = "a red circle left of a blue square"
    return {
        "captions": [{"caption_id": 1, "image_id": 10, "file_name": "a.jpg", "width": 64, "height": 48,
                      "caption": cap, "split": "train"},
                     {"caption_id": 2, "image_id": 10, "file_name": "a.jpg", "width": 64, "height": 48,
                      "caption": "a blue square", "split": "train"}],
        "scene_graphs": [
            dict(caption_id=1, concept_id=0, kind="object", text="circle", char_start=6, char_end=12,
                 subject_id=None, object_id=None, phrase="circle", parser="rules"),
            dict(caption_id=1, concept_id=1, kind="object", text="square", char_start=28, char_end=34,
                 subject_id=None, object_id=None, phrase="square", parser="rules"),
            dict(caption_id=1, concept_id=2, kind="attribute", text="red", char_start=2, char_end=5,
                 subject_id=None, object_id=0, phrase="red circle", parser="rules"),
            dict(caption_id=1, concept_id=3, kind="relation", text="left of", char_start=13, char_end=20,
                 subject_id=0, object_id=1, phrase="circle left of square", parser="rules"),
        ],
        "token_masks": [
            dict(caption_id=1, tokenizer="clip-bpe", token_ids=[49406, 320, 736, 2866, 1823, 539, 320, 1746,
                                                              5468, 49407] + [0] * 67,
                 eot_idx=9, relation_idx=[4, 5], attribute_idx=[2], object_idx=[3, 8], unmatched=[],
                 truncated=False),
            dict(caption_id=2, tokenizer="clip-bpe", token_ids=[49406, 320, 1746, 5468, 49407] + [0] * 72,
                 eot_idx=4, relation_idx=[], attribute_idx=[2], object_idx=[3], unmatched=[], truncated=False),
        ],
        "regions": [
            dict(caption_id=1, concept_id=2, box_id=0, image_id=10, phrase="red circle",
                 box_xyxy=[1.0, 2.0, 20.0, 30.0], score=1.0, label="circle", backend="annotations"),
            dict(caption_id=1, concept_id=3, box_id=0, image_id=10, phrase="circle left of square",
                 box_xyxy=[1.0, 2.0, 20.0, 30.0], score=0.9, label="circle", backend="annotations"),
            dict(caption_id=1, concept_id=3, box_id=1, image_id=10, phrase="circle left of square",
                 box_xyxy=[30.0, 2.0, 64.0, 48.0], score=0.9, label="square", backend="annotations"),
        ],
        "patch_masks": [
            dict(caption_id=1, concept_id=2, grid=8, image_id=10, patch_idx=[0, 1, 8, 9], image_size=64,
                 patch_size=8, preprocess="resize-center-crop"),
            dict(caption_id=1, concept_id=3, grid=8, image_id=10, patch_idx=[0, 1, 63], image_size=64,
                 patch_size=8, preprocess="resize-center-crop"),
        ],
        "errors": [dict(stage="captions", item_id="9", reason="empty_caption", message="empty")],
        "eval_results": [dict(eval_id="e1", run="macco-s0", benchmark="sugarcrepe", level="subset", subset="swap_att",
                              model_id="m", n=10, correct=7, accuracy=0.7, ties=0, missing_images=0,
                              checkpoint_sha256="abc", config="{}", config_key="k", protocol="authors",
                              activation="gelu", code_version="c", trigger="macco eval",
                              created=datetime(2026, 1, 1, tzinfo=timezone.utc))],
        "official": [dict(caption_id=1, objects=["circle", "square"], relations=["left of"], attributes=["red", "blue"],
                          relation_phrases=["circle left of square"], attribute_phrases=["red circle", "blue square"],
                          phrase_boxes='{"red circle": [[1, 2, 20, 40]]}', neg_captions=[])],
    }


def write_all(root, rows):
    out = {}
    for name, r in rows.items():
        spec = TABLES[name]
        out[name] = root / name
        write_table(spec, out[name], spec.from_rows(r), config={"t": name}, code_version="test")
    return out


def test_clean_fixture_passes_every_check(tmp_path):
    results = run_checks(write_all(tmp_path, clean_rows()))
    assert results and all(r.status == "pass" for r in results), [r for r in results if r.status != "pass"]
    every = {c.name for s in TABLES.values() for c in s.checks}
    assert {r.check for r in results} == every


VIOLATIONS = {
    "captions.key_unique": lambda d: d["captions"].append(dict(d["captions"][0])),
    "captions.image_size_positive": lambda d: d["captions"][1].update(width=0),
    "captions.caption_not_empty": lambda d: d["captions"][1].update(caption="  "),
    "scene_graphs.key_unique": lambda d: d["scene_graphs"].append(dict(d["scene_graphs"][0])),
    "scene_graphs.kind_valid": lambda d: d["scene_graphs"][0].update(kind="thing"),
    "scene_graphs.caption_exists": lambda d: d["scene_graphs"].append(dict(d["scene_graphs"][0], caption_id=5)),
    "scene_graphs.span_matches_text": lambda d: d["scene_graphs"][0].update(char_start=7),
    "scene_graphs.heads_exist": lambda d: d["scene_graphs"][3].update(subject_id=9),
    "token_masks.key_unique": lambda d: d["token_masks"].append(dict(d["token_masks"][0])),
    "token_masks.caption_exists": lambda d: d["token_masks"][1].update(caption_id=3),
    "token_masks.eot_consistent": lambda d: d["token_masks"][0].update(eot_idx=8),
    "token_masks.positions_in_caption": lambda d: d["token_masks"][0].update(relation_idx=[4, 9]),
    "token_masks.coverage": lambda d: [t.update(relation_idx=[], attribute_idx=[]) for t in d["token_masks"]],
    "regions.key_unique": lambda d: d["regions"].append(dict(d["regions"][0])),
    "regions.concept_exists": lambda d: d["regions"][0].update(concept_id=7),
    "regions.box_inside_image": lambda d: d["regions"][2].update(box_xyxy=[30.0, 2.0, 65.0, 48.0]),
    "regions.box_finite": lambda d: d["regions"][2].update(box_xyxy=[float("nan"), 2.0, 20.0, 48.0]),
    "regions.score_in_unit_interval": lambda d: d["regions"][1].update(score=1.5),
    "regions.coverage": lambda d: d["regions"].__setitem__(slice(None), d["regions"][:1]) or
    d["patch_masks"].__setitem__(slice(None), d["patch_masks"][:1]),
    "patch_masks.key_unique": lambda d: d["patch_masks"].append(dict(d["patch_masks"][0])),
    "patch_masks.grid_consistent": lambda d: d["patch_masks"][0].update(grid=7),
    "patch_masks.patch_in_grid": lambda d: d["patch_masks"][1].update(patch_idx=[0, 64]),
    "patch_masks.region_exists": lambda d: d["patch_masks"][1].update(concept_id=1),
    "errors.key_unique": lambda d: d["errors"].append(dict(d["errors"][0])),
    "eval_results.key_unique": lambda d: d["eval_results"].append(dict(d["eval_results"][0])),
    "official.key_unique": lambda d: d["official"].append(dict(d["official"][0])),
    "official.caption_exists": lambda d: d["official"][0].update(caption_id=99),
    "eval_results.accuracy_in_unit_interval": lambda d: d["eval_results"][0].update(accuracy=1.2),
    "eval_results.counts_consistent": lambda d: d["eval_results"][0].update(correct=11),
    "eval_results.level_valid": lambda d: d["eval_results"][0].update(level="average"),
}
NOT_NULL_CHECKS = {c.name for s in TABLES.values() for c in s.checks if c.name.endswith("key_not_null")}


def test_hf_tokenizer_rows_start_at_zero_and_end_with_their_own_token(tmp_path):
    """A SentencePiece row (tokenizer hf:..., no start token, </s> = 1 at eot_idx): position 0 is a caption
    word; the CLIP EOT id is not asked of it. Position -1 or one at/after eot_idx still fails."""
    rows = clean_rows()
    hf = dict(caption_id=2, tokenizer="hf:siglip", token_ids=[9, 14, 22, 1] + [0] * 12, eot_idx=3,
              relation_idx=[], attribute_idx=[0], object_idx=[1, 2], unmatched=[], truncated=False)
    rows["token_masks"].append(hf)
    assert all(r.status == "pass" for r in run_checks(write_all(tmp_path / "ok", rows)))
    hf.update(object_idx=[1, 3])
    failed = {r.check for r in run_checks(write_all(tmp_path / "bad", rows)) if r.status == "fail"}
    assert failed == {"token_masks.positions_in_caption"}


def test_every_check_has_a_violating_fixture():
    every = {c.name for s in TABLES.values() for c in s.checks}
    assert every - NOT_NULL_CHECKS == set(VIOLATIONS)


@pytest.mark.parametrize("check", sorted(VIOLATIONS))
def test_violation_fails_exactly_its_check(tmp_path, check):
    rows = clean_rows()
    VIOLATIONS[check](rows)
    results = run_checks(write_all(tmp_path, rows), params={"min_text_mask_coverage": 0.5,
                                                            "min_grounded_coverage": 0.75})
    failed = {r.check for r in results if r.status == "fail"}
    assert check in failed
    res = next(r for r in results if r.check == check)
    assert res.bad_rows >= 1 and 1 <= len(res.examples) <= 5


@pytest.mark.parametrize("name", sorted(TABLES))
def test_null_keys_are_rejected_at_write_time(name):
    spec = TABLES[name]
    row = dict(clean_rows()[name][0])
    row[spec.key[0]] = None
    with pytest.raises(TableError, match=f"table {name}"):
        spec.from_rows([row])


def test_key_not_null_checks_catch_foreign_writers(tmp_path):
    """A table written by another tool (nullable columns) with null keys fails the not-null checks."""
    import pyarrow.parquet as pq

    d = tmp_path / "captions"
    d.mkdir()
    t = pa.table({"caption_id": pa.array([None, 2], pa.int64()), "image_id": pa.array([1, 1], pa.int64()),
                  "file_name": ["a", "b"], "width": pa.array([1, 1], pa.int32()),
                  "height": pa.array([1, 1], pa.int32()), "caption": ["x", "y"], "split": ["t", "t"]})
    pq.write_table(t, d / "part-00000.parquet")
    (d / "manifest.json").write_text(json.dumps({"table": "captions", "schema_version": 1,
                                                 "parts": ["part-00000.parquet"]}))
    res = {r.check: r for r in run_checks({"captions": d})}
    assert res["captions.key_not_null"].status == "fail"


def test_roundtrip_manifest_and_schema_errors(tmp_path):
    spec = TABLES["captions"]
    rows = clean_rows()["captions"]
    m = write_table(spec, tmp_path / "captions", spec.from_rows(rows), config={"a": 1}, code_version="v1")
    assert m["rows"] == 2 and m["schema_version"] == 1 and m["config"] == {"a": 1} and len(m["content_hash"]) == 64
    back = read_table(spec, tmp_path / "captions")
    assert back.to_pylist() == rows
    m2 = write_table(spec, tmp_path / "captions2", spec.from_rows(rows), config={"a": 1}, code_version="v1")
    assert m2["content_hash"] == m["content_hash"]
    with pytest.raises(TableError, match="holds table 'captions', expected 'regions'"):
        read_table(TABLES["regions"], tmp_path / "captions")
    # a wrong column type names the table, column and expected type
    import pyarrow.parquet as pq
    part = tmp_path / "captions" / "part-00000.parquet"
    t = pq.read_table(part)
    pq.write_table(t.set_column(3, "width", t.column("width").cast(pa.int64())), part)
    with pytest.raises(TableError, match="table captions: .*column 'width' has type int64, expected int32"):
        read_table(spec, tmp_path / "captions")
    with pytest.raises(TableError, match="incomplete"):
        (tmp_path / "empty").mkdir()
        read_table(spec, tmp_path / "empty")


def test_rows_not_matching_schema_name_table():
    with pytest.raises(TableError, match="table captions"):
        TABLES["captions"].from_rows([{"caption_id": "x"}])


def test_sharded_writer_resumes(tmp_path):
    spec = TABLES["errors"]
    w = ShardedTableWriter(spec, tmp_path / "errors", n_shards=3)
    w.write_shard(0, spec.from_rows([dict(stage="s", item_id="0", reason="r", message="m")]))
    with pytest.raises(TableError, match=r"shards \[1, 2\] not written"):
        w.finalize()
    assert not is_complete(tmp_path / "errors")
    w2 = ShardedTableWriter(spec, tmp_path / "errors", n_shards=3)
    assert w2.done_shards() == [0]
    for i in (1, 2):
        w2.write_shard(i, spec.from_rows([dict(stage="s", item_id=str(i), reason="r", message="m")]))
    m = w2.finalize()
    assert m["rows"] == 3 and is_complete(tmp_path / "errors")
    assert not (tmp_path / "errors.partial").exists()


def test_killed_writer_leaves_no_complete_table(tmp_path):
    """SIGKILL a process in the middle of a large write: the destination is never read as complete."""
    script = textwrap.dedent(f"""
        import pyarrow as pa, sys, time
        from data_schemas import TABLES, write_table
        from data_schemas import _io
        spec = TABLES["errors"]
        n = 200_000
        t = pa.table({{"stage": ["s"] * n, "item_id": [str(i) for i in range(n)], "reason": ["r"] * n,
                      "message": ["m" * 20] * n}}).cast(spec.arrow_schema)
        orig = _io._write_part
        def slow(table, path):
            orig(table, path)
            print("part", flush=True)
            time.sleep(0.5)
        _io._write_part = slow
        write_table(spec, {str(tmp_path / 'out')!r}, t, rows_per_part=20_000)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "part"  # at least one part written, more to come
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not is_complete(tmp_path / "out")
    with pytest.raises(TableError):
        read_table(TABLES["errors"], tmp_path / "out")
    time.sleep(0.01)


def test_cli_validate_and_inspect(tmp_path, capsys):
    import duckdb

    from macco.cli import main

    write_all(tmp_path / "artifacts", clean_rows())
    assert main(["validate", str(tmp_path / "artifacts")]) == 0
    assert "all" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "artifacts")]) == 0
    out = capsys.readouterr().out
    assert "text_mask_coverage: 1.000" in out and "macco.duckdb" in out
    con = duckdb.connect(str(tmp_path / "artifacts" / "macco.duckdb"), read_only=True)
    assert con.execute("select count(*) from patch_masks").fetchone()[0] == 2
    con.close()
    bad = clean_rows()
    bad["patch_masks"][1]["patch_idx"] = [0, 64]
    write_all(tmp_path / "bad", bad)
    assert main(["validate", str(tmp_path / "bad")]) == 1
    err = capsys.readouterr().err
    assert "patch_masks.patch_in_grid" in err and "caption_id=1, concept_id=3, grid=8" in err


def _rewrite_own_rows(table: str, stage: str, n: int, start) -> None:
    """One stage rewriting its own rows of a shared errors table ``n`` times (as captions and parse do)."""
    from pipeline.shards import only_stage

    spec = TABLES["errors"]
    start.wait()
    for i in range(n):
        rows = [{"stage": stage, "item_id": f"{stage}-{k}", "reason": "r", "message": f"round {i}"} for k in range(3)]
        write_table(spec, table, spec.from_rows(rows), replaces=only_stage(stage))


def test_two_stages_rewriting_one_errors_table_at_once_keep_each_others_rows(tmp_path):
    """Two macco stages writing one errors table at once lost a stage's rows (1 try in 6): each read the table,
    then renamed its own version over the other's. The write holds the table's lock from read to rename."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    table = str(tmp_path / "errors")
    procs = [ctx.Process(target=_rewrite_own_rows, args=(table, stage, 15, start)) for stage in ("captions", "parse")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    rows = read_table(TABLES["errors"], table).to_pylist()
    assert sorted(r["item_id"] for r in rows) == [f"{s}-{k}" for s in ("captions", "parse") for k in range(3)]
    assert {r["message"] for r in rows} == {"round 14"}
