"""``macco`` verbs that read the tables: validate, inspect, sql, agreement, report."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def add_parsers(sub) -> None:
    v = sub.add_parser("validate", help="run the DuckDB checks over tables; non-zero exit on failure")
    v.add_argument("path", type=Path, help="an artifacts root or one table directory")
    v.add_argument("--params", help='thresholds (data_schemas/checks.py CheckParams) as key=value pairs separated by '
                   'commas, e.g. min_text_mask_coverage=0.8,min_grounded_coverage=0.9, or as JSON, e.g. '
                   '\'{"min_text_mask_coverage": 0.8}\'')
    v.add_argument("--deep", action="store_true", help="first re-hash every part against its manifest (trusting "
                   "no size or mtime) and name the table and part that changed")
    v.add_argument("--run", metavar="FOLDER", help="where PATH holds tables of several runs (different lineage): the "
                   "run with tables under FOLDER (default: the newest, said in one line)")
    v.set_defaults(fn=cmd_validate)

    i = sub.add_parser("inspect", help="summarise the tables and write macco.duckdb with a view per table")
    i.add_argument("path", type=Path)
    i.add_argument("--db", help="duckdb file to write (default PATH/macco.duckdb)")
    i.add_argument("--run", metavar="FOLDER", help="where PATH holds tables of several runs (different lineage): the "
                   "run with tables under FOLDER (default: the newest, said in one line)")
    i.set_defaults(fn=cmd_inspect)

    sq = sub.add_parser("sql", help="run a DuckDB query over the tables (the views of macco inspect)",
                        description="run a DuckDB query over the complete tables under --root, one view per table "
                                    "(the views macco inspect writes to macco.duckdb)")
    sq.add_argument("query", help='e.g. "select grid, count(*) from patch_masks group by grid"')
    sq.add_argument("--root", type=Path, default=Path("artifacts"), help="artifacts root or one table directory "
                    "(default: artifacts/)")
    fmt = sq.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="every row as CSV on stdout")
    fmt.add_argument("--json", action="store_true", help="every row as a JSON list of records on stdout")
    sq.add_argument("--limit", type=int, default=50, help="rows the table shows (default 50; 0: all)")
    sq.add_argument("--timeout", type=float, default=60.0, help="seconds a query may run before it is stopped "
                    "(default 60; 0: no limit)")
    sq.add_argument("--run", metavar="FOLDER", help="where --root holds tables of several runs (different lineage): "
                    "the run with tables under FOLDER (default: the newest, said in one line)")
    sq.set_defaults(fn=cmd_sql)

    ag = sub.add_parser("agreement", help="our masked words and boxes vs MACCO's released file, on its captions",
                        description="compare our parse (scene_graphs) and grounding (regions) of MACCO's file's "
                                    "captions with the file's own masked words and phrase boxes: word precision / "
                                    "recall / F1, box IoU")
    ag.add_argument("official", type=Path, help="folder with the official and captions tables (macco captions "
                                                "FILE.tsv --source macco-tsv --out FOLDER)")
    ag.add_argument("ours", type=Path, help="folder (or artifacts root) with our scene_graphs and, for the boxes, "
                                            "regions of the same captions")
    ag.add_argument("--out", type=Path, help="write the numbers as JSON")
    ag.set_defaults(fn=cmd_agreement)

    rp = sub.add_parser("report", help="results.md + results.png from evaluation results (label=path, "
                                       "a label repeated per seed), or from runs in the evaluation history",
                        description="write results.md, results.json and results.png from evaluation results; "
                                    "each RESULTS is LABEL=PATH, PATH a results.json (macco eval --out) or an "
                                    "evaluate stage directory holding one; a label repeated is several seeds of "
                                    "one model (seed from the run name NAME-s<seed> in the json, else the order). "
                                    "With --history ROOT, each RESULTS names an evaluation in the eval_results "
                                    "history under ROOT: RUN (its newest), RUN@WHEN (its evaluation whose UTC time "
                                    "starts with WHEN, e.g. 2026-12-03 or 2026-12-03T04:05), an eval_id (or its "
                                    "first 6+ characters), each optionally LABEL=…; the paired tests read the "
                                    "stored per-case outcomes")
    rp.add_argument("results", nargs="+", metavar="RESULTS", help="LABEL=PATH; with --history: [LABEL=]RUN, "
                    "[LABEL=]RUN@WHEN or [LABEL=]EVAL_ID")
    rp.add_argument("--history", type=Path, metavar="ROOT", help="read RESULTS from the eval_results history under "
                    "ROOT (an artifacts root or the table's folder), e.g. last week's evaluation of a run against "
                    "tonight's")
    rp.add_argument("--out", type=Path, required=True, help="output directory")
    rp.add_argument("--control", help="the label the paired tests compare against (default: clip-ft; with "
                    "--history, the first RESULTS)")
    rp.add_argument("--title", default="macco: evaluation results")
    rp.add_argument("--note", default="", help="a line under the title")
    rp.set_defaults(fn=cmd_report)


def parse_params(text: str | None):
    """``--params``: JSON, or ``key=value`` pairs separated by commas (values read as YAML scalars), as
    ``CheckParams`` (an unknown key or a wrong type: one line)."""
    from data_schemas.checks import check_params
    from data_schemas.config import ConfigError, parse_yaml

    if not text:
        return check_params(None)
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--params {text!r}: not valid JSON ({exc})") from None
    else:
        data = {}
        for pair in text.split(","):
            key, eq, value = pair.partition("=")
            if not eq or not key.strip():
                raise ConfigError(f"--params {text!r}: {pair!r} is not key=value")
            data[key.strip()] = parse_yaml(value, f"--params {key.strip()}")
    if not isinstance(data, dict):
        raise ConfigError(f"--params {text!r}: a mapping of threshold -> value expected")
    return check_params(data, "--params")


def cmd_validate(args) -> int:
    from data_schemas.checks import CheckResult
    from flows.catalog import folder_catalog
    from flows.config import ValidateConfig
    from flows.runner import run_in_folder
    from pipeline.validate import ValidationFailed, discover_tables, format_results

    params = parse_params(args.params)
    tables = discover_tables(args.path, args.run)
    try:  # the validate stage's record, as the flow runs it (without a report file: this prints it)
        m = run_in_folder("validate", ValidateConfig(params, deep=args.deep), folder_catalog(tables), None)
        results = [CheckResult(**{**r, "examples": r["examples"].split("; ") if r["examples"] else []})
                   for r in m["checks"]]
    except ValidationFailed as exc:
        results = exc.results
    if args.deep:  # a changed part is one line naming the table and the part (exit 2), before any check
        print(f"deep check: every part of {len(tables)} table(s) is as written")
    print(format_results(results))
    failed = [r for r in results if r.status == "fail"]
    if failed:
        print(f"\nFAILED: {len(failed)} check(s): " + ", ".join(r.check for r in failed), file=sys.stderr)
        for r in failed:
            print(f"  {r.check}: {r.bad_rows} bad row(s); e.g. {'; '.join(r.examples)}", file=sys.stderr)
        return 1
    print(f"\nall {sum(r.status == 'pass' for r in results)} checks passed "
          f"({sum(r.status == 'skip' for r in results)} skipped)")
    return 0


def cmd_inspect(args) -> int:
    from pipeline.inspection import DUCKDB_FILE, format_summary, summarize, write_duckdb
    from pipeline.validate import discover_tables

    tables = discover_tables(args.path, args.run)
    if not tables:
        print(f"macco inspect: no complete tables under {args.path}", file=sys.stderr)
        return 2
    print(format_summary(summarize(tables)))
    db = Path(args.db) if args.db else Path(args.path) / DUCKDB_FILE
    write_duckdb(tables, db)
    print(f"\nwrote {db}: views {', '.join(sorted(tables))}")
    return 0


def cmd_sql(args) -> int:
    import duckdb

    from pipeline.inspection import QueryRefused, format_rows, query, query_error, write_csv, write_json
    from pipeline.validate import discover_tables

    tables = discover_tables(args.root, args.run)
    if not tables:
        print(f"macco sql: no complete tables under {args.root}", file=sys.stderr)
        return 2
    limit = None if args.csv or args.json or args.limit <= 0 else args.limit
    try:
        cols, rows, total = query(tables, args.query, limit, timeout=args.timeout)
    except QueryRefused as exc:
        print(f"macco sql: {exc}", file=sys.stderr)
        return 2
    except duckdb.Error as exc:
        from data_schemas.checks import read_failure

        if read_failure(exc, tables):
            # a part DuckDB could not read: damaged (one line naming table and part), or the query's own doing
            # (read_csv of a Parquet part): then DuckDB's error is the query's, below
            from data_schemas import TableError
            from data_schemas.checks import verify_deep

            try:
                verify_deep(tables)
            except TableError as found:
                raise TableError(f"{found} (DuckDB: {query_error(exc)[:200]})") from exc
        hint = f" (views: {', '.join(sorted(tables))})" if isinstance(exc, duckdb.CatalogException) else ""
        print(f"macco sql: {query_error(exc)}{hint}", file=sys.stderr)
        return 2
    if args.csv:
        write_csv(cols, rows, sys.stdout)
    elif args.json:
        write_json(cols, rows, sys.stdout)
    else:
        print(format_rows(cols, rows, total))
    return 0


def cmd_agreement(args) -> int:
    from data_schemas import TABLES, InputFileError, read_table
    from pipeline.agreement import agreement, format_agreement
    from pipeline.validate import discover_tables

    off = discover_tables(args.official)
    ours = discover_tables(args.ours)
    for what, found, need in (("official", off, ("official", "captions")), ("ours", ours, ("scene_graphs",))):
        missing = [t for t in need if t not in found]
        if missing:
            raise InputFileError(f"{getattr(args, what)}: no {', '.join(missing)} table")
    sg = read_table(TABLES["scene_graphs"], ours["scene_graphs"]).to_pylist()
    if any(r["parser"] == "official" for r in sg):
        raise InputFileError(f"{ours['scene_graphs']}: these scene graphs are the file's own (parser official): "
                             "compare a parse of ours (parse.parser rules or sng)")
    regions = read_table(TABLES["regions"], ours["regions"]).to_pylist() if "regions" in ours else None
    res = agreement(read_table(TABLES["official"], off["official"]).to_pylist(),
                    read_table(TABLES["captions"], off["captions"]).to_pylist(), sg, regions)
    print(format_agreement(res))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))
        print(f"\nwrote {args.out}")
    return 0


def cmd_report(args) -> int:
    from model.benchmarks.registry import REPORT_ROWS
    from model.losses import REPORT_TERMS
    from pipeline.report import DEFAULT_CONTROL, load_results, write_report
    from pipeline.report_history import history_results, picks_note, unpaired

    if args.out.exists() and not args.out.is_dir():
        print(f"macco report: {args.out}: is a file, not a folder (--out): give a folder for the report",
              file=sys.stderr)
        return 2
    note, control = args.note, args.control or DEFAULT_CONTROL
    try:
        if args.history is None:
            results = load_results(args.results, REPORT_ROWS)
        else:
            results, picked = history_results(args.history, args.results, REPORT_ROWS)
            note, control = note or picks_note(args.history, picked), args.control or picked[0].label
    except (ValueError, FileNotFoundError) as exc:
        print(f"macco report: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if control not in results and len(results) > 1:
        print(f"macco report: no results labelled {control!r} (--control): no paired tests", file=sys.stderr)
    for label in unpaired(results, control) if args.history is not None else []:
        print(f"macco report: {label} shares no seed with {control} (seeds from the run names, NAME-s<seed>): "
              "no paired test", file=sys.stderr)
    rep = write_report(results, args.out, args.title, note, control=control, rows=REPORT_ROWS,
                       terms=REPORT_TERMS)
    print(rep["table"])
    print(f"\nwrote {rep['markdown']}  {rep['png']}")
    return 0
