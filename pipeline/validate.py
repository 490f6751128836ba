"""The validation gate: DuckDB checks over the mask tables; raises when any check fails."""
from __future__ import annotations

import json
from pathlib import Path

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


def discover_tables(path: str | Path) -> dict[str, Path | list[Path]]:
    """Complete tables under ``path`` ({name: dir}); for a table found more than once, the newest.

    ``errors`` tables are written by several stages: the newest of each top-level folder are all kept.
    ``eval_results`` tables are history: every one found is kept (a list), so the view is the whole history.
    """
    path = Path(path)
    if (path / MANIFEST).exists():  # one table's folder (the history: a list, as a root gives it)
        name = _table_of(path / MANIFEST)
        return {name: [path] if name == "eval_results" else path}
    found: dict[str, tuple[str, Path]] = {}
    errors: dict[str, tuple[str, Path]] = {}
    history: list[Path] = []
    for m in sorted(path.rglob(MANIFEST)):
        if any(part.startswith(".") or part.endswith(".partial") for part in m.relative_to(path).parts[:-1]):
            continue
        name = _table_of(m)
        if name not in TABLES:
            continue
        manifest = json.loads(m.read_text(encoding="utf-8"))
        stamp = f"{manifest.get('created', '')}|{m.stat().st_mtime_ns:020d}"
        if name == "eval_results":
            history.append(m.parent)
        elif name == "errors":
            parts = m.relative_to(path).parts
            group = parts[0] if len(parts) > 2 else m.parent.name
            if group not in errors or stamp > errors[group][0]:
                errors[group] = (stamp, m.parent)
        elif name not in found or stamp > found[name][0]:
            found[name] = (stamp, m.parent)
    out: dict[str, Path | list[Path]] = {k: v[1] for k, v in found.items()}
    if errors:
        out["errors"] = [v[1] for _, v in sorted(errors.items())]
    if history:
        out["eval_results"] = history
    return out


def _table_of(mpath: Path) -> str | None:
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
    lines = [f"{'check':<{w}}  {'table':<13} {'bad':>7}  status  examples"]
    for r in results:
        ex = "; ".join(r.examples) if r.examples else r.detail
        lines.append(f"{r.check:<{w}}  {r.table:<13} {r.bad_rows:>7}  {r.status:<6}  {ex}")
    return "\n".join(lines)
