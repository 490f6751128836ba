"""data_schemas/_io.py: the sharded writer resumes, a killed write leaves no complete table, concurrent writers of one
errors table keep each other's rows."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from data_schemas import ShardedTableWriter, TABLES, TableError, is_complete, read_table, write_table
from tests_support import run_at_once


def _rewrite_own_rows(table: str, stage: str, n: int, start) -> None:
    """One stage rewriting its own rows of a shared errors table ``n`` times (as captions and parse do)."""
    from pipeline.shards import only_stage

    spec = TABLES["errors"]
    start.wait()
    for i in range(n):
        rows = [{"stage": stage, "item_id": f"{stage}-{k}", "reason": "r", "message": f"round {i}"} for k in range(3)]
        write_table(spec, table, spec.from_rows(rows), replaces=only_stage(stage))


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


def test_two_stages_rewriting_one_errors_table_at_once_keep_each_others_rows(tmp_path):
    """Two macco stages writing one errors table at once lost a stage's rows (1 try in 6): each read the table,
    then renamed its own version over the other's. The write holds the table's lock from read to rename."""
    table = str(tmp_path / "errors")
    run_at_once(_rewrite_own_rows, [(table, stage, 15) for stage in ("captions", "parse")])
    rows = read_table(TABLES["errors"], table).to_pylist()
    assert sorted(r["item_id"] for r in rows) == [f"{s}-{k}" for s in ("captions", "parse") for k in range(3)]
    assert {r["message"] for r in rows} == {"round 14"}


def test_a_streamed_table_is_written_as_the_same_parts_as_one_table(tmp_path):
    import hashlib

    spec = TABLES["errors"]
    rows = [dict(stage="s", item_id=str(k), reason="r", message=f"m{k}") for k in range(23)]

    def parts(folder):
        return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("part-*.parquet"))]

    whole = write_table(spec, tmp_path / "whole", spec.from_rows(rows), rows_per_part=5)
    streamed = write_table(spec, tmp_path / "streamed", (spec.from_rows(rows[k:k + 5]) for k in range(0, 23, 5)),
                           rows_per_part=5)
    assert whole["rows"] == streamed["rows"] == 23
    assert len(parts(tmp_path / "whole")) == 5 and parts(tmp_path / "whole") == parts(tmp_path / "streamed")
    # nothing streamed: the one empty part of an empty table
    write_table(spec, tmp_path / "empty", spec.from_rows([]))
    write_table(spec, tmp_path / "none", iter([]))
    assert parts(tmp_path / "empty") == parts(tmp_path / "none") and len(parts(tmp_path / "none")) == 1
    assert read_table(spec, tmp_path / "none").num_rows == 0
