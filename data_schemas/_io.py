"""Writing a table: a table is a directory of Parquet part files plus ``manifest.json`` written last (the spec
and errors: ``_spec``; reading and verifying: ``_read``).

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

import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ._read import read_manifest, read_table, refuse_unreadable, table_files
from ._spec import MANIFEST, TableError, TableSpec, _file_sha256, _sha256_files


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


def temp_name(path: str | Path) -> Path:
    """A temporary name beside ``path``, unique to this process and call (two writers never share one)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")


def replace_file(path: str | Path, write) -> Path:
    """``write(tmp)`` to a temporary file unique to this writer, the mode a plain ``open()`` gives, then renamed
    over ``path`` (atomic: a reader sees the old file or the new one, never a half-written one). The temporary file
    has ``path``'s own name inside a private hidden folder beside it, so a writer that records its file name (torch's
    zip archive does) writes the same bytes as when writing ``path`` directly."""
    path = Path(path)
    folder = temp_name(path)
    folder.mkdir()
    tmp = folder / path.name
    try:
        write(tmp)
        apply_umask(tmp)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return path


def _write_part(table: pa.Table, path: Path) -> None:
    replace_file(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


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


_MADE_FROM: ContextVar[dict | None] = ContextVar("macco_made_from", default=None)


@contextmanager
def made_from(inputs: dict[str, str]):
    """Every table written inside records ``inputs`` ({name: content hash} of the tables, world or source its stage
    read) in its manifest as ``inputs``: its lineage, by which the verbs keep one run's tables together and refuse
    a table whose input changed under it (``pipeline.lineage``). Set by the runner around a stage's work."""
    token = _MADE_FROM.set(dict(inputs))
    try:
        yield
    finally:
        _MADE_FROM.reset(token)


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
    if _MADE_FROM.get() is not None or "inputs" in manifest:  # its lineage (``made_from``); absent: not recorded
        manifest["inputs"] = {**(_MADE_FROM.get() or {}), **manifest.get("inputs", {})}
    replace_file(staging / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True)))
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


ROWS_PER_PART = 500_000  # a table's rows per Parquet part


def write_table(spec: TableSpec, out_dir: str | Path, table: pa.Table | list[pa.Table] | Iterator[pa.Table], *,
                config: dict | None = None, code_version: str = "", rows_per_part: int = ROWS_PER_PART,
                extra: dict | None = None, replaces: dict[str, Iterable] | None = None) -> dict:
    """Write ``table`` atomically as ``out_dir/part-*.parquet`` + manifest; returns the manifest.

    ``replaces={column: values}``: the new rows replace only the old table's rows with those values in
    ``column``; its other rows are carried into the new table (the ``errors`` table shared by several stages).
    ``table`` may be an iterator of tables (a stage that streams its rows): each part is written as it comes, so
    only one part's rows are held; tables of ``rows_per_part`` rows give the parts one table of all rows would."""
    out_dir = Path(out_dir)
    refuse_unreadable(out_dir)  # before any work; checked again just before the rename
    with table_lock(out_dir):  # another writer of this table (the errors table: several stages) waits its turn
        return _write_table(spec, out_dir, table, config=config, code_version=code_version,
                            rows_per_part=rows_per_part, extra=extra, replaces=replaces)


def _write_table(spec: TableSpec, out_dir: Path, table: pa.Table | list[pa.Table], *, config: dict | None,
                 code_version: str, rows_per_part: int, extra: dict | None, replaces: dict[str, Iterable] | None
                 ) -> dict:
    """``write_table`` for a caller holding the table's lock."""
    streamed = not isinstance(table, (pa.Table, list))
    tables = [table] if isinstance(table, pa.Table) else table
    several = streamed or len(tables) > 1
    staging = out_dir.with_name(f".{out_dir.name}.tmp-{uuid.uuid4().hex}")
    staging.mkdir(parents=True)
    try:
        i = 0
        for t in tables:
            spec.assert_conforms(t)
            t = t.select(spec.schema.names).cast(spec.arrow_schema)
            for off in range(0, max(t.num_rows, 1), rows_per_part):
                if t.num_rows == 0 and several:
                    break
                _write_part(t.slice(off, rows_per_part), staging / f"part-{i:05d}.parquet")
                i += 1
        if streamed and i == 0:  # nothing streamed: the table's one empty part, as for an empty table
            empty = spec.from_rows([]).select(spec.schema.names).cast(spec.arrow_schema)
            _write_part(empty, staging / "part-00000.parquet")
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
        shards = {self.shard_path(i).name for i in range(self.n_shards)}
        # a finalize killed after writing the carried rows' part leaves it beside the shards: carried again below
        leftover = [p for p in self.partial.glob("part-*.parquet") if p.name not in shards]
        for stray in list(self.partial.glob(".*.tmp")) + [self.partial / ".fingerprint"] + leftover:
            if stray.is_dir():  # a killed writer's private temporary folder
                shutil.rmtree(stray, ignore_errors=True)
            else:
                stray.unlink(missing_ok=True)
        with table_lock(self.out_dir):
            return _finalize(self.spec, self.partial, self.out_dir, config, code_version, extra, replaces)


def lock_file(target: Path, role: str) -> Path:
    """The one lock-file convention: ``.<name>.<role>.lock`` beside what it locks. ``output``: a stage's output
    (folder or table) held by the runner while it decides about it and writes it (``flows.runner.output_lock``);
    ``manifest``: a table's manifest, held while one writer reads it and writes the next (``table_lock``)."""
    return Path(target).with_name(f".{Path(target).name}.{role}.lock")


@contextmanager
def table_lock(out_dir: Path):
    """An exclusive lock (``flock`` on ``lock_file(out_dir, "manifest")``) held while a writer reads the manifest
    and writes the next one: concurrent appenders, in threads or processes, take turns and keep every row."""
    import fcntl

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file(out_dir, "manifest"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _holds(files: list[Path], column: str, value) -> bool:
    """Whether any row of the parts ``files`` has ``value`` in ``column`` (that column read alone)."""
    import pyarrow.compute as pc

    return any(pc.any(pc.equal(pq.read_table(f, columns=[column]).column(column), value)).as_py() for f in files)


def append_table(spec: TableSpec, out_dir: str | Path, table: pa.Table, *, config: dict | None = None,
                 code_version: str = "", legacy: dict[int, tuple[TableSpec, Any]] | None = None,
                 once: tuple[str, Any] | None = None) -> dict:
    """Append ``table``'s rows to the table in ``out_dir`` (created if absent) as one new part; returns the
    manifest. Parts are never rewritten: under ``table_lock`` the new part is written beside the old ones, then
    the manifest listing all of them replaces the old manifest atomically. A writer killed before that leaves a
    part no manifest lists (never read); a table that cannot be read is refused, never replaced.

    ``legacy``: {old schema version: (its spec, a function upgrading its rows)}; a table of such a version is
    first rewritten, every row upgraded, in the current schema. ``once=(column, value)``: nothing is appended
    if the table already holds a row with ``value`` in ``column`` (checked under the lock; e.g. an evaluation's
    ``eval_id``: a retried writer adds its rows once)."""
    out_dir = Path(out_dir)
    spec.assert_conforms(table)
    table = table.select(spec.schema.names).cast(spec.arrow_schema)
    with table_lock(out_dir):
        refuse_unreadable(out_dir)
        if not (out_dir / MANIFEST).exists():
            return _write_table(spec, out_dir, table, config=config, code_version=code_version,
                                rows_per_part=500_000, extra=None, replaces=None)
        old = read_manifest(out_dir, spec.name)
        version = int(old.get("schema_version", -1))
        if legacy and version in legacy:
            old_spec, upgrade = legacy[version]
            old = _write_table(spec, out_dir, upgrade(read_table(old_spec, out_dir)), config=old.get("config"),
                               code_version=old.get("code_version", ""), rows_per_part=500_000,
                               extra={"upgraded_from_version": version}, replaces=None)
        files = table_files(spec, out_dir)  # the old parts are still what the manifest says (else: an error)
        if once is not None and _holds(files, *once):
            return old
        name = f"part-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}.parquet"
        _write_part(table, out_dir / name)
        parts = [out_dir / p for p in old["parts"]] + [out_dir / name]
        info = {**old.get("part_info", {}), **_part_info([out_dir / name])}
        manifest = {**old, "rows": sum(i["rows"] for i in info.values()), "parts": [p.name for p in parts],
                    "part_info": info, "content_hash": _sha256_files(parts), "config": config or old.get("config", {}),
                    "code_version": code_version or old.get("code_version", ""),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        replace_file(out_dir / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True)))
        return manifest
