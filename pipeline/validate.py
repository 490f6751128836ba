"""The validation gate: DuckDB checks over the mask tables; raises when any check fails."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from data_schemas import TABLES
from data_schemas import InputFileError, TableError
from data_schemas._spec import MANIFEST
from data_schemas.checks import CheckParams, CheckResult, run_checks


class ValidationFailed(InputFileError):
    """Mask-table checks failed: the tables are not fit to train on (the gate)."""

    def __init__(self, results: list[CheckResult]):
        self.results = results
        failed = [r for r in results if r.status == "fail"]
        lines = [f"{r.check}: {r.bad_rows} bad row(s), e.g. {'; '.join(r.examples)}" for r in failed]
        super().__init__(f"{len(failed)} check(s) failed:\n  " + "\n  ".join(lines))


def discover_tables(path: str | Path, run: str | Path | None = None,
                    note: Callable[[str], None] | None = None) -> dict[str, Path | list[Path]]:
    """The complete tables of one run under ``path`` ({name: dir}; ``pipeline.lineage``): the run under ``run`` (a
    folder), else the newest, ``note`` told in one line when there are several; a run whose tables do not belong
    together is a ``LineageError``.

    ``errors``: every errors table in a folder of the run's tables (several stages write one each).
    ``eval_results`` tables are history: every one found is kept (a list), so the view is the whole history.
    """
    from pipeline.lineage import check_run, choose, found_table, runs, stderr_note

    path = Path(path)
    if (path / MANIFEST).exists():  # one table's folder (the history: a list, as a root gives it)
        name = table_of(path / MANIFEST)
        return {name: [path] if name == "eval_results" else path}
    found, errors, history = [], [], []
    for m in manifests(path):
        name = table_of(m)
        if name == "eval_results":
            history.append(m.parent)
        elif name in TABLES:
            (errors if name == "errors" else found).append(found_table(m, name))
    chosen = choose(runs(found), path, run, note or stderr_note)
    check_run(chosen)
    out: dict[str, Path | list[Path]] = {n: f.dir for n, f in chosen.items()}
    folders = {f.dir.parent for f in chosen.values()}
    kept = [e.dir for e in errors if e.dir.parent in folders or not chosen]
    if kept:
        out["errors"] = kept
    if history:
        out["eval_results"] = history
    return out


def manifests(path: Path) -> list[Path]:
    """The manifests under ``path`` (sorted), but those in hidden folders and in ``.partial`` ones (unfinished)."""
    return [m for m in sorted(path.rglob(MANIFEST))
            if not any(p.startswith(".") or p.endswith(".partial") for p in m.relative_to(path).parts[:-1])]


def table_of(mpath: Path) -> str | None:
    """The table a manifest says it holds; a manifest that cannot be read, or a folder named after one table holding
    another (a hand-edited ``table`` field would hide it from that table's checks), is a ``TableError``."""
    from data_schemas._read import _manifest_problem

    manifest, problem = _manifest_problem(mpath)
    if problem is not None:
        raise TableError(f"{mpath}: {problem}")
    name = manifest.get("table")
    folder = mpath.parent.name
    if folder in TABLES and name != folder:
        raise TableError(f"{mpath}: the folder {folder!r} holds a manifest of table {str(name)[:40]!r}: a folder "
                         "named after a table holds that table (a hand-edited manifest?): refused")
    return name if isinstance(name, str) else None


def validate(tables: dict[str, Path | list[Path]], params: CheckParams | dict | None = None, *,
             strict: bool = True) -> list[CheckResult]:
    if not tables:
        raise TableError("no complete tables found to validate")
    results = run_checks(tables, params)
    if strict and any(r.status == "fail" for r in results):
        raise ValidationFailed(results)
    return results


def format_results(results: list[CheckResult]) -> str:
    w = max([len(r.check) for r in results] + [5])
    t = max([len(r.table) for r in results] + [13])
    lines = [f"{'check':<{w}}  {'table':<{t}} {'bad':>7}  status  examples"]
    for r in results:
        ex = "; ".join(r.examples) if r.examples else r.detail
        lines.append(f"{r.check:<{w}}  {r.table:<{t}} {r.bad_rows:>7}  {r.status:<6}  {ex}")
    return "\n".join(lines)
