"""``results.md`` (model x benchmark group, with n) and ``results.png`` (grouped bars, error bars over seeds)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from pipeline.report_figure import chance_segments, paired_marks, results_figure  # noqa: F401 (API)
from pipeline.results import (PROBE_ROWS, PARTIAL_MARK, Rows, _dropped_groups, _missing_images,  # noqa: F401
                              _seed, chance_of, check_results_shape, collect, load_results, partial_groups,
                              partial_mismatches, probe_value)


DEFAULT_CONTROL = "clip-ft"  # the label the paired tests compare against, unless told (macco report --control)


def mcnemar(model: list[str], control: list[str]) -> dict:
    """Paired tests over the same cases; ``model`` and ``control`` are strings of '1'/'0'/'x' per seed over
    the same cases, already paired by seed (cases with a missing image skipped).

    - McNemar, cases pooled over seeds (the issue's test): b = (case, seed) pairs the model gets right and the
      control wrong, c the reverse, p the two-sided exact binomial test of b against b + c at 1/2. A case
      counts once per seed, so with several seeds its pairs are not independent and p is optimistic.
    - The case-level sign test (the conservative one, what the report's marks use): per case, the number of
      seeds each gets right; b_case / c_case = cases where the model / the control has more; exact binomial
      test at 1/2. Equal to McNemar with one seed."""
    from scipy.stats import binomtest

    if not model or len(model) != len(control):
        raise ValueError(f"{len(model)} model run(s) against {len(control)} control run(s): pair them by seed")
    lengths = {len(x) for x in model + control}
    if len(lengths) != 1:
        raise ValueError(f"paired case strings differ in length ({sorted(lengths)}): not the same cases")
    b = c = n = bc = cc = cases = 0
    for j in range(lengths.pop()):
        col = [(m[j], k[j]) for m, k in zip(model, control) if "x" not in (m[j], k[j])]
        if not col:
            continue
        cases += 1
        n += len(col)
        b += sum(x == "1" and y == "0" for x, y in col)
        c += sum(x == "0" and y == "1" for x, y in col)
        diff = sum(x == "1" for x, _ in col) - sum(y == "1" for _, y in col)
        bc += diff > 0
        cc += diff < 0
    p = binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
    p_case = binomtest(bc, bc + cc, 0.5).pvalue if bc + cc else 1.0
    return {"b": b, "c": c, "n": n, "pairs": len(model), "p": float(p), "cases": cases, "b_case": bc,
            "c_case": cc, "p_case": float(p_case)}


def seed_pairs(runs: list[dict], control: list[dict]) -> list[tuple[dict, dict]]:
    """(run, control run) of the same seed (``_seed``: the run name's ``-s<seed>``, else its position); seeds only
    one side has are left out."""
    ctrl = {_seed(r, i): r for i, r in enumerate(control)}
    return [(r, ctrl[sd]) for sd, r in ((_seed(r, i), r) for i, r in enumerate(runs)) if sd in ctrl]


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values of a family of tests (name -> raw p): the k-th smallest raw p times
    (m - k + 1), made monotone and capped at 1. A test is significant at level alpha after the correction iff its
    adjusted p is below alpha; the family-wise error rate is then at most alpha."""
    adjusted, running = {}, 0.0
    ranked = sorted(pvalues.items(), key=lambda kv: kv[1])
    for k, (name, p) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - k) * p))
        adjusted[name] = running
    return adjusted


def paired_tests(results: dict[str, list[dict]], control: str, untested: tuple[str, ...] = ("base",), *,
                 rows: Rows) -> dict[str, dict[str, dict]]:
    """{model: {row label: mcnemar(model, control)}} for every model but ``control`` and the ``untested`` ones (the
    base, models evaluated without training: they have no seeds to pair), runs paired
    by seed (seeds only one side has are left out). Each model's rows are one family: ``p_holm`` is the case-level
    sign test's p after Holm's correction over that model's groups (``p_case`` stays the raw p). A group averaged
    over other files than the control's (``partial_mismatches``: one partial, one complete) is not tested."""
    out: dict[str, dict[str, dict]] = {}
    if control not in results:
        return out
    unlike = partial_mismatches(results, control, rows)
    for label, runs in results.items():
        if label == control or label in untested:
            continue
        pairs = seed_pairs(runs, results[control])
        tested = {}
        for bench, key, name, _ in rows:
            m = [a["benchmarks"][bench].get("cases", {}).get(key) for a, b in pairs
                 if bench in a["benchmarks"] and bench in b["benchmarks"]]
            k = [b["benchmarks"][bench].get("cases", {}).get(key) for a, b in pairs
                 if bench in a["benchmarks"] and bench in b["benchmarks"]]
            if m and None not in m and None not in k and name not in unlike.get(label, {}):
                tested[name] = mcnemar(m, k)
        for name, p in holm({name: r["p_case"] for name, r in tested.items()}).items():
            tested[name]["p_holm"] = p
        out[label] = tested
    return out


def _probe_section(results: dict[str, list[dict]], terms: tuple[tuple[str, str], ...]) -> list[str]:
    probes = {m: [r["probes"] for r in runs if "probes" in r] for m, runs in results.items()}
    probes = {m: v for m, v in probes.items() if v}
    if not probes:
        return []
    spread = "mean ± sd over seeds" if any(len(v) > 1 for v in probes.values()) else "one seed per model"
    return ["", f"## Probes (held-out world images and captions; {spread})", "",
            format_probes(probes, terms), "",
            "Image probes: cross-validated ridge from the global image embedding (or the patch tokens) to each "
            "colour's centre; pair direction: the read-outs order a held-out left/above pair correctly. Text: "
            "mean cosine of a caption with its subject/object swap and its attribute swap (1.0 = the swap is "
            "invisible); relation direction: a logistic probe on the text embedding (bag of words: 50 %). "
            "Recon: the text predictor's masked-word accuracy on held-out captions; direction words: left / right "
            "/ above / below with synonyms merged, filler: the other relation tokens; captions' baseline: the "
            "training captions' most frequent word in the mask's context, an image-free frequency estimate — a "
            "baseline, not a bound: a predictor trained without the image can exceed it, so credit the image only "
            "against a trained image-free control. Retrieval and zero-shot: "
            "the test split. grad: the norm of each weighted loss term's gradient over a tower's parameters, on "
            "one held-out batch of 128 at the end of training."]


def write_report(results: dict[str, list[dict]], out_dir: str | Path, title: str, note: str = "",
                 control: str = DEFAULT_CONTROL, alpha: float = 0.05, untested: tuple[str, ...] = ("base",), *,
                 rows: Rows, terms: tuple[tuple[str, str], ...]) -> dict:
    """``results.md`` / ``results.json`` / ``results.png``. Every model's cells are marked where a paired
    McNemar test against ``control`` (cases pooled over seeds) gives p < ``alpha``: ▲ better, ▼ worse. ``rows``:
    the report's rows, each benchmark record's (``model.benchmarks.registry.REPORT_ROWS``); ``terms``: the loss
    terms' labels (``model.losses.REPORT_TERMS``: ``LossWeights``' and CE-CLIP's)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = collect(results, rows)
    tests = paired_tests(results, control, untested, rows=rows)
    names = [name for _, _, name, _ in rows if any(name in table[m] for m in table)]
    marks = paired_marks(table, tests, control, alpha)
    partial = partial_groups(results, rows)
    lines = [f"# {title}", "", note, "", *_table_lines(table, names, marks, chance_of(rows), partial),
             *_legend(table, results, tests, control, alpha),
             *_partial_lines(partial, results, tests, control, rows), *_test_lines(tests, control, alpha),
             *_notes(results, rows), *_probe_section(results, terms)]
    md = out_dir / "results.md"
    md.write_text("\n".join(lines) + "\n")
    png = out_dir / "results.png"
    results_figure(table, names, title, marks, partial=set(partial), chance=chance_of(rows)).savefig(png, dpi=120)
    (out_dir / "results.json").write_text(json.dumps(
        {"benchmarks": {m: {n: {"mean": v[0], "sd": v[1], "seeds": v[2], "n": v[3]} for n, v in rows.items()}
                        for m, rows in table.items()},
         "paired_tests": {"control": control, "alpha": alpha, "correction": "holm, per model over its groups",
                          "models": tests},
         "cases": case_outcomes(results, rows), "partial": partial,
         "probes": {m: {k: {"mean": v[0], "sd": v[1], "runs": v[2]} for k, v in
                        probe_summary([r["probes"] for r in runs if "probes" in r], terms).items()}
                    for m, runs in results.items()}}, indent=2))
    return {"markdown": str(md), "png": str(png), "table": "\n".join(lines)}


def case_outcomes(results: dict[str, list[dict]], rows: Rows) -> dict[str, list[dict]]:
    """{model: [{"seed", "groups": {row label: case string}}]}: every run's per-case outcomes ('1' right, '0' wrong,
    'x' no image), what ``paired_tests`` reads, so each p-value can be re-derived from ``results.json`` alone."""
    out = {}
    for label, runs in results.items():
        out[label] = [{"seed": _seed(r, i), "groups": {
            name: r["benchmarks"][bench]["cases"][key] for bench, key, name, _ in rows
            if key in r.get("benchmarks", {}).get(bench, {}).get("cases", {})}} for i, r in enumerate(runs)]
    return out


def _seeds(table: dict) -> dict[str, int]:
    return {m: max((v[2] for v in table[m].values()), default=0) for m in table}


def _table_lines(table: dict, names: list[str], marks: dict, chance: dict[str, float],
                 partial: dict | None = None) -> list[str]:
    """The model x group table: mean (± sd over seeds) and the paired test's mark per cell; a group some model
    averages over part of its files (``partial``) marked on its row (``_partial_lines`` names what it lacks)."""
    labels, seeds = list(table), _seeds(table)
    lines = ["| benchmark group | n | chance | " + " | ".join(f"{m} ({seeds[m]} seed{'s' if seeds[m] != 1 else ''})"
                                                          for m in labels) + " |",
             "|---|---:|---:|" + "---:|" * len(labels)]
    for name in names:
        n = next(table[m][name][3] for m in labels if name in table[m])
        cells = []
        for m in labels:
            if name not in table[m]:
                cells.append("-")
                continue
            mean, sd, k, _ = table[m][name]
            mark = marks.get((m, name), "")
            cells.append(f"{100 * mean:.1f}" + (f" ± {100 * sd:.1f}" if k > 1 else "") + (f" {mark}" if mark else ""))
        label = f"{name} {PARTIAL_MARK}" if name in (partial or {}) else name
        lines.append(f"| {label} | {n} | {100 * chance[name]:.0f} | " + " | ".join(cells) + " |")
    return lines


def _partial_lines(partial: dict, results: dict, tests: dict, control: str, rows: Rows) -> list[str]:
    """The legend of the partial mark: each marked group and the files it lacks (per model where they differ); and
    the groups no paired test compares because a model's and the control's average different files."""
    if not partial:
        return []
    parts = []
    for name, models in partial.items():
        lists = {tuple(v) for v in models.values()}
        if len(lists) == 1 and len(models) == len(results):
            parts.append(f"{name} lacks {', '.join(models[next(iter(models))])}")
        else:
            parts.append(f"{name}: " + "; ".join(f"{m} lacks {', '.join(v)}" for m, v in models.items()) +
                         f"; {', '.join(m for m in results if m not in models) or 'no model'} complete")
    lines = ["", f"{PARTIAL_MARK}: partial, the group averages only the files its benchmark root holds "
             "(`allow_partial`), not the benchmark's full set: " + "; ".join(parts) + "."]
    unlike = {m: groups for m, groups in partial_mismatches(results, control, rows).items() if m in tests}
    if unlike:
        lines += ["", f"Not compared with {control} (no paired test, no mark): " + "; ".join(
            f"{name} ({m} {'lacks ' + ', '.join(v) if v else 'complete'}, {control} "
            f"{'lacks ' + ', '.join(partial[name][control]) if control in partial[name] else 'complete'})"
            for m, groups in unlike.items() for name, v in groups.items()) +
            ": a partial group is not compared with a complete one, nor with one missing other files."]
    return lines


def _legend(table: dict, results: dict, tests: dict, control: str, alpha: float) -> list[str]:
    labels, seeds = list(table), _seeds(table)
    others = [m for m in labels if m not in (control, "base")]
    line = "Accuracy in %; ± is the standard deviation over seeds." if any(seeds[m] > 1 for m in labels) \
        else "Accuracy in %; one seed per model: no spread estimate."
    if others and control in results:
        groups = max((len(rows) for rows in tests.values()), default=0)
        line += (f" ▲/▼: better/worse than {control} in a paired test over the same cases at {alpha} after Holm's "
                 f"correction over each model's {groups} groups (the case-level sign test, seeds paired, and the "
                 "direction of the cell's mean agrees); the raw and the corrected p of every group are in the "
                 "tables below.")
    elif others:
        line += f" No paired tests: the control {control!r} was not evaluated."
    return ["", line]


def _test_lines(tests: dict, control: str, alpha: float) -> list[str]:
    """One table of paired tests per model against the control."""
    lines = []
    for m, rows in tests.items():
        if not rows:
            continue
        k = max(r["pairs"] for r in rows.values())
        lines += ["", f"### {m} vs {control}: paired tests over {k} seed pair(s)", "",
                  f"| benchmark group | cases | pooled pairs | {m} right, {control} wrong | {control} right, {m} "
                  f"wrong | McNemar p (pooled) | cases {m} > / < {control} | sign-test p (cases) | Holm p |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r in rows.items():
            lines.append(f"| {name} | {r['cases']} | {r['n']} | {r['b']} | {r['c']} | {r['p']:.3g} | "
                         f"{r['b_case']} / {r['c_case']} | {r['p_case']:.3g} | "
                         f"{r['p_holm']:.3g}{' *' if r['p_holm'] < alpha else ''} |")
    return lines


def _notes(results: dict, rows: Rows) -> list[str]:
    """What the table leaves out: cases without an image (``--allow-missing``), groups with no case scored."""
    lines = []
    partial = _missing_images(results)
    if partial:
        lines += ["", "Scored with images missing (`--allow-missing`; those cases are left out of n): " + "; ".join(
            f"{b} ({', '.join(f'{m}: {k}' for m, k in ms.items())} cases)" for b, ms in partial.items())]
    dropped = _dropped_groups(results, rows)
    if dropped:
        lines += ["", "Not reported (the benchmark ran but gave no value for the group: no case scored, or, for ARO "
                  "VG-Attribution, no attribute group with at least vga_min_count cases): "
                  + "; ".join(f"{g} ({', '.join(ms)})" for g, ms in dropped.items())]
    return lines




def probe_rows(terms: tuple[tuple[str, str], ...]) -> list[tuple[str, tuple[str, ...], str]]:
    """The probe table's rows: the probes', then each tower's gradient norm per loss term; ``terms``: (term,
    label) of each, declared with its weight (``model.losses.REPORT_TERMS``, handed in: pipeline imports no model);
    a term no run has (CE-CLIP's IMC and CMR outside its modes) gives no row."""
    return PROBE_ROWS + [(f"grad ‖{tower}‖ ← {label}", ("gradient_norms", term, tower), "g")
                          for tower in ("text", "image") for term, label in terms]
PROBE_CHANCE = {"image: pair direction (global) %": "50", "image: pair direction (patches) %": "50",
                "text: relation direction %": "50", "image: position R² x (global)": "0",
                "image: position R² y (global)": "0", "image: position R² x (patches)": "0"}


def probe_summary(runs: list[dict], terms: tuple[tuple[str, str], ...]) -> dict[str, tuple[float, float, int]]:
    """{row label: (mean, sd, runs)} over several runs' probe results (seeds)."""
    out = {}
    for label, path, _ in probe_rows(terms):
        vals = [v for v in (probe_value(r, path) for r in runs) if v is not None]
        if vals:
            out[label] = (statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0, len(vals))
    return out


def format_probes(results: dict[str, list[dict] | dict], terms: tuple[tuple[str, str], ...]) -> str:
    """A markdown table: probe rows x models ({label: result or [results over seeds]})."""
    summ = {m: probe_summary(r if isinstance(r, list) else [r], terms) for m, r in results.items()}
    labels = list(summ)
    lines = ["| probe | chance | " + " | ".join(labels) + " |", "|---|---:|" + "---:|" * len(labels)]
    for label, _, fmt in probe_rows(terms):
        if not any(label in summ[m] for m in labels):
            continue
        cells = []
        for m in labels:
            if label not in summ[m]:
                cells.append("-")
                continue
            mean, sd, k = summ[m][label]
            f = {"pct": lambda v: f"{100 * v:.1f}", "g": lambda v: f"{v:.3g}"}.get(fmt, lambda v: f"{v:.2f}")
            cells.append(f(mean) + (f" ± {f(sd)}" if k > 1 else ""))
        lines.append(f"| {label} | {PROBE_CHANCE.get(label, '')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
