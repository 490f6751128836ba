"""The paper beside ours: the report of a run whose config maps its models to the paper's rows (``evaluate.paper``).

``pipeline/paper_numbers.json`` holds the MACCO paper's published numbers, each table with its source (table,
row label and column header as printed). For each of its tables this module prints, per mapped model, our mean
± sd over seeds, the paper's number and the difference, under the protocol the paper's numbers come from
(``macco``: MACCO's own evaluation scripts); beside a table with ``deltas`` (the stacking table: MACCO on NegCLIP and
on CE-CLIP), each stacked row's gain over its method, ours paired by seed beside the gain quoted with its source;
then the registered comparison (``docs/paper-setting.md``, written
before any run): MACCO against CLIP-FT, paired over the same cases, the case-level sign test with Holm's
correction over the five registered groups, and whether the bar is met.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

DATA_FILES = ("paper_numbers.json",)  # read by this code: in its code version (data_schemas.provenance)
PAPER_NUMBERS = Path(__file__).with_name(DATA_FILES[0])
PAPER_PROTOCOL = "macco"  # the paper's numbers come from MACCO's own evaluation scripts

# the registered bar (docs/paper-setting.md): MACCO ▲ over CLIP-FT after Holm over these five groups, each a
# (benchmark, case group) whose per-case outcomes the evaluation stores
BAR = (("aro-vgr", "macro", "ARO VG-Relation"),
       ("coco-order", "precision_at_1", "ARO COCO-Order"),
       ("flickr-order", "precision_at_1", "ARO Flickr-Order"),
       ("sugarcrepe", "relation", "SugarCrepe relation"),
       ("vl-checklist", "relation", "VL-CheckList relation"))
ALPHA = 0.05


def _group(bench: str, key: str):
    return lambda run: run["benchmarks"].get(bench, {}).get("groups", {}).get(key)


def _subsets_mean(bench: str, subsets: tuple[str, ...]):
    def value(run):
        subs = run["benchmarks"].get(bench, {}).get("subsets", {})
        accs = [subs.get(s, {}).get("accuracy") for s in subsets]
        return None if any(a is None for a in accs) else statistics.mean(accs)
    return value


def _family_mean(prefix: str, key: str):
    """The mean of ``key`` over every benchmark named ``prefix/<dataset>`` (a suite: zero-shot, linear probe)."""
    def value(run):
        vals = [b.get("groups", {}).get(key) for name, b in run["benchmarks"].items()
                if name == prefix or name.startswith(prefix + "/")]
        return None if not vals or any(v is None for v in vals) else statistics.mean(vals)
    return value


def _mean_of(*fns):
    def value(run):
        vals = [f(run) for f in fns]
        return None if any(v is None for v in vals) else statistics.mean(vals)
    return value


# the paper's column keys (paper_numbers.json) -> how our results give the same number (a fraction; shown in %)
OURS = {
    "aro_relation": _group("aro-vgr", "macro"),
    "aro_attribute": _group("aro-vga", "macro"),
    "aro_coco_order": _group("coco-order", "precision_at_1"),
    "aro_flickr_order": _group("flickr-order", "precision_at_1"),
    "aro_order": _mean_of(_group("coco-order", "precision_at_1"), _group("flickr-order", "precision_at_1")),
    "sugarcrepe_relation": _group("sugarcrepe", "relation"),
    "sugarcrepe_attribute": _group("sugarcrepe", "attribute"),
    "sugarcrepe_object": _group("sugarcrepe", "object"),
    "sugarcrepe_replace": _subsets_mean("sugarcrepe", ("replace_obj", "replace_att", "replace_rel")),
    "sugarcrepe_swap": _subsets_mean("sugarcrepe", ("swap_obj", "swap_att")),
    "sugarcrepe_add": _subsets_mean("sugarcrepe", ("add_obj", "add_att")),
    "vlchecklist_relation": _group("vl-checklist", "relation"),
    "vlchecklist_attribute": _group("vl-checklist", "attribute"),
    "vlchecklist_object": _group("vl-checklist", "object"),
    "valse_relation": _group("valse", "relation"),
    "valse_avg": _group("valse", "avg"),
    "whatsup": _group("whatsup", "whatsup_macro"),
    "zeroshot_mean": _family_mean("zeroshot", "top1"),
    "linear_probe_mean": _family_mean("linear-probe", "top1"),
    "sts_sick_r": _group("sts", "sick-r_spearman"),
    "sts_sts_b": _group("sts", "sts-b_spearman"),
    "senteval_probing_mean": _group("senteval-probing", "mean"),
}
# the columns one case group gives (benchmark, group): a paired test over the same cases can compare two runs there
CASE_GROUPS = {"aro_relation": ("aro-vgr", "macro"), "aro_attribute": ("aro-vga", "macro"),
               "vlchecklist_relation": ("vl-checklist", "relation"),
               "vlchecklist_attribute": ("vl-checklist", "attribute"), "vlchecklist_object": ("vl-checklist", "object"),
               "sugarcrepe_relation": ("sugarcrepe", "relation"), "valse_avg": ("valse", "avg")}
# the main table's columns (paper_numbers.json ``tables.main``): their mean is Table 2's compositional mean
MAIN_COLUMNS = ("aro_relation", "aro_attribute", "aro_order", "sugarcrepe_relation", "vlchecklist_relation",
                "valse_relation", "whatsup")
OURS["compositional_mean"] = _mean_of(*(OURS[c] for c in MAIN_COLUMNS))


def load_paper(path: str | Path = PAPER_NUMBERS) -> dict:
    """The paper's numbers; a table without a source, a row label or a column header is refused (every printed
    number names where it was printed)."""
    path = Path(path)
    data = json.loads(path.read_text())
    for name, t in data.get("tables", {}).items():
        for field in ("source", "columns", "rows", "row_names"):
            if field not in t:
                raise ValueError(f"{path}: tables.{name} has no {field!r}: every number names its table, row and "
                                 "column")
        for row, cells in t["rows"].items():
            unknown = sorted(set(cells) - set(t["columns"]))
            unknown += [c for c, v in cells.items() if not isinstance(v, (int, float)) or isinstance(v, bool)]
            if unknown or row not in t["row_names"]:
                raise ValueError(f"{path}: tables.{name}.rows.{row}: columns {unknown} / the row label not declared")
        _check_deltas(path, name, t)
    return data


def _check_deltas(path: Path, name: str, table: dict) -> None:
    """A table's ``deltas`` (gains of one row over another, quoted rather than printed as cells): a source, and each
    row and the row it is over declared, each cell a number in a declared column."""
    deltas = table.get("deltas")
    if deltas is None:
        return
    if not deltas.get("source"):
        raise ValueError(f"{path}: tables.{name}.deltas has no 'source': every number names where it was printed")
    for row, d in deltas.get("rows", {}).items():
        cells = d.get("cells", {})
        bad = sorted(c for c, v in cells.items() if c not in table["columns"] or not isinstance(v, (int, float))
                     or isinstance(v, bool))
        if bad or row not in table["row_names"] or d.get("over") not in table["row_names"]:
            raise ValueError(f"{path}: tables.{name}.deltas.rows.{row}: columns {bad} / the row or its 'over' "
                             f"({d.get('over')!r}) not declared")


def _ours(runs: list[dict], column: str) -> tuple[float, float, int] | None:
    """(mean, sd, seeds) in % of one column over a model's runs (seeds); None where a run lacks it."""
    fn = OURS.get(column)
    if fn is None or not runs:
        return None
    vals = [fn(r) for r in runs]
    if any(v is None for v in vals):
        return None
    vals = [100 * v for v in vals]
    return statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0, len(vals)


def compare_table(table: dict, results: dict[str, list[dict]], rows: dict[str, str]) -> list[dict]:
    """One line per (paper column, mapped model): ours (mean, sd, seeds), the paper's number, the difference."""
    out = []
    for column, header in table["columns"].items():
        for label, paper_row in rows.items():
            if paper_row not in table["row_names"]:
                continue
            paper = table["rows"].get(paper_row, {}).get(column)
            ours = _ours(results.get(label, []), column)
            out.append({"column": column, "header": header, "model": label, "paper_row": paper_row,
                        "ours": None if ours is None else {"mean": ours[0], "sd": ours[1], "seeds": ours[2]},
                        "paper": paper,
                        "diff": None if ours is None or paper is None else ours[0] - paper})
    return out


def registered_comparison(results: dict[str, list[dict]], treatment: str, control: str) -> dict:
    """The registered bar: ``treatment`` against ``control`` over the same cases on each BAR group (seeds paired),
    the case-level sign test's p raw and after Holm over the groups present; met iff every group is ▲."""
    from pipeline.report import holm, mcnemar, seed_pairs

    pairs = seed_pairs(results.get(treatment, []), results.get(control, []))
    groups = {}
    for bench, key, name in BAR:
        m = [a["benchmarks"].get(bench, {}).get("cases", {}).get(key) for a, _ in pairs]
        c = [b["benchmarks"].get(bench, {}).get("cases", {}).get(key) for _, b in pairs]
        if pairs and None not in m and None not in c:
            groups[name] = mcnemar(m, c)
    for name, p in holm({n: g["p_case"] for n, g in groups.items()}).items():
        g = groups[name]
        g["p_holm"] = p
        g["mark"] = ("▲" if g["b_case"] > g["c_case"] else "▼") if p < ALPHA else ""
    missing = [name for _, _, name in BAR if name not in groups]
    met = not missing and all(g["mark"] == "▲" for g in groups.values())
    return {"treatment": treatment, "control": control, "alpha": ALPHA, "seed_pairs": len(pairs),
            "groups": groups, "missing": missing, "met": met}


def _gain_tests(pairs: list[tuple[dict, dict]], columns) -> dict[str, dict]:
    """The case-level sign test of each column with a case group (``CASE_GROUPS``), the stacked run against its
    method over the same cases (seeds paired), Holm's correction over the columns tested."""
    from pipeline.report import holm, mcnemar

    tests = {}
    for column in columns:
        if column not in CASE_GROUPS or not pairs:
            continue
        bench, key = CASE_GROUPS[column]
        m, c = ([r["benchmarks"].get(bench, {}).get("cases", {}).get(key) for r in side] for side in zip(*pairs))
        if None not in m and None not in c and len({len(x) for x in m + c}) == 1:
            tests[column] = mcnemar(m, c)
    for column, p in holm({k: t["p_case"] for k, t in tests.items()}).items():
        t = tests[column]
        t["p_holm"] = p
        t["mark"] = ("▲" if t["b_case"] > t["c_case"] else "▼") if p < ALPHA else ""
    return tests


def compare_deltas(table: dict, results: dict[str, list[dict]], rows: dict[str, str]) -> list[dict]:
    """One line per (paper column, delta row whose row and base row are both mapped): ours, the row's run minus the
    base row's run of the same seed (mean, sd over the seed pairs, pairs; seeds only one side has left out) with the
    paired test where the column has a case group (``_gain_tests``), and the paper's delta where one is recorded
    (``deltas.rows.<row>.cells``)."""
    from pipeline.report import seed_pairs

    label_of = {r: lab for lab, r in rows.items()}
    out = []
    for row, d in table.get("deltas", {}).get("rows", {}).items():
        top, base = label_of.get(row), label_of.get(d["over"])
        if top is None or base is None:
            continue
        pairs = seed_pairs(results.get(top, []), results.get(base, []))
        tests = _gain_tests(pairs, table["columns"])
        for column, header in table["columns"].items():
            fn = OURS[column]
            vals = [(fn(a), fn(b)) for a, b in pairs]
            diffs = [100 * (a - b) for a, b in vals if a is not None and b is not None]
            ours = None if not diffs or len(diffs) < len(vals) else {
                "mean": statistics.mean(diffs), "sd": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
                "seeds": len(diffs)}
            out.append({"column": column, "header": header, "row": row, "over": d["over"], "model": top,
                        "base": base, "ours": ours, "test": tests.get(column),
                        "paper": d.get("cells", {}).get(column)})
    return out


def delta_lines(name: str, table: dict, lines_: list[dict]) -> list[str]:
    """The gains table: per column, ours (row minus base row, paired by seed) beside the recorded delta, its source
    under it."""
    pairs = list(dict.fromkeys((ln["row"], ln["over"], ln["model"], ln["base"]) for ln in lines_))
    names = table["row_names"]
    head = "| column | " + " | ".join(f"{m} − {b} (ours) | {names[r]} − {names[o]} (quoted)"
                                      for r, o, m, b in pairs) + " |"
    out = [f"### {name}: the gain of each stacked row over its method (paired by seed)", "", head,
           "|---|" + "---:|---:|" * len(pairs)]
    by = {(ln["column"], ln["row"]): ln for ln in lines_}
    for column, header in table["columns"].items():
        cells = []
        for r, *_ in pairs:
            ln = by[(column, r)]
            mark = (ln["test"] or {}).get("mark")
            cells += ["-" if ln["ours"] is None else _ours_cell(ln["ours"], "+") + (f" {mark}" if mark else ""),
                      "-" if ln["paper"] is None else f"{ln['paper']:+.1f}"]
        out.append(f"| {header} | " + " | ".join(cells) + " |")
    tested = [h for c, h in table["columns"].items() if c in CASE_GROUPS]
    source = table["deltas"]["source"]  # a text, or its lines (paper_numbers.json ``format``)
    quoted = source if isinstance(source, str) else " ".join(source)
    return out + ["", f"Quoted: {quoted} Ours: mean ± sd over the seed pairs, in points;"
                  f" '-' where a run lacks the column or no delta was quoted. ▲/▼: the stacked run better/worse "
                  f"than its method in the case-level sign test over the same cases (seeds paired) at p < {ALPHA} "
                  f"after Holm's correction over the columns tested for that pair ({', '.join(tested)}: those of one "
                  "case group); each p raw and corrected is in `paper.json` (`deltas`)."]


def _cell(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _ours_cell(o: dict | None, sign: str = "") -> str:
    if o is None:
        return "-"
    return f"{o['mean']:{sign}.1f}" + (f" ± {o['sd']:.1f}" if o["seeds"] > 1 else "")


def table_lines(name: str, table: dict, lines_: list[dict], rows: dict[str, str]) -> list[str]:
    labels = [lab for lab, r in rows.items() if r in table["row_names"]]
    head = "| column | " + " | ".join(f"{lab} (ours) | {table['row_names'][rows[lab]]} (paper) | Δ"
                                      for lab in labels) + " |"
    out = [f"### {name}: {table['source']}", "", head, "|---|" + "---:|---:|---:|" * len(labels)]
    by = {(ln["column"], ln["model"]): ln for ln in lines_}
    for column, header in table["columns"].items():
        cells = []
        for lab in labels:
            ln = by[(column, lab)]
            cells += [_ours_cell(ln["ours"]), _cell(ln["paper"]),
                      "-" if ln["diff"] is None else f"{ln['diff']:+.1f}"]
        out.append(f"| {header} | " + " | ".join(cells) + " |")
    return out


def bar_lines(bar: dict, protocol: str | None = None) -> list[str]:
    """The registered comparison's table and verdict; the bar is judged under the paper's protocol, any other one
    is reported beside it."""
    t, c = bar["treatment"], bar["control"]
    under = "" if protocol is None else f" under protocol {protocol}"
    out = [f"### The registered comparison{under}: {t} vs {c} ({bar['seed_pairs']} seed pair(s))", "",
           f"| group | cases | cases {t} > / < {c} | sign-test p (raw) | Holm p | |", "|---|---:|---:|---:|---:|---|"]
    for name, g in bar["groups"].items():
        out.append(f"| {name} | {g['cases']} | {g['b_case']} / {g['c_case']} | {g['p_case']:.3g} | "
                   f"{g['p_holm']:.3g} | {g['mark']} |")
    verdict = "**met**" if bar["met"] else "**not met**"
    why = f" (not evaluated: {', '.join(bar['missing'])})" if bar["missing"] else ""
    rule = (f"{t} ▲ over {c} on all {len(BAR)} groups at p < {bar['alpha']} after Holm's correction over them")
    if protocol in (None, PAPER_PROTOCOL):
        out += ["", f"The bar (`docs/paper-setting.md`, registered before any run): {rule} — {verdict}{why}."]
    else:
        out += ["", f"The same test under protocol {protocol}, beside the bar (judged under {PAPER_PROTOCOL}): "
                f"{rule} — {verdict}{why}."]
    return out


def paper_section(by_protocol: dict[str | None, dict[str, list[dict]]], rows: dict[str, str], control: str,
                  paper: dict | None = None) -> tuple[list[str], dict]:
    """The markdown lines and the JSON of the paper section: every paper table beside ours (under the paper's
    protocol where it was evaluated), then the registered comparison under each protocol evaluated."""
    paper = paper if paper is not None else load_paper()
    protocol = PAPER_PROTOCOL if PAPER_PROTOCOL in by_protocol else next(iter(by_protocol))
    results = by_protocol[protocol]
    where = ("MACCO's evaluation scripts (`--protocol macco`), as the paper's numbers" if protocol == PAPER_PROTOCOL
             else f"protocol {protocol!r}: the paper's numbers come from `macco`, which this run did not evaluate")
    lines = ["## The paper beside ours", "",
             f"Ours: mean ± sd over seeds, in %, under {where}. Paper: {paper['paper']['title']} "
             f"({paper['paper']['venue']}), as printed. Δ = ours − paper. ARO-Order (ours): the mean of COCO-Order "
             "and Flickr-Order (MACCO's scripts print the two; the data file's notes say what the paper's column is "
             "where known).", ""]
    empty = [f"{name}.{row}.{col}" for name, t in paper["tables"].items() for row in t["row_names"]
             if row in rows.values() for col in t["columns"] if col not in t["rows"].get(row, {})]
    if empty:
        lines += [f"{len(empty)} of the paper's cells for these models are not in `pipeline/paper_numbers.json` "
                  "(shown as -; its `status` says why): add each there as printed.", ""]
    data = {"protocol": protocol, "tables": {}, "deltas": {}, "registered": {}}
    for name, table in paper["tables"].items():
        if not any(r in table["row_names"] for r in rows.values()):
            continue
        cmp = compare_table(table, results, rows)
        data["tables"][name] = cmp
        lines += [*table_lines(name, table, cmp, rows), ""]
        gains = compare_deltas(table, results, rows)
        if gains:
            data["deltas"][name] = gains
            lines += [*delta_lines(name, table, gains), ""]
    treatment = next((lab for lab, r in rows.items() if r == "MACCO"), None)
    if treatment is not None:
        for p, res in by_protocol.items():
            bar = registered_comparison(res, treatment, control)
            data["registered"][p or "default"] = bar
            lines += [*bar_lines(bar, p), ""]
    return lines, data


def paper_report(by_protocol: dict, out: Path, title: str, note: str, *, control: str, untested: tuple,
                 paper, rows, terms) -> dict:
    """One report per protocol (``<out>/<protocol>/``), and ``results.md`` / ``paper.json`` on top: the paper's
    tables beside ours (with ``paper``: ``paper_section``), the registered bar, then each protocol's table.
    ``rows`` / ``terms``: the report's rows and the loss terms' labels (handed in: pipeline imports no model)."""
    from data_schemas import replace_file
    from pipeline.report import write_report

    parts = {p: write_report(res, out / (p or "report"), f"{title} (protocol {p or 'as configured'})", note,
                             control=control, untested=untested, rows=rows, terms=terms)
             for p, res in by_protocol.items()}
    lines = [f"# {title}", "", note, ""]
    data: dict = {}
    if paper:
        section, data = paper_section(by_protocol, paper, control)
        lines += section
    for p, rep in parts.items():
        lines += [f"## Protocol {p or 'as configured'} ({Path(rep['markdown']).relative_to(out)})", "",
                  *rep["table"].splitlines()[2:], ""]
    md = out / "results.md"
    replace_file(md, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    replace_file(out / "paper.json", lambda tmp: tmp.write_text(json.dumps(data, indent=2)))
    return {"markdown": str(md), "png": next(iter(parts.values()))["png"] if parts else None,
            "table": "\n".join(lines)}
