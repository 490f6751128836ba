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


def run_checks(tables: dict[str, str | Path], params: dict | None = None,
               only: list[str] | None = None) -> list[CheckResult]:
    """Run the checks of every table in ``tables`` ({name: dir}); checks needing absent tables are skipped."""
    import duckdb

    params = {**DEFAULT_PARAMS, **(params or {})}
    con = duckdb.connect()
    for name, path in tables.items():
        spec = TABLES[name]
        files = [str(f) for f in table_files(spec, path)]
        listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        con.execute(f"create view {name} as select * from read_parquet([{listing}])")
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
