"""Shared table I/O: a table is a directory of Parquet part files plus ``manifest.json`` written last.

Writers stage into a hidden temporary directory next to the destination and rename it into place, so a
killed writer never leaves a directory that has a manifest (and a table without a manifest is never read).
Sharded writers keep finished shards in ``<dir>.partial/`` so a resumed stage redoes only unfinished shards.

A table counts as complete only if its parts still are what the manifest describes: every part listed and
readable, its row count (from the Parquet footer) as written, and the parts' content hash the manifest's. The
manifest records each part's size and mtime, and hashes computed since are cached by (path, size, mtime), so
the content check rehashes only parts that changed on disk. A directory whose manifest cannot be read is never
overwritten (it may hold the only copy of an appended table's history).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"


class InputFileError(ValueError):
    """A malformed or inconsistent input (a file, a table on disk); the message names the file and the field,
    line or value. The ``macco`` command prints it as one line (exit 2) instead of a traceback."""


def load_json(path: str | Path) -> Any:
    """A JSON input file: missing -> FileNotFoundError, malformed -> InputFileError, both naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: not valid JSON ({exc})") from exc


class TableError(InputFileError):
    """A table on disk is missing, incomplete, damaged or does not match its schema."""


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


def _umask() -> int:
    """The process umask, read from /proc where there is one (setting it to read it back races other threads)."""
    status = Path("/proc/self/status")
    lines = status.read_text().splitlines() if status.exists() else []
    for line in lines:
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | Path) -> None:
    """Give a file the mode a plain ``open()`` gives (0o666 less the umask).

    Writers that go through private temporary files (safetensors, ``tempfile``) leave 0o600, which colleagues
    sharing ``artifacts/`` cannot read; every file a table or an export consists of goes through this.
    """
    os.chmod(path, 0o666 & ~_umask())


def _write_part(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    apply_umask(tmp)
    os.replace(tmp, path)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _part_info(parts: list[Path]) -> dict[str, dict]:
    """{part name: rows, bytes, mtime_ns, sha256} as written: what a later check compares the files on disk with
    (``sha256`` lets ``verify_table(deep=True)`` name the one part that changed)."""
    info = {}
    for p in parts:
        st = p.stat()
        info[p.name] = {"rows": pq.ParquetFile(p).metadata.num_rows, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
                        "sha256": _file_sha256(p)}
    return info


def _carried_rows(spec: TableSpec, out_dir: Path, replaces: dict[str, Iterable] | None) -> pa.Table | None:
    """The rows of the table now in ``out_dir`` that a rewrite keeps: those whose ``column`` value is not among
    the values the new rows replace (``replaces={column: values}``; e.g. an errors table rewritten by the parse
    stage keeps the captions stage's rows). None without ``replaces`` or without a table there."""
    if not replaces or not (out_dir / MANIFEST).exists():
        return None
    import pyarrow.compute as pc

    old = read_table(spec, out_dir)
    keep = pa.array([True] * old.num_rows, pa.bool_())
    for column, values in replaces.items():
        keep = pc.and_(keep, pc.invert(pc.is_in(old.column(column), value_set=pa.array(sorted(set(values))))))
    return old.filter(keep)


def _finalize(spec: TableSpec, staging: Path, out_dir: Path, config: dict | None, code_version: str,
              extra: dict | None = None, replaces: dict[str, Iterable] | None = None) -> dict:
    carried = _carried_rows(spec, out_dir, replaces)
    if carried is not None and carried.num_rows:
        n = len(list(staging.glob("part-*.parquet")))
        _write_part(carried.select(spec.schema.names).cast(spec.arrow_schema), staging / f"part-{n:05d}.parquet")
    parts = sorted(staging.glob("part-*.parquet"))
    if not parts:  # always at least one (possibly empty) part so DuckDB globs resolve
        _write_part(spec.arrow_schema.empty_table(), staging / "part-00000.parquet")
        parts = sorted(staging.glob("part-*.parquet"))
    info = _part_info(parts)
    manifest = {
        "table": spec.name,
        "schema_version": spec.version,
        "rows": sum(i["rows"] for i in info.values()),
        "parts": [p.name for p in parts],
        "part_info": info,
        "content_hash": _sha256_files(parts),
        "config": config or {},
        "code_version": code_version,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **(extra or {}),
    }
    tmp_manifest = staging / f".{MANIFEST}.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    apply_umask(tmp_manifest)
    os.replace(tmp_manifest, staging / MANIFEST)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    refuse_unreadable(out_dir)
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
                extra: dict | None = None, replaces: dict[str, Iterable] | None = None) -> dict:
    """Write ``table`` atomically as ``out_dir/part-*.parquet`` + manifest; returns the manifest.

    ``replaces={column: values}``: the new rows replace only the old table's rows with those values in
    ``column``; its other rows are carried into the new table (the ``errors`` table shared by several stages)."""
    out_dir = Path(out_dir)
    refuse_unreadable(out_dir)  # before any work; checked again just before the rename
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
        return _finalize(spec, staging, out_dir, config, code_version, extra, replaces)
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

    def finalize(self, *, config: dict | None = None, code_version: str = "", extra: dict | None = None,
                 replaces: dict[str, Iterable] | None = None) -> dict:
        missing = [i for i in range(self.n_shards) if not self.has_shard(i)]
        if missing:
            raise TableError(f"table {self.spec.name}: shards {missing[:10]} not written; cannot finalize")
        for stray in list(self.partial.glob(".*.tmp")) + [self.partial / ".fingerprint"]:
            stray.unlink(missing_ok=True)
        return _finalize(self.spec, self.partial, self.out_dir, config, code_version, extra, replaces)


@contextmanager
def table_lock(out_dir: Path):
    """An exclusive lock (``flock`` on ``.<name>.lock`` beside the table) held while a writer reads the manifest
    and writes the next one: concurrent appenders, in threads or processes, take turns and keep every row."""
    import fcntl

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(out_dir.with_name(f".{out_dir.name}.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def append_table(spec: TableSpec, out_dir: str | Path, table: pa.Table, *, config: dict | None = None,
                 code_version: str = "", legacy: dict[int, tuple[TableSpec, Any]] | None = None) -> dict:
    """Append ``table``'s rows to the table in ``out_dir`` (created if absent) as one new part; returns the
    manifest. Parts are never rewritten: under ``table_lock`` the new part is written beside the old ones, then
    the manifest listing all of them replaces the old manifest atomically. A writer killed before that leaves a
    part no manifest lists (never read); a table that cannot be read is refused, never replaced.

    ``legacy``: {old schema version: (its spec, a function upgrading its rows)}; a table of such a version is
    first rewritten, every row upgraded, in the current schema."""
    out_dir = Path(out_dir)
    spec.assert_conforms(table)
    table = table.select(spec.schema.names).cast(spec.arrow_schema)
    with table_lock(out_dir):
        refuse_unreadable(out_dir)
        if not (out_dir / MANIFEST).exists():
            return write_table(spec, out_dir, table, config=config, code_version=code_version)
        old = read_manifest(out_dir, spec.name)
        version = int(old.get("schema_version", -1))
        if legacy and version in legacy:
            old_spec, upgrade = legacy[version]
            old = write_table(spec, out_dir, upgrade(read_table(old_spec, out_dir)), config=old.get("config"),
                              code_version=old.get("code_version", ""), extra={"upgraded_from_version": version})
        table_files(spec, out_dir)  # the old parts are still what the manifest says (else: an error, no append)
        name = f"part-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}.parquet"
        _write_part(table, out_dir / name)
        parts = [out_dir / p for p in old["parts"]] + [out_dir / name]
        info = {**old.get("part_info", {}), **_part_info([out_dir / name])}
        manifest = {**old, "rows": sum(i["rows"] for i in info.values()), "parts": [p.name for p in parts],
                    "part_info": info, "content_hash": _sha256_files(parts), "config": config or old.get("config", {}),
                    "code_version": code_version or old.get("code_version", ""),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        tmp = out_dir / f".{MANIFEST}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        apply_umask(tmp)
        os.replace(tmp, out_dir / MANIFEST)
        return manifest


def _manifest_problem(mpath: Path) -> tuple[dict | None, str | None]:
    """(the manifest, None), or (None, why it cannot be read: bad JSON, not an object, not text)."""
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(manifest, dict):
        return None, f"not valid JSON (a JSON object expected, got {type(manifest).__name__})"
    return manifest, None


def refuse_unreadable(out_dir: str | Path) -> None:
    """Raise instead of letting a writer replace a directory that holds a table nobody can read.

    An unreadable manifest (or Parquet parts without one) means the rows cannot be checked or carried over:
    replacing the directory would silently drop them - for an appended table such as ``eval_results``, its
    whole history. A table with a readable manifest may be replaced (a rerun stage recomputes it).
    """
    out_dir = Path(out_dir)
    mpath = out_dir / MANIFEST
    aside = f"move it aside (e.g. mv {out_dir} {out_dir}.unreadable) and rerun"
    if mpath.exists():
        _, problem = _manifest_problem(mpath)
        if problem is not None:
            raise TableError(f"{mpath}: {problem}; refusing to overwrite the table in {out_dir}: {aside}")
    elif out_dir.is_dir() and any(out_dir.glob("*.parquet")):
        raise TableError(f"{out_dir}: holds Parquet parts but no {MANIFEST}; refusing to overwrite it: {aside}")


def read_manifest(path: str | Path, table: str | None = None) -> dict:
    """The manifest of the table in ``path``; a missing directory, manifest or listed part is a TableError.

    Checks presence only; ``verify_table`` (which ``is_complete`` and ``table_files`` run) checks content.
    """
    path = Path(path)
    mpath = path / MANIFEST
    name = table or path.name
    if not path.is_dir():
        raise TableError(f"table {name}: {path} does not exist")
    if not mpath.exists():
        raise TableError(f"table {name}: {path} is incomplete (no {MANIFEST}); rerun the stage that writes it")
    manifest, problem = _manifest_problem(mpath)
    if problem is not None:
        raise TableError(f"table {name}: {mpath} is {problem}")
    for part in manifest.get("parts", []):
        if not (path / part).exists():
            raise TableError(f"table {name}: part {part} listed in {mpath} is missing")
    return manifest


_HASHES: dict[tuple, str] = {}  # ((path, size, mtime_ns) of every part, in order) -> content hash
_HASH_CACHE_SIZE = 512


def _footer(path: Path, part: str, name: str) -> pq.FileMetaData:
    """A part's Parquet footer; an unreadable part is a TableError naming the table directory and the file."""
    try:
        return pq.read_metadata(path / part)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TableError(f"table {name}: {path}: {part} is not a readable Parquet file ({exc}); rerun the stage "
                         f"that writes it") from exc


def _content_hash(path: Path, manifest: dict) -> str:
    """The parts' content hash, without reading them when they are as written (size and mtime in the
    manifest) or as last hashed in this process (the cache, keyed by path, size and mtime)."""
    files = [path / p for p in manifest.get("parts", [])]
    stats = [f.stat() for f in files]
    written = manifest.get("part_info") or {}
    if written and all(written.get(f.name, {}).get("bytes") == st.st_size
                       and written[f.name].get("mtime_ns") == st.st_mtime_ns for f, st in zip(files, stats)):
        return manifest["content_hash"]
    key = tuple((os.path.abspath(f), st.st_size, st.st_mtime_ns) for f, st in zip(files, stats))
    if key not in _HASHES:
        if len(_HASHES) >= _HASH_CACHE_SIZE:
            _HASHES.pop(next(iter(_HASHES)), None)
        _HASHES[key] = _sha256_files(files)
    return _HASHES[key]


def _check_parts(path: Path, manifest: dict, name: str) -> dict[str, pq.FileMetaData]:
    """{part: footer}, after checking every part is readable and holds the rows the manifest says."""
    footers = {p: _footer(path, p, name) for p in manifest.get("parts", [])}
    written = manifest.get("part_info") or {}
    for part, meta in footers.items():
        want = written.get(part, {}).get("rows")
        if want is not None and meta.num_rows != want:
            raise TableError(f"table {name}: {path}: {part} has {meta.num_rows} rows, {MANIFEST} says {want}; "
                             f"it was changed after it was written: rerun the stage that writes it")
    total = sum(m.num_rows for m in footers.values())
    if "rows" in manifest and total != manifest["rows"]:
        raise TableError(f"table {name}: {path}: the parts hold {total} rows, {MANIFEST} says {manifest['rows']}; "
                         f"rerun the stage that writes it")
    return footers


def _check_content(path: Path, manifest: dict, name: str) -> None:
    """Raise unless the parts' content hash is the manifest's (when it records one)."""
    if "content_hash" not in manifest:
        return
    try:
        got = _content_hash(path, manifest)
    except OSError as exc:  # e.g. the table replaced by another writer while it was being checked
        raise TableError(f"table {name}: {path}: cannot read its parts ({exc})") from exc
    if got != manifest["content_hash"]:
        raise TableError(f"table {name}: {path}: the parts' content hash {got[:12]} differs from {MANIFEST}'s "
                         f"{str(manifest['content_hash'])[:12]}; a part was changed after it was written: "
                         f"rerun the stage that writes it")


def _check_deep(path: Path, manifest: dict, name: str) -> None:
    """Re-hash every part, trusting no size or mtime: a part whose sha256 is not the one recorded when it was
    written is named; for a manifest without per-part hashes, the whole content hash is compared."""
    for part, info in (manifest.get("part_info") or {}).items():
        if "sha256" in info and part in manifest.get("parts", []):
            got = _file_sha256(path / part)
            if got != info["sha256"]:
                raise TableError(f"table {name}: {path}: {part} has sha256 {got[:12]}, {MANIFEST} recorded "
                                 f"{info['sha256'][:12]} when it was written (same size and time: edited in "
                                 f"place); rerun the stage that writes it")
    if "content_hash" in manifest:
        got = _sha256_files([path / p for p in manifest.get("parts", [])])
        if got != manifest["content_hash"]:
            raise TableError(f"table {name}: {path}: the parts' content hash {got[:12]} differs from {MANIFEST}'s "
                             f"{str(manifest['content_hash'])[:12]}; rerun the stage that writes it")


def verify_table(path: str | Path, manifest: dict | None = None, table: str | None = None, *,
                 deep: bool = False) -> dict[str, pq.FileMetaData]:
    """Check that the parts are what the manifest says: readable, the row counts of their footers, the
    content hash (what the manifest records is checked; a foreign manifest may record less). The content check
    trusts a part whose size and mtime are as written; ``deep`` re-hashes every part and names the one that
    differs.

    Returns {part: footer}; raises TableError naming the table directory, the part and the mismatch.
    """
    path = Path(path)
    manifest = read_manifest(path, table) if manifest is None else manifest
    name = table or manifest.get("table") or path.name
    footers = _check_parts(path, manifest, name)
    if deep:
        _check_deep(path, manifest, name)
    else:
        _check_content(path, manifest, name)
    return footers


def is_complete(path: str | Path) -> bool:
    """Whether ``path`` holds a complete table that can be served as it is (manifest, parts, rows, content)."""
    try:
        verify_table(path)
    except TableError:
        return False
    return True


def check_parquet_schema(spec: TableSpec, file: Path, actual: pa.Schema | None = None) -> None:
    """Raise unless ``file`` (its Arrow schema ``actual`` if already read) has the spec's columns and version."""
    actual = pq.read_schema(file) if actual is None else actual
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
    """Validated part files of a complete table (manifest present, parts as written, versions and schema match)."""
    path = Path(path)
    manifest = read_manifest(path, spec.name)
    if manifest.get("table") != spec.name:
        raise TableError(f"{path}: holds table {manifest.get('table')!r}, expected {spec.name!r}")
    if int(manifest.get("schema_version", -1)) != spec.version:
        raise TableError(f"table {spec.name}: {path} has schema_version {manifest.get('schema_version')}, "
                         f"expected {spec.version}")
    for part, meta in _check_parts(path, manifest, spec.name).items():
        check_parquet_schema(spec, path / part, meta.schema.to_arrow_schema())
    _check_content(path, manifest, spec.name)  # after the schema, whose message says more about a foreign part
    return [path / p for p in manifest["parts"]]


def read_table(spec: TableSpec, path: str | Path, columns: list[str] | None = None) -> pa.Table:
    files = table_files(spec, path)
    tables = [pq.read_table(f, columns=columns, schema=spec.arrow_schema) if columns is None
              else pq.read_table(f, columns=columns) for f in files]
    return pa.concat_tables(tables) if tables else spec.arrow_schema.empty_table()
