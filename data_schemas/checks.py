"""Run every table's DuckDB checks over a set of table directories; the result is a check table. Before any check
trusts a manifest, a table a flow stage wrote is compared with that stage's record (``verify_recorded``)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from . import TABLES, table_module
from ._read import read_manifest, table_files, verify_table
from ._spec import MANIFEST, TableError, TableSpec

@dataclass
class CheckParams:
    """The checks' thresholds (``validate.params``, ``macco validate --params``): typed, so a misspelt key or a
    value of the wrong type is a config error, never a check run at its default or a value spliced into SQL."""
    eot_token_id: int = 49407  # CLIP BPE's end-of-text id (the token_masks check of the EOT position)
    min_text_mask_coverage: float = 0.5  # share of captions with a relation or attribute token mask
    min_grounded_coverage: float = 0.5  # share of attribute/relation phrases with a box
    # a table of 0 rows fails its ``<table>.not_empty`` check (a source that read nothing passed every check, then
    # training failed on it); true accepts empty tables (``errors`` is never checked: empty is its good state)
    allow_empty_tables: bool = False

    def __post_init__(self):
        from .config import check_ranges

        check_ranges(self, "validate.params", non_negative=("eot_token_id",),
                     probability=("min_text_mask_coverage", "min_grounded_coverage"))


def check_params(params: "CheckParams | dict | None", where: str = "validate.params") -> CheckParams:
    """``params`` as ``CheckParams`` (a mapping through ``from_dict``: unknown keys and wrong types refused)."""
    from .config import from_dict

    return params if isinstance(params, CheckParams) else from_dict(CheckParams, params or {}, where)


@dataclass
class CheckResult:
    check: str
    table: str
    bad_rows: int
    status: str  # "pass" | "fail" | "skip"
    examples: list[str]
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _dirs(paths) -> list:
    return paths if isinstance(paths, list) else [paths]


def _sql_list(files: list[Path], base: str | Path | None = None) -> str:
    """SQL list literal of ``files``: absolute paths, or relative to ``base`` (the folder of a DuckDB file whose
    views travel with it: DuckDB resolves them against its working directory or ``file_search_path``)."""
    import os

    paths = [str(Path(f).resolve()) if base is None else os.path.relpath(Path(f).resolve(), Path(base).resolve())
             for f in files]
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def _legacy() -> dict:
    """``eval_results.LEGACY``, its module imported on use: the flow's validate reads no history, so the history's
    schema is no part of its code version."""
    return table_module("eval_results").LEGACY


def _version_of(name: str, d) -> int | None:
    """An ``eval_results`` table's schema version when it is an earlier one (``eval_results.LEGACY``), else None."""
    if name != "eval_results":
        return None
    version = int(read_manifest(d, name).get("schema_version", -1))
    return version if version in _legacy() else None


def _spec_of(name: str, d) -> TableSpec:
    """The spec a table directory is read with: its own schema version's (``eval_results`` versions 1, 2 too)."""
    version = _version_of(name, d)
    return _legacy()[version][0] if version is not None else TABLES[name]


def parquet_listing(name: str, paths: str | Path | list, base: str | Path | None = None) -> str:
    """SQL list literal of the validated part files of one table (one or several directories); ``_sql_list``."""
    return _sql_list([f for d in _dirs(paths) for f in table_files(TABLES[name], d)], base)


def view_sql(name: str, paths: str | Path | list, base: str | Path | None = None) -> str:
    """The select a table's view runs: its validated part files (relative to ``base`` when given); for
    ``eval_results`` also the tables written in an earlier schema version, mapped onto the current columns (the
    history keeps every row)."""
    if name != "eval_results":
        return f"select * from read_parquet({parquet_listing(name, paths, base)})"
    legacy = _legacy()
    by_version: dict = {}
    for d in _dirs(paths):
        by_version.setdefault(_version_of(name, d), []).append(d)
    selects = [f"select * from read_parquet({parquet_listing(name, by_version.pop(None), base)})"] \
        if None in by_version else []
    for version, dirs in sorted(by_version.items()):
        spec, select, _ = legacy[version]
        selects.append(select(_sql_list([f for d in dirs for f in table_files(spec, d)], base)))
    return " union all by name ".join(selects)


def table_paths(tables: dict[str, str | Path | list]) -> list[Path]:
    """Every validated part file the views of ``tables`` read (what ``macco sql`` lets a query open)."""
    return [Path(f).resolve() for name, paths in tables.items() for d in _dirs(paths)
            for f in table_files(_spec_of(name, d), d)]


def create_views(con, tables: dict[str, str | Path | list], base: str | Path | None = None) -> None:
    for name, paths in tables.items():
        con.execute(f"create or replace view {name} as {view_sql(name, paths, base)}")


STAGE_RECORD = "stage.json"  # what a flow stage writes beside its tables (flows.runner): each table's rows and hash


def recorded_difference(path: str | Path, recorded: dict) -> str | None:
    """How the manifest of the table in ``path`` differs from what the stage that wrote it recorded (``recorded``:
    its ``{rows, content_hash}`` in the stage record), or None. The record is written after the table and names
    what the stage made: a manifest whose rows or content hash changed since (a part dropped and ``rows`` lowered to
    match; ``content_hash`` edited) is not what the stage made, and verifying that costs no byte of the parts."""
    path = Path(path)
    manifest = read_manifest(path)
    differs = [f"{k} {manifest.get(k)!r} (the stage recorded {recorded[k]!r})" for k in ("rows", "content_hash")
               if recorded.get(k) is not None and manifest.get(k) != recorded[k]]
    if not differs:
        return None
    return (f"table {manifest.get('table') or path.name}: {path / MANIFEST} says {' and '.join(differs)}: the "
            f"manifest was changed after its stage wrote it")


def _stage_entry(path: Path) -> dict | None:
    """The entry of the table in ``path`` in the record of the flow stage whose folder holds it, if there is one."""
    try:
        record = json.loads((path.parent / STAGE_RECORD).read_text())
        outputs = record.get("outputs", {}).values()
    except (OSError, ValueError, AttributeError):  # no record, or a damaged one (the runner names it, redoes it)
        return None
    return next((e for e in outputs if isinstance(e, dict) and e.get("kind") == "table"
                 and isinstance(e.get("dir"), str) and Path(e["dir"]).name == path.name), None)


def verify_recorded(tables: dict[str, str | Path | list]) -> None:
    """Every table of ``tables`` that a flow stage wrote checked against that stage's record
    (``recorded_difference``); raises the ``TableError`` naming the first that differs. A table a verb wrote has
    no record: its manifest's own consistency is what ``table_files`` checks."""
    for name in tables:
        for d in _dirs(tables[name]):
            entry = _stage_entry(Path(d))
            problem = recorded_difference(d, entry) if entry is not None else None
            if problem is not None:
                raise TableError(f"{problem}; rerun the stage that writes it (the flow redoes it)")


def verify_deep(tables: dict[str, str | Path | list], names: list[str] | None = None) -> None:
    """Re-hash every part of ``tables`` (or of ``names``) against its manifest, trusting no size or mtime; raises
    the ``TableError`` naming the first table and part that changed."""
    for name in names or list(tables):
        for d in _dirs(tables[name]):
            verify_table(d, table=name, deep=True)


def unreadable(tables: dict[str, str | Path | list], names: list[str], exc: Exception) -> TableError:
    """The error for a DuckDB failure reading ``names``' parts: the part that changed since it was written when a
    deep check finds one, else the tables and their folders with DuckDB's message."""
    try:
        verify_deep(tables, names)
    except TableError as found:
        return TableError(f"{found} (DuckDB: {' '.join(str(exc).split())[:200]})")
    where = "; ".join(f"table {n}: {', '.join(str(d) for d in _dirs(tables[n]))}" for n in names)
    return TableError(f"DuckDB could not read the parts of {where}: {' '.join(str(exc).split())[:300]}")


def read_failure(exc: Exception, tables: dict[str, str | Path | list]) -> bool:
    """Whether a DuckDB error is a failure to read one of the tables' part files (not a bad query)."""
    return any(str(f) in str(exc) for f in table_paths(tables))


MAY_BE_EMPTY = ("errors",)  # no row is the good state of an errors table


def not_empty(con, name: str, tables: dict, allow: bool) -> CheckResult:
    """The ``<table>.not_empty`` check: a table of 0 rows fails (every other check passes vacuously on it)."""
    rows = con.execute(f"select count(*) from {name}").fetchone()[0]
    where = ", ".join(str(d) for d in _dirs(tables[name]))
    if rows or allow:
        return CheckResult(f"{name}.not_empty", name, 0, "pass", [], f"{rows} rows")
    return CheckResult(f"{name}.not_empty", name, 0, "fail",
                       [f"{where} holds 0 rows (validate.params allow_empty_tables: true accepts empty tables)"])


def run_checks(tables: dict[str, str | Path | list], params: CheckParams | dict | None = None,
               only: list[str] | None = None) -> list[CheckResult]:
    """Run the checks of every table in ``tables`` ({name: dir(s)}); checks needing absent tables are skipped; a
    table of 0 rows fails ``<table>.not_empty`` unless ``allow_empty_tables``. A part DuckDB cannot read is a
    ``TableError`` naming the table and, where a deep check finds it, the part."""
    import duckdb

    params = asdict(check_params(params))
    verify_recorded(tables)  # a manifest changed since its stage recorded it: named before any check trusts it
    con = duckdb.connect()
    create_views(con, tables)
    results: list[CheckResult] = []
    for name in tables:
        spec = TABLES[name]
        if name not in MAY_BE_EMPTY and (not only or f"{name}.not_empty" in only):
            results.append(not_empty(con, name, tables, params["allow_empty_tables"]))
        for chk in spec.checks:
            if only and chk.name not in only:
                continue
            missing = [n for n in chk.needs if n not in tables]
            if missing:
                results.append(CheckResult(chk.name, name, 0, "skip", [], f"needs table(s) {', '.join(missing)}"))
                continue
            sql = chk.sql.format(**params)
            key = chk.key or spec.key
            try:
                n_bad = con.execute(f"select count(*) from ({sql})").fetchone()[0]
                examples: list[str] = []
                if n_bad:
                    cols = ", ".join(key)
                    rows = con.execute(f"select {cols} from ({sql}) limit 5").fetchall()
                    examples = [", ".join(f"{k}={v}" for k, v in zip(key, r)) for r in rows]
            except (duckdb.IOException, duckdb.InvalidInputException, duckdb.SerializationException) as exc:
                con.close()
                raise unreadable(tables, [name, *chk.needs], exc) from exc
            results.append(CheckResult(chk.name, name, int(n_bad), "fail" if n_bad else "pass", examples))
    con.close()
    return results
