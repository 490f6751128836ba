"""Reading a table: its manifest, the checks that its parts are still what the manifest says (readable, row
counts, content hash; ``deep``: every part re-hashed), and the rows. A directory whose manifest cannot be read
is never overwritten (it may hold the only copy of an appended table's history)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ._spec import MANIFEST, TableError, TableSpec, _file_sha256, _sha256_files


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
    whole history. A table with a readable manifest may be replaced (a rerun stage recomputes it); a non-empty
    directory that is no table (a user's folder given as a table path) never is.
    """
    out_dir = Path(out_dir)
    mpath = out_dir / MANIFEST
    aside = f"move it aside (e.g. mv {out_dir} {out_dir}.unreadable) and rerun"
    if out_dir.exists() and not out_dir.is_dir() or out_dir.is_symlink():
        raise TableError(f"{out_dir}: is a file, not a table folder; refusing to replace it: give a new or empty "
                         "directory for the table")
    if mpath.exists():
        _, problem = _manifest_problem(mpath)
        if problem is not None:
            raise TableError(f"{mpath}: {problem}; refusing to overwrite the table in {out_dir}: {aside}")
    elif out_dir.is_dir() and any(out_dir.glob("*.parquet")):
        raise TableError(f"{out_dir}: holds Parquet parts but no {MANIFEST}; refusing to overwrite it: {aside}")
    elif out_dir.is_dir() and any(out_dir.iterdir()):
        raise TableError(f"{out_dir}: is not a table (no {MANIFEST}) and is not empty; refusing to replace it: "
                         "give a new or empty directory for the table")


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
    parts = manifest.get("parts", [])
    if not isinstance(parts, list):
        raise TableError(f"table {name}: {mpath}: parts: a list of part file names expected")
    for part in parts:
        if not isinstance(part, str) or Path(part).name != part or not part.endswith(".parquet") or \
                part.startswith("."):
            raise TableError(f"table {name}: {mpath} lists part {str(part)[:80]!r}, not a part file of this folder "
                             "(a hand-edited manifest?): refused")
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


def _check_entries(path: Path, manifest: dict, name: str) -> None:
    """Raise unless the manifest agrees with itself: ``parts`` and the per-part entries (``part_info``) name the same
    parts and their recorded rows sum to ``rows`` (a hand-edited manifest that drops a part and lowers ``rows``
    would otherwise look complete). A manifest without per-part entries (a foreign one) records less: not checked."""
    written = manifest.get("part_info") or {}
    if not written:
        return
    where = f"table {name}: {path / MANIFEST}"
    if not isinstance(written, dict) or not all(isinstance(i, dict) and isinstance(i.get("rows"), int)
                                                 and not isinstance(i.get("rows"), bool) for i in written.values()):
        raise TableError(f"{where}: part_info is not one {{rows, bytes, mtime_ns, sha256}} entry per part; rerun "
                         "the stage that writes it")
    listed = manifest.get("parts", [])
    unlisted = sorted(set(written) - set(listed))
    if unlisted:
        lost = sum(written[p]["rows"] for p in unlisted)
        raise TableError(f"{where}: part_info records {', '.join(unlisted)} ({lost} rows), which parts does not list "
                         "(a part dropped from the manifest?); rerun the stage that writes it")
    unrecorded = [p for p in listed if p not in written]
    if unrecorded:
        raise TableError(f"{where}: parts lists {', '.join(unrecorded)}, which part_info does not record (a part "
                         "added to the manifest?); rerun the stage that writes it")
    recorded = sum(written[p]["rows"] for p in listed)
    if "rows" in manifest and recorded != manifest["rows"]:
        raise TableError(f"{where}: rows is {manifest['rows']}, its parts' entries record {recorded}; rerun the stage "
                         "that writes it")


def _check_parts(path: Path, manifest: dict, name: str) -> dict[str, pq.FileMetaData]:
    """{part: footer}, after checking the manifest agrees with itself (``_check_entries``) and every part is
    readable and holds the rows the manifest says."""
    _check_entries(path, manifest, name)
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
