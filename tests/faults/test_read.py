"""Faults in tables on disk and in exported files (issue #19): damaged parts are never served as complete, an
unreadable table is never overwritten, and written files are readable by the group/others the umask allows."""
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_schemas import TABLES, TableError, is_complete, read_table, write_table
from data_schemas import _read


def error_rows(n: int, message: str = "m") -> list[dict]:
    return [dict(stage="s", item_id=str(i), reason="r", message=message) for i in range(n)]


@pytest.fixture()
def table(tmp_path):
    """An ``errors`` table of 6 rows in two parts of 3."""
    spec = TABLES["errors"]
    d = tmp_path / "errors"
    write_table(spec, d, spec.from_rows(error_rows(6)), rows_per_part=3)
    assert is_complete(d) and len(list(d.glob("part-*.parquet"))) == 2
    return d


def test_part_with_rows_removed_is_not_complete(table):
    part = table / "part-00000.parquet"
    pq.write_table(pq.read_table(part).slice(0, 2), part)  # the manifest still says 3 + 3
    assert not is_complete(table)
    with pytest.raises(TableError, match=rf"{table}.*part-00000.parquet has 2 rows, manifest.json says 3"):
        read_table(TABLES["errors"], table)


def test_part_with_changed_content_is_not_complete(table):
    part = table / "part-00001.parquet"
    t = pq.read_table(part)
    pq.write_table(t.set_column(3, "message", pa.array(["changed"] * t.num_rows)), part)  # same row count
    assert not is_complete(table)
    with pytest.raises(TableError, match=rf"{table}: the parts' content hash .* differs from manifest.json"):
        read_table(TABLES["errors"], table)


def test_garbage_part_names_table_and_file_and_is_not_complete(table):
    (table / "part-00001.parquet").write_bytes(b"garbage")  # 7 bytes
    assert not is_complete(table)
    with pytest.raises(TableError, match=rf"{table}: part-00001.parquet is not a readable Parquet file"):
        read_table(TABLES["errors"], table)


def test_missing_part_is_not_complete(table):
    (table / "part-00000.parquet").unlink()
    assert not is_complete(table)
    with pytest.raises(TableError, match="part-00000.parquet listed in .*manifest.json is missing"):
        read_table(TABLES["errors"], table)


def test_unchanged_table_is_not_rehashed_and_a_touched_one_once(table, monkeypatch):
    calls = []
    orig = _read._sha256_files

    def counting(paths):
        calls.append(1)
        return orig(paths)

    monkeypatch.setattr(_read, "_sha256_files", counting)
    assert is_complete(table) and read_table(TABLES["errors"], table).num_rows == 6
    assert calls == []  # the parts are as the writer hashed them (size, mtime in the manifest)
    for p in table.glob("part-*.parquet"):  # e.g. copied without keeping mtimes: hashed once, then cached
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert is_complete(table) and is_complete(table) and read_table(TABLES["errors"], table).num_rows == 6
    assert calls == [1]


def eval_rows(model_id: str) -> list[dict]:
    from datetime import datetime, timezone

    return [dict(eval_id="e0", run=model_id, benchmark="sugarcrepe", level="subset", subset="swap_att",
                 model_id=model_id, n=10, correct=7, accuracy=0.7, ties=0, missing_images=0, checkpoint_sha256="abc",
                 config="{}", config_key="k", protocol="authors", activation="gelu", code_version="c",
                 created=datetime(2026, 1, 1, tzinfo=timezone.utc), trigger="macco eval")]


def eval_out(model_id: str) -> dict:
    """An evaluation result as ``model.benchmarks.evaluate`` returns it (what ``append_results`` appends)."""
    return {"model": model_id, "run": model_id, "checkpoint_sha256": "def", "eval_id": f"e-{model_id}",
            "code_version": "c", "created": "2026-01-02T00:00:00.000000Z",
            "benchmarks": {"sugarcrepe": {"subsets": {"swap_att": {"n": 10, "accuracy": 0.5}}}}}


def test_eval_results_with_unreadable_manifest_is_not_replaced(tmp_path):
    from model.benchmarks import EvalConfig, append_results

    spec = TABLES["eval_results"]
    d = tmp_path / "eval_results"
    write_table(spec, d, spec.from_rows(eval_rows("old")))
    (d / "manifest.json").write_text('{"table": "eval_results", "rows": ')  # truncated by a full disk
    parts = sorted(p.name for p in d.glob("part-*.parquet"))
    with pytest.raises(TableError, match=rf"{d / 'manifest.json'}: not valid JSON.*move it aside"):
        append_results(d, eval_out("new"), EvalConfig())
    with pytest.raises(TableError, match="move it aside"):
        write_table(spec, d, spec.from_rows(eval_rows("other")))
    assert sorted(p.name for p in d.glob("part-*.parquet")) == parts  # the history is still there
    assert pq.read_table(d / parts[0]).column("model_id").to_pylist() == ["old"]


def test_eval_results_with_a_damaged_part_is_not_replaced_by_an_append(tmp_path):
    from model.benchmarks import EvalConfig, append_results

    spec = TABLES["eval_results"]
    d = tmp_path / "eval_results"
    write_table(spec, d, spec.from_rows(eval_rows("old")))
    part = next(d.glob("part-*.parquet"))
    part.write_bytes(b"garbage")  # the manifest still reads
    with pytest.raises(TableError, match=part.name):
        append_results(d, eval_out("new"), EvalConfig())
    assert part.read_bytes() == b"garbage"  # not overwritten with the new rows alone


def test_parts_without_manifest_are_not_replaced(tmp_path):
    spec = TABLES["eval_results"]
    d = tmp_path / "eval_results"
    write_table(spec, d, spec.from_rows(eval_rows("old")))
    (d / "manifest.json").unlink()
    with pytest.raises(TableError, match=rf"{d}: holds Parquet parts but no manifest.json.*move it aside"):
        write_table(spec, d, spec.from_rows(eval_rows("new")))
    assert pq.read_table(next(d.glob("*.parquet"))).column("model_id").to_pylist() == ["old"]


def test_a_damaged_table_with_a_readable_manifest_is_rewritten(table):
    """A stage's output with a bad part is recomputed by rerunning the stage (its manifest says what it was)."""
    (table / "part-00001.parquet").write_bytes(b"garbage")
    spec = TABLES["errors"]
    write_table(spec, table, spec.from_rows(error_rows(4)))
    assert is_complete(table) and read_table(spec, table).num_rows == 4


@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_export_and_table_files_are_readable_by_group_and_others(tmp_path, umask_022):
    import open_clip

    from model.factory import register_model_configs
    from model.export import export_clip

    register_model_configs()
    clip = open_clip.create_model("macco-micro")
    exp = export_clip(clip, "macco-micro", tmp_path / "export")
    files = [tmp_path / "export" / "open_clip_model.safetensors", tmp_path / "export" / "open_clip_config.json",
             tmp_path / "export.pt"]
    spec = TABLES["errors"]
    write_table(spec, tmp_path / "errors", spec.from_rows(error_rows(3)))
    files += sorted((tmp_path / "errors").iterdir())
    assert exp["pt"] == str(tmp_path / "export.pt") and len(files) == 5
    modes = {f.name: oct(f.stat().st_mode & 0o777) for f in files}
    assert all(f.stat().st_mode & 0o777 == 0o644 for f in files), modes
    loaded = open_clip.create_model_and_transforms(f"local-dir:{tmp_path / 'export'}")[0]  # still loads
    assert loaded.state_dict().keys() == clip.state_dict().keys()
