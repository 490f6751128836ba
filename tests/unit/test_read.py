"""data_schemas/_read.py: a table reads back as written; manifest and schema errors name the table."""
import pyarrow as pa
import pytest

from data_schemas import TABLES, TableError, read_table, write_table
from tests_support import clean_rows


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
