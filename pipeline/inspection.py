"""``macco inspect`` and ``macco sql``: a summary of the mask tables, a ``macco.duckdb`` file with views over
them, and queries over the same views."""
from __future__ import annotations

import json
from pathlib import Path

from data_schemas.checks import create_views


def connect(tables: dict, database: str | Path = ":memory:"):
    """A duckdb connection holding one view per table over its validated part files (absolute paths): the views
    of ``macco.duckdb``, which ``macco sql`` queries without writing the file."""
    import duckdb

    con = duckdb.connect(str(database))
    create_views(con, tables)
    return con


# the storage format of macco.duckdb: one the `duckdb` command of the install (duckdb-cli 1.5) opens, written by
# the Python duckdb 2 (whose own default format that CLI cannot read)
DUCKDB_FILE_STORAGE = "v1.4.0"
DUCKDB_FILE = "macco.duckdb"


def write_duckdb(tables: dict, db_path: str | Path) -> Path:
    """(Re)create ``db_path`` with the views of ``connect`` (in a storage format the ``duckdb`` command reads),
    written beside it and renamed over it (an open ``duckdb`` shell never sees half a file). The views name the part
    files relative to the file's folder: a copied ``artifacts/`` opens its own tables, never the original's
    (opened from that folder, or with ``file_search_path`` set to it)."""
    import duckdb

    from data_schemas import replace_file

    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        con = duckdb.connect(config={"file_search_path": str(db_path.parent.resolve())})  # the views bind there
        con.execute(f"attach '{str(tmp).replace(chr(39), chr(39) * 2)}' as views "
                    f"(storage_version '{DUCKDB_FILE_STORAGE}')")
        con.execute("use views")
        create_views(con, tables, base=db_path.parent)
        con.close()

    return replace_file(db_path, write)


def refresh_duckdb(root: str | Path) -> Path | None:
    """Rewrite ``root/macco.duckdb`` (where ``macco inspect`` wrote one) over the tables under ``root`` now: its views
    name fixed part files, so a new evaluation or a new stage's tables would not show in it otherwise."""
    from pipeline.validate import discover_tables

    import sys

    from pipeline.lineage import LineageError

    db = Path(root) / DUCKDB_FILE
    if not db.is_file():
        return None
    try:
        return write_duckdb(discover_tables(root), db)
    except LineageError as exc:  # the results are written; only the views wait for one consistent run
        print(f"{db} not refreshed: {exc}", file=sys.stderr)
        return None


def summarize(tables: dict) -> dict:
    con = connect(tables)
    out: dict = {"rows": {n: con.execute(f"select count(*) from {n}").fetchone()[0] for n in tables}}
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    if "token_masks" in tables:
        share, rel, att = q("select avg(case when len(relation_idx) + len(attribute_idx) > 0 then 1.0 else 0 end),"
                            " avg(len(relation_idx)), avg(len(attribute_idx)) from token_masks")[0]
        out["text_mask_coverage"] = share
        out["masked_relation_tokens_per_caption"] = rel
        out["masked_attribute_tokens_per_caption"] = att
        out["unmatched_concepts"] = q("select coalesce(sum(len(unmatched)), 0) from token_masks")[0][0]
        out["truncated_captions"] = q("select count(*) from token_masks where truncated")[0][0]
    if "scene_graphs" in tables:
        for kind in ("relation", "attribute"):
            out[f"top_{kind}s"] = q(f"select lower(text), count(*) c from scene_graphs where kind = '{kind}' "
                                    f"group by 1 order by c desc, 1 limit 10")
    if "patch_masks" in tables:
        out["masked_patches_per_phrase"] = q(
            "select grid, avg(len(patch_idx)), min(len(patch_idx)), max(len(patch_idx)) from patch_masks "
            "group by grid order by grid")
    if "regions" in tables and "scene_graphs" in tables:
        out["grounded_phrase_share"] = q(
            "select avg(case when r.caption_id is null then 0.0 else 1.0 end) from scene_graphs s left join "
            "(select distinct caption_id, concept_id from regions) r using (caption_id, concept_id) "
            "where s.kind in ('attribute', 'relation')")[0][0]
    if "errors" in tables:
        out["errors"] = q("select stage, reason, count(*) from errors group by all order by 3 desc")
    con.close()
    return out


# the columns of the summary's lists (what ``format_summary`` prints above their rows)
SUMMARY_COLUMNS = {"top_relations": ("relation", "count"), "top_attributes": ("attribute", "count"),
                   "masked_patches_per_phrase": ("grid", "mean", "min", "max"),
                   "errors": ("stage", "reason", "rows")}


def format_summary(s: dict) -> str:
    lines = ["rows per table:"] + [f"  {k:<13} {v:>9}" for k, v in s["rows"].items()]
    for k, v in s.items():
        if k == "rows":
            continue
        if isinstance(v, list):
            lines.append(f"{k}:")
            rows = [[f"{x:.2f}" if isinstance(x, float) else str(x) for x in row] for row in v]
            lines += [f"  {' | '.join(row)}" for row in [list(SUMMARY_COLUMNS.get(k, ())), *rows] if row]
        elif isinstance(v, float):
            lines.append(f"{k}: {v:.3f}")
        else:
            lines.append(f"{k}: {v}")
    return "\n".join(lines)



class QueryRefused(ValueError):
    """A ``macco sql`` statement that is not one read-only query."""


class QueryTimedOut(QueryRefused):
    """A ``macco sql`` query that ran past its time limit (``--timeout``): interrupted."""


SQL_TIMEOUT_S = 60.0  # macco sql --timeout's default: a recursive CTE without an end otherwise runs forever

READ_ONLY_STATEMENTS = ("SELECT", "EXPLAIN")  # select, with, from, values, describe, show, summarize, explain


def read_only_connection(tables: dict):
    """The views of ``connect`` in a connection that can read nothing but their part files and write nothing:
    every file outside them is refused by DuckDB (``enable_external_access`` off, ``allowed_paths`` the parts),
    extensions are neither installed nor loaded, and ``lock_configuration`` keeps a query from undoing it."""
    from data_schemas.checks import table_paths

    con = connect(tables)
    # no spilling folder: DuckDB lets a query read its temporary directory (./.tmp by default) whatever
    # allowed_paths says
    con.execute("set temp_directory = ''")
    con.execute("set allowed_paths = ?", [[str(p) for p in table_paths(tables)]])
    for setting in ("enable_external_access = false", "autoinstall_known_extensions = false",
                    "autoload_known_extensions = false", "lock_configuration = true"):
        con.execute(f"set {setting}")
    return con


def check_read_only(sql: str) -> None:
    """Raise ``QueryRefused`` unless ``sql`` is exactly one SELECT-like statement (COPY, ATTACH, CREATE, INSERT,
    SET, PRAGMA, INSTALL, LOAD, ... are refused); duckdb's parser errors pass through."""
    import duckdb

    statements = duckdb.extract_statements(sql)
    if len(statements) != 1:
        raise QueryRefused(f"one query at a time ({len(statements)} statements given)")
    kind = statements[0].type.name
    if kind == "EXPLAIN":  # EXPLAIN ANALYZE runs its statement: only a SELECT may be explained
        import re

        inner = re.match(r"\s*explain\s+(?:analy[sz]e\s+)?(.*)", statements[0].query, re.IGNORECASE | re.DOTALL)
        explained = duckdb.extract_statements(inner.group(1)) if inner else []
        kind = explained[0].type.name if len(explained) == 1 else "EXPLAIN"
        if kind == "EXPLAIN":
            raise QueryRefused("EXPLAIN of this statement is refused: macco sql is read-only (it explains a select)")
    if kind not in READ_ONLY_STATEMENTS:
        raise QueryRefused(f"{kind} statements are refused: macco sql is read-only (select, with, describe, show, "
                           "summarize and explain only)")


def query(tables: dict, sql: str, limit: int | None = None,
          timeout: float | None = SQL_TIMEOUT_S) -> tuple[list[str], list[tuple], int]:
    """(columns, rows, total rows) of the read-only query ``sql`` over the views of ``connect``; with ``limit``,
    the first ``limit`` rows only (and the total counted apart). Raises ``QueryRefused`` for a statement that is
    not one read-only query, ``QueryTimedOut`` past ``timeout`` seconds (None or 0: no limit; DuckDB's interrupt,
    from a timer thread) and duckdb's errors (``duckdb.Error``) for a bad one, e.g. a file outside the tables
    (``duckdb.PermissionException``)."""
    import math
    import threading

    import duckdb

    if timeout is not None and not timeout >= 0:
        raise QueryRefused(f"--timeout {timeout:g}: seconds >= 0 expected (0: no limit)")
    check_read_only(sql)
    con = read_only_connection(tables)
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(timeout, stop) if timeout and not math.isinf(timeout) else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        rel = con.sql(sql)
        if limit is None:
            rows = rel.fetchall()
            return list(rel.columns), rows, len(rows)
        return list(rel.columns), rel.limit(limit).fetchall(), rel.shape[0]
    except duckdb.InterruptException:
        if not fired.is_set():  # not the timer's interrupt
            raise
        raise QueryTimedOut(f"the query ran past its time limit of {timeout:g} s (--timeout) and was stopped; "
                            "raise --timeout (0: no limit)") from None
    finally:
        if timer is not None:
            timer.cancel()
        con.close()


def query_error(exc: Exception) -> str:
    """duckdb's message on one line: the error and its hints ("Did you mean ...", candidate columns), without
    the echoed statement and its caret line."""
    lines = [ln.strip() for ln in str(exc).splitlines()]
    return " ".join(ln for ln in lines if ln and not ln.startswith("LINE ") and set(ln) != {"^"})


def _cell(v, width: int) -> str:
    s = "NULL" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v).replace("\n", "\\n")
    return s if len(s) <= width else s[:width - 1] + "…"


def format_rows(columns: list[str], rows: list[tuple], total: int | None = None, width: int = 40) -> str:
    """An aligned text table (numbers right-aligned, cells cut at ``width`` characters, newlines as ``\\n``),
    then the row count and, where ``total`` exceeds the rows shown, how many were left out."""
    cells = [[_cell(v, width) for v in row] for row in rows]
    vals = [[r[j] for r in rows if r[j] is not None] for j in range(len(columns))]
    numeric = [bool(v) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) for v in vals]
    widths = [max([len(c)] + [len(r[j]) for r in cells]) for j, c in enumerate(columns)]

    def line(row):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(row, widths, numeric)).rstrip()

    out = [line(columns), "  ".join("-" * w for w in widths)] + [line(r) for r in cells]
    total = len(rows) if total is None else total
    if total > len(rows):
        out.append(f"({len(rows)} of {total} rows shown; {total - len(rows)} cut: raise --limit, or --csv/--json "
                   "for all)")
    else:
        out.append(f"({total} row{'' if total == 1 else 's'})")
    return "\n".join(out)


def _plain(v):
    """A value for CSV: lists and structs as JSON, NULL as an empty field."""
    if v is None:
        return ""
    return json.dumps(v, default=str) if isinstance(v, (list, dict)) else v


def write_csv(columns: list[str], rows: list[tuple], stream) -> None:
    import csv

    w = csv.writer(stream, lineterminator="\n")
    w.writerow(columns)
    w.writerows([_plain(v) for v in row] for row in rows)


def write_json(columns: list[str], rows: list[tuple], stream) -> None:
    """A JSON list of records, one per line (dates, decimals, blobs as strings)."""
    recs = [json.dumps(dict(zip(columns, row)), default=str) for row in rows]
    stream.write("[" + ",\n ".join(recs) + "]\n")
