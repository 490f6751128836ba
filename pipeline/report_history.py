"""Evaluations named in the evaluation history (``eval_results``) as the report's inputs: ``macco report --history``.

A pick names one evaluation: ``RUN`` (a run label as the history stores it, e.g. ``tiny/macco-s0`` or ``macco eval
--run``'s: its newest evaluation), ``RUN@WHEN`` (the one of that run whose ``created`` time, UTC, starts with WHEN —
``2026-12-03``, ``2026-12-03T04:05`` — or whose eval_id does) or an eval_id (or its first ``MIN_ID_PREFIX``
characters or more). ``LABEL=PICK`` names the report's column (a label repeated: several seeds of one model, as
with results files); else the column is the pick as written. Each evaluation becomes what ``load_results`` reads
from a results.json — its benchmarks' subsets, groups, per-case outcomes and partial groups, rebuilt from the stored
rows — and is checked alike (``check_results_shape``, ``check_seeds``, ``check_pairable``). An evaluation whose rows
hold no per-case outcomes (``cases``: appended before the history's schema version 5) cannot be paired: one line.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from data_schemas import InputFileError
from data_schemas._spec import MANIFEST
from pipeline.results import Rows, check_pairable, check_results_shape, check_seeds

HISTORY = "eval_results"
MIN_ID_PREFIX = 6  # the shortest eval_id prefix a pick may be
SHOWN = 8  # the run labels / evaluations an error lists before "and N more"
_SUBSET = ("n", "correct", "accuracy", "ties", "missing_images")  # a subset's entry in results.json, as read back


class PickError(InputFileError):
    """A pick the history does not answer with exactly one evaluation that can be paired."""


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the history: its rows share ``eval_id``."""
    eval_id: str
    run: str
    created: datetime
    has_cases: bool

    @property
    def stamp(self) -> str:
        """``created`` as results.json writes it (``2026-12-03T04:05:06.123456Z``)."""
        return self.created.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def describe(self) -> str:
        return f"{self.run} of {self.stamp[:19]}Z (eval {self.eval_id[:8]})"


@dataclass(frozen=True)
class Picked:
    """A pick as given, the report's label for it, and the evaluation it names."""
    text: str
    label: str
    evaluation: Evaluation


def history_tables(root: str | Path) -> list[Path]:
    """Every ``eval_results`` table under ``root`` (or ``root`` itself, one such table), read as one history."""
    from pipeline.validate import manifests, table_of

    root = Path(root)
    if (root / MANIFEST).is_file():
        name = table_of(root / MANIFEST)
        if name != HISTORY:
            raise InputFileError(f"{root}: a {name} table, not the evaluation history ({HISTORY})")
        return [root]
    if not root.is_dir():
        raise InputFileError(f"{root}: no such folder (--history: an artifacts root or an {HISTORY} table)")
    found = [m.parent for m in manifests(root) if table_of(m) == HISTORY]
    if not found:
        raise InputFileError(f"{root}: no {HISTORY} table under it (the evaluation history: macco eval "
                             "--results-table, the flow's artifacts/eval_results)")
    return found


def evaluations(con) -> list[Evaluation]:
    """Every evaluation of the history (a connection with its ``eval_results`` view), oldest first."""
    rows = con.execute(f"select eval_id, any_value(run), min(epoch_us(created)) us, count(cases) > 0 from {HISTORY} "
                       "group by eval_id order by us, eval_id").fetchall()
    return [Evaluation(i, run, datetime.fromtimestamp(us / 1e6, timezone.utc), bool(cases))
            for i, run, us, cases in rows]


def _listed(items: list[str]) -> str:
    more = f", and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def _one(found: list[Evaluation], text: str, none: str) -> Evaluation:
    if not found:
        raise PickError(none)
    if len(found) > 1:
        raise PickError(f"{text!r} names {len(found)} evaluations ({_listed([e.describe() for e in found])}): name "
                        f"one by its time, e.g. {found[-1].run}@{found[-1].stamp[:19]}, or by its eval_id")
    return found[0]


def resolve(text: str, evals: list[Evaluation]) -> Evaluation:
    """The one evaluation ``text`` names (``RUN``: the newest; ``RUN@WHEN``; an eval_id or its prefix);
    ``PickError`` when it names none (the known runs listed) or several (each listed)."""
    by_run: dict[str, list[Evaluation]] = {}
    for e in evals:
        by_run.setdefault(e.run, []).append(e)
    if text in by_run:
        return by_run[text][-1]
    run, at, when = text.rpartition("@")
    if at and run in by_run:
        when = when.strip().replace(" ", "T")
        found = [e for e in by_run[run] if when and (e.stamp.startswith(when) or e.eval_id.startswith(when))]
        return _one(found, text, f"{text!r}: no evaluation of {run} at {when!r} (its evaluations: "
                                 f"{_listed([e.describe() for e in reversed(by_run[run])])})")
    found = [e for e in evals if len(text) >= MIN_ID_PREFIX and e.eval_id.startswith(text)]
    runs = sorted(by_run)
    return _one(found, text, f"{text!r}: no run or eval_id of that name in the history (runs: {_listed(runs)})")


def _row_entry(b: dict, r: dict) -> None:
    """One stored row into its benchmark's results.json entry ``b``."""
    if r["level"] == "subset":
        b["subsets"][r["subset"]] = {k: r[k] for k in _SUBSET}
        return
    b["groups"][r["subset"]] = r["accuracy"] if r["metric"] == "accuracy" else r["value"]
    if r["cases"] is not None:
        b.setdefault("cases", {})[r["subset"]] = r["cases"]
    if r["partial"]:
        b["partial"] = True
        b.setdefault("missing_files", {})[r["subset"]] = list(r["missing"])


def as_results(con, e: Evaluation) -> dict:
    """One evaluation's rows as the results.json of ``macco eval`` / the evaluate stage (``label``: the run, as
    the flow writes it, so a run name's ``-s<seed>`` is its seed)."""
    cols = ("benchmark", "level", "subset", *_SUBSET, "metric", "value", "partial", "missing", "cases", "model_id",
            "checkpoint_sha256", "protocol")
    cur = con.execute(f"select {', '.join(cols)} from {HISTORY} where eval_id = ? order by benchmark, level, "
                      "subset", [e.eval_id])
    rows = [dict(zip(cols, row)) for row in cur.fetchall()]
    benches: dict[str, dict] = {}
    for r in rows:
        _row_entry(benches.setdefault(r["benchmark"], {"subsets": {}, "groups": {}}), r)
    return {"label": e.run, "run": e.run, "eval_id": e.eval_id, "created": e.stamp, "model": rows[0]["model_id"],
            "checkpoint_sha256": rows[0]["checkpoint_sha256"], "protocol": rows[0]["protocol"], "benchmarks": benches}


def history_results(root: str | Path, picks: list[str], rows: Rows) -> tuple[dict[str, list[dict]], list[Picked]]:
    """``picks`` ([LABEL=]PICK) in the history under ``root`` -> ({label: [results.json per seed]}, what each pick
    named): the inputs ``write_report`` takes, as ``load_results`` builds them from files."""
    from pipeline.inspection import connect

    con = connect({HISTORY: history_tables(root)})
    try:
        evals = evaluations(con)
        picked, results, where = [], {}, {}
        for text in picks:
            label, sep, what = (x.strip() for x in text.partition("="))
            if sep and (not label or not what):
                raise PickError(f"bad pick {text!r}: expected RUN, RUN@WHEN, an eval_id, or LABEL= one of them")
            e = resolve(what if sep else text.strip(), evals)
            if not e.has_cases:
                raise PickError(f"{text!r}: {e.describe()} holds no per-case outcomes (rows appended before the "
                                f"history's schema version 5 lack them): no paired comparison; evaluate it again")
            run = as_results(con, e)
            source = f"{root} {e.describe()}"
            check_results_shape(run["benchmarks"], source, rows)
            picked.append(Picked(text, label if sep else text.strip(), e))
            results.setdefault(picked[-1].label, []).append(run)
            where.setdefault(picked[-1].label, []).append(source)
    finally:
        con.close()
    check_seeds(results, where)
    check_pairable(results, where)
    return results, picked


def picks_note(root: str | Path, picked: list[Picked]) -> str:
    """The report's line under its title: the history read and the evaluation behind each column."""
    return f"From the evaluation history under {root}: " + "; ".join(
        f"{p.label} = {p.evaluation.describe()}" if p.label != p.evaluation.run else p.evaluation.describe()
        for p in picked) + "."


def unpaired(results: dict[str, list[dict]], control: str, untested: tuple[str, ...] = ("base",)) -> list[str]:
    """The labels (not the control, not ``untested``) that share no seed with the control: no paired test."""
    from pipeline.report import seed_pairs

    if control not in results:
        return []
    return [m for m, runs in results.items()
            if m != control and m not in untested and not seed_pairs(runs, results[control])]
