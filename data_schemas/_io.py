"""Shared table I/O: a table is a directory of Parquet part files plus ``manifest.json`` written last.

Writers stage into a hidden temporary directory next to the destination and rename it into place, so a
killed writer never leaves a directory that has a manifest (and a table without a manifest is never read).
Sharded writers keep finished shards in ``<dir>.partial/`` so a resumed stage redoes only unfinished shards.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"


class TableError(ValueError):
    """A table on disk is missing, incomplete or does not match its schema."""


@dataclass(frozen=True)
class Check:
    """A DuckDB check: ``sql`` selects the offending rows (zero rows = pass).

    The SQL may name any table by its name (a view over its Parquet parts) and use ``{param}`` placeholders
    filled from the thresholds given to the runner.
    """

    name: str
    sql: str
    needs: tuple[str, ...] = ()  # other tables the query joins
    key: tuple[str, ...] = ()  # columns shown as example keys (defaults to the table key)


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    key: tuple[str, ...]
    version: int
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.schema.with_metadata({"table": self.name, "schema_version": str(self.version)})

    def not_null(self) -> list[str]:
        return [f.name for f in self.schema if not f.nullable]

    def from_rows(self, rows: list[dict[str, Any]]) -> pa.Table:
        """Build a typed table from row dicts, naming the table/column/value on a type error."""
        try:
            table = pa.Table.from_pylist(rows, schema=self.arrow_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise TableError(f"table {self.name}: rows do not match the schema: {exc}") from exc
        self.assert_conforms(table)
        return table

    def assert_conforms(self, table: pa.Table) -> None:
        for col in self.schema.names:
            if col not in table.column_names:
                raise TableError(f"table {self.name}: missing column {col!r} ({self.schema.field(col).type})")
        for name in self.not_null():
            nulls = table.column(name).null_count
            if nulls:
                raise TableError(f"table {self.name}: column {name!r} is non-nullable but has {nulls} nulls")


def _sha256_files(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _write_part(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def _finalize(spec: TableSpec, staging: Path, out_dir: Path, config: dict | None, code_version: str,
              extra: dict | None = None) -> dict:
    parts = sorted(staging.glob("part-*.parquet"))
    if not parts:  # always at least one (possibly empty) part so DuckDB globs resolve
        _write_part(spec.arrow_schema.empty_table(), staging / "part-00000.parquet")
        parts = sorted(staging.glob("part-*.parquet"))
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    manifest = {
        "table": spec.name,
        "schema_version": spec.version,
        "rows": rows,
        "parts": [p.name for p in parts],
        "content_hash": _sha256_files(parts),
        "config": config or {},
        "code_version": code_version,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **(extra or {}),
    }
    tmp_manifest = staging / f".{MANIFEST}.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    os.replace(tmp_manifest, staging / MANIFEST)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if out_dir.exists():
        trash = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex}")
        os.replace(out_dir, trash)
        os.replace(staging, out_dir)
        shutil.rmtree(trash)
    else:
        os.replace(staging, out_dir)
    return manifest


def write_table(spec: TableSpec, out_dir: str | Path, table: pa.Table | list[pa.Table], *,
                config: dict | None = None, code_version: str = "", rows_per_part: int = 500_000,
                extra: dict | None = None) -> dict:
    """Write ``table`` atomically as ``out_dir/part-*.parquet`` + manifest; returns the manifest."""
    out_dir = Path(out_dir)
    tables = table if isinstance(table, list) else [table]
    staging = out_dir.with_name(f".{out_dir.name}.tmp-{uuid.uuid4().hex}")
    staging.mkdir(parents=True)
    try:
        i = 0
        for t in tables:
            spec.assert_conforms(t)
            t = t.select(spec.schema.names).cast(spec.arrow_schema)
            for off in range(0, max(t.num_rows, 1), rows_per_part):
                if t.num_rows == 0 and len(tables) > 1:
                    break
                _write_part(t.slice(off, rows_per_part), staging / f"part-{i:05d}.parquet")
                i += 1
        return _finalize(spec, staging, out_dir, config, code_version, extra)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


class ShardedTableWriter:
    """Writes one part per shard into ``<out_dir>.partial/``; finished shards survive a kill.

    ``finalize`` publishes the table (manifest + rename) once every shard is present.
    """

    def __init__(self, spec: TableSpec, out_dir: str | Path, n_shards: int, fingerprint: str = ""):
        self.spec, self.out_dir, self.n_shards = spec, Path(out_dir), n_shards
        self.partial = self.out_dir.with_name(self.out_dir.name + ".partial")
        stamp = self.partial / ".fingerprint"
        if stamp.exists() and stamp.read_text() != fingerprint:
            shutil.rmtree(self.partial, ignore_errors=True)  # shards of another config/input: not reusable
        self.partial.mkdir(parents=True, exist_ok=True)
        if not stamp.exists():  # atomic, so concurrent shard writers never read a half-written stamp
            tmp = self.partial / f".fingerprint.{uuid.uuid4().hex}.tmp"
            tmp.write_text(fingerprint)
            os.replace(tmp, stamp)

    def shard_path(self, i: int) -> Path:
        return self.partial / f"part-{i:05d}.parquet"

    def has_shard(self, i: int) -> bool:
        return self.shard_path(i).exists()

    def done_shards(self) -> list[int]:
        return [i for i in range(self.n_shards) if self.has_shard(i)]

    def write_shard(self, i: int, table: pa.Table) -> None:
        self.spec.assert_conforms(table)
        _write_part(table.select(self.spec.schema.names).cast(self.spec.arrow_schema), self.shard_path(i))

    def finalize(self, *, config: dict | None = None, code_version: str = "", extra: dict | None = None) -> dict:
        missing = [i for i in range(self.n_shards) if not self.has_shard(i)]
        if missing:
            raise TableError(f"table {self.spec.name}: shards {missing[:10]} not written; cannot finalize")
        for stray in list(self.partial.glob(".*.tmp")) + [self.partial / ".fingerprint"]:
            stray.unlink(missing_ok=True)
        return _finalize(self.spec, self.partial, self.out_dir, config, code_version, extra)


def read_manifest(path: str | Path, table: str | None = None) -> dict:
    path = Path(path)
    mpath = path / MANIFEST
    name = table or path.name
    if not path.is_dir():
        raise TableError(f"table {name}: {path} does not exist")
    if not mpath.exists():
        raise TableError(f"table {name}: {path} is incomplete (no {MANIFEST}); rerun the stage that writes it")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise TableError(f"table {name}: {mpath} is not valid JSON: {exc}") from exc
    for part in manifest.get("parts", []):
        if not (path / part).exists():
            raise TableError(f"table {name}: part {part} listed in {mpath} is missing")
    return manifest


def is_complete(path: str | Path) -> bool:
    try:
        read_manifest(path)
    except TableError:
        return False
    return True


def check_parquet_schema(spec: TableSpec, file: Path) -> None:
    actual = pq.read_schema(file)
    for f in spec.schema:
        if f.name not in actual.names:
            raise TableError(f"table {spec.name}: {file}: missing column {f.name!r} (expected {f.type})")
        got = actual.field(f.name).type
        if not got.equals(f.type):
            raise TableError(f"table {spec.name}: {file}: column {f.name!r} has type {got}, expected {f.type}")
    ver = (actual.metadata or {}).get(b"schema_version")
    if ver is not None and int(ver) != spec.version:
        raise TableError(f"table {spec.name}: {file}: schema_version {int(ver)}, expected {spec.version}")


def table_files(spec: TableSpec, path: str | Path) -> list[Path]:
    """Validated part files of a complete table (manifest present, versions and schema match)."""
    path = Path(path)
    manifest = read_manifest(path, spec.name)
    if manifest.get("table") != spec.name:
        raise TableError(f"{path}: holds table {manifest.get('table')!r}, expected {spec.name!r}")
    if int(manifest.get("schema_version", -1)) != spec.version:
        raise TableError(f"table {spec.name}: {path} has schema_version {manifest.get('schema_version')}, "
                         f"expected {spec.version}")
    files = [path / p for p in manifest["parts"]]
    for f in files:
        check_parquet_schema(spec, f)
    return files


def read_table(spec: TableSpec, path: str | Path, columns: list[str] | None = None) -> pa.Table:
    files = table_files(spec, path)
    tables = [pq.read_table(f, columns=columns, schema=spec.arrow_schema) if columns is None
              else pq.read_table(f, columns=columns) for f in files]
    return pa.concat_tables(tables) if tables else spec.arrow_schema.empty_table()
