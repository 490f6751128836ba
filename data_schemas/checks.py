"""Run every table's DuckDB checks over a set of table directories; the result is a check table."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from . import TABLES
from ._io import table_files

DEFAULT_PARAMS = {
    "eot_token_id": 49407,
    "min_text_mask_coverage": 0.5,
    "min_grounded_coverage": 0.5,
}


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


def parquet_listing(name: str, paths: str | Path | list) -> str:
    """SQL list literal of the validated part files of one table (one or several directories)."""
    dirs = paths if isinstance(paths, list) else [paths]
    files = [str(Path(f).resolve()) for d in dirs for f in table_files(TABLES[name], d)]
    return "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"


def create_views(con, tables: dict[str, str | Path | list]) -> None:
    for name, paths in tables.items():
        con.execute(f"create or replace view {name} as select * from read_parquet({parquet_listing(name, paths)})")


def run_checks(tables: dict[str, str | Path | list], params: dict | None = None,
               only: list[str] | None = None) -> list[CheckResult]:
    """Run the checks of every table in ``tables`` ({name: dir(s)}); checks needing absent tables are skipped."""
    import duckdb

    params = {**DEFAULT_PARAMS, **(params or {})}
    con = duckdb.connect()
    create_views(con, tables)
    results: list[CheckResult] = []
    for name in tables:
        spec = TABLES[name]
        for chk in spec.checks:
            if only and chk.name not in only:
                continue
            missing = [n for n in chk.needs if n not in tables]
            if missing:
                results.append(CheckResult(chk.name, name, 0, "skip", [], f"needs table(s) {', '.join(missing)}"))
                continue
            sql = chk.sql.format(**params)
            key = chk.key or spec.key
            n_bad = con.execute(f"select count(*) from ({sql})").fetchone()[0]
            examples: list[str] = []
            if n_bad:
                cols = ", ".join(key)
                rows = con.execute(f"select {cols} from ({sql}) limit 5").fetchall()
                examples = [", ".join(f"{k}={v}" for k, v in zip(key, r)) for r in rows]
            results.append(CheckResult(chk.name, name, int(n_bad), "fail" if n_bad else "pass", examples))
    con.close()
    return results
