"""``results.md`` (model x benchmark group, with n) and ``results.png`` (grouped bars, error bars over seeds)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

# (benchmark, group key, label) rows of the report, in the order of the paper's tables
GROUPS = [
    ("aro-vgr", "macro", "ARO VG-Relation (macro)"),
    ("aro-vga", "macro", "ARO VG-Attribution (macro)"),
    ("coco-order", "precision_at_1", "ARO COCO-Order (P@1)"),
    ("sugarcrepe", "attribute", "SugarCrepe attribute"),
    ("sugarcrepe", "relation", "SugarCrepe relation"),
    ("sugarcrepe", "object", "SugarCrepe object"),
    ("vl-checklist", "attribute", "VL-CheckList attribute"),
    ("vl-checklist", "relation", "VL-CheckList relation"),
    ("vl-checklist", "object", "VL-CheckList object"),
    ("valse", "avg", "VALSE avg"),
    ("whatsup", "whatsup_macro", "What's Up controlled"),
]


# chance accuracy of each row: two options (true vs one negative) except COCO-Order (1 of 5) and What's Up (1 of 4)
CHANCE = {name: 0.5 for _, _, name in GROUPS} | {"ARO COCO-Order (P@1)": 0.2, "What's Up controlled": 0.25}


def _n(bench: dict, key: str) -> int:
    """The cases the group pools (from the per-case string), else every case of the benchmark."""
    cases = bench.get("cases", {}).get(key)
    if cases is not None:
        return len(cases) - cases.count("x")
    return sum(v.get("n", 0) for v in bench["subsets"].values())


def collect(results: dict[str, list[dict]]) -> dict:
    """{model label: [eval json per seed]} -> {label: {row label: (mean, spread, n_seeds, n_cases)}}."""
    table: dict[str, dict] = {}
    for label, runs in results.items():
        rows = {}
        for bench, key, name in GROUPS:
            vals = [r["benchmarks"][bench]["groups"].get(key) for r in runs if bench in r["benchmarks"]]
            vals = [v for v in vals if v is not None]
            if not vals:
                continue
            n = _n(next(r for r in runs if bench in r["benchmarks"])["benchmarks"][bench], key)
            spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
            rows[name] = (statistics.mean(vals), spread, len(vals), n)
        table[label] = rows
    return table


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


def _seed(run: dict, index: int) -> int:
    """A run's seed from its label (``name-s<seed>``, as the flow names runs), else its position."""
    import re

    m = re.search(r"-s(\d+)$", run.get("label", ""))
    return int(m.group(1)) if m else index


def paired_tests(results: dict[str, list[dict]], control: str) -> dict[str, dict[str, dict]]:
    """{model: {row label: mcnemar(model, control)}} for every model but ``control`` and the base, runs paired
    by seed (seeds only one side has are left out)."""
    out: dict[str, dict[str, dict]] = {}
    if control not in results:
        return out
    ctrl = {_seed(r, i): r for i, r in enumerate(results[control])}
    for label, runs in results.items():
        if label in (control, "base"):
            continue
        pairs = [(r, ctrl[sd]) for sd, r in ((_seed(r, i), r) for i, r in enumerate(runs)) if sd in ctrl]
        rows = {}
        for bench, key, name in GROUPS:
            m = [a["benchmarks"][bench].get("cases", {}).get(key) for a, b in pairs
                 if bench in a["benchmarks"] and bench in b["benchmarks"]]
            k = [b["benchmarks"][bench].get("cases", {}).get(key) for a, b in pairs
                 if bench in a["benchmarks"] and bench in b["benchmarks"]]
            if m and None not in m and None not in k:
                rows[name] = mcnemar(m, k)
        out[label] = rows
    return out


def _probe_section(results: dict[str, list[dict]]) -> list[str]:
    probes = {m: [r["probes"] for r in runs if "probes" in r] for m, runs in results.items()}
    probes = {m: v for m, v in probes.items() if v}
    if not probes:
        return []
    spread = "mean ± sd over seeds" if any(len(v) > 1 for v in probes.values()) else "one seed per model"
    return ["", f"## Probes (held-out world images and captions; {spread})", "",
            format_probes(probes), "",
            "Image probes: cross-validated ridge from the global image embedding (or the patch tokens) to each "
            "colour's centre; pair direction: the read-outs order a held-out left/above pair correctly. Text: "
            "mean cosine of a caption with its subject/object swap and its attribute swap (1.0 = the swap is "
            "invisible); relation direction: a logistic probe on the text embedding (bag of words: 50 %). "
            "Recon: the text predictor's masked-word accuracy on held-out captions. Retrieval and zero-shot: "
            "the test split. grad: the norm of each weighted loss term's gradient over a tower's parameters, on "
            "one held-out batch of 128 at the end of training."]


def chance_segments(names: list[str], half: float = 0.45) -> list[tuple[float, float, float]]:
    """(x from, x to, chance %) of each group's chance line on the bar chart (group i centred on x = i)."""
    return [(i - half, i + half, 100 * CHANCE[n]) for i, n in enumerate(names)]


def paired_marks(table: dict, tests: dict, control: str, alpha: float) -> dict[tuple[str, str], str]:
    """{(model, report row): "▲" / "▼"}: the case-level paired test is significant and its direction agrees with
    the cell's mean against the control's (a macro average can move the other way than the pooled cases)."""
    marks = {}
    for m, rows in tests.items():
        for name, t in rows.items():
            ref, cell = table.get(control, {}).get(name), table.get(m, {}).get(name)
            if ref is None or cell is None or t["p_case"] >= alpha:
                continue
            if t["b_case"] > t["c_case"] and cell[0] > ref[0]:
                marks[(m, name)] = "▲"
            elif t["b_case"] < t["c_case"] and cell[0] < ref[0]:
                marks[(m, name)] = "▼"
    return marks


def results_figure(table: dict, names: list[str], title: str, marks: dict | None = None):
    """Grouped bars of ``collect``'s table (error bars: sd over seeds where a model has several), each group's
    n under its name and its own chance line; ▲/▼ above a bar: the paired test against the control
    (``paired_marks``)."""
    from matplotlib.figure import Figure  # not through pyplot: no GUI backend, nothing to close

    labels = list(table)
    fig = Figure(figsize=(max(8, 1.1 * len(names)), 4.8))
    ax = fig.subplots()
    width = 0.8 / max(len(labels), 1)
    for k, m in enumerate(labels):
        xs = [i + (k - (len(labels) - 1) / 2) * width for i in range(len(names))]
        ys = [100 * table[m][n][0] if n in table[m] else 0 for n in names]
        err = [100 * table[m][n][1] if n in table[m] and table[m][n][2] > 1 else 0 for n in names]
        ax.bar(xs, ys, width, yerr=err if any(err) else None, capsize=3, label=m)
        for x, y, e, n in zip(xs, ys, err, names):
            mark = (marks or {}).get((m, n))
            if mark:
                ax.text(x, y + e + 1, mark, ha="center", va="bottom", fontsize=9,
                        color="tab:green" if mark == "▲" else "tab:red")
    ax.set_xticks(range(len(names)))
    ns = [next(table[m][n][3] for m in labels if n in table[m]) for n in names]
    ax.set_xticklabels([f"{n}\n(n={k})" for n, k in zip(names, ns)], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    segs = chance_segments(names)
    if segs:
        x0, x1, ys = zip(*segs)
        ax.hlines(ys, x0, x1, color="black", lw=1.0, ls="--", label="chance")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    if marks:
        fig.text(0.01, 0.01, "▲/▼: better/worse than the control in the paired case-level test", fontsize=7)
    fig.tight_layout()
    return fig


def _number(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_results_shape(benches: dict, path: Path) -> None:
    """Raise ``ValueError`` naming the file and the key for anything the report would read that is not what
    ``macco eval`` writes: groups a mapping of finite numbers (or null), subsets a mapping of subsets with an
    integer ``n`` >= 0 and a finite (or null) accuracy, per-case strings of 1/0/x."""
    for name, b in benches.items():
        where = f"{path}: benchmarks.{name}"
        if not isinstance(b["groups"], dict):
            raise ValueError(f"{where}.groups: a mapping of group -> accuracy expected, got "
                             f"{type(b['groups']).__name__} {str(b['groups'])[:60]!r}")
        for bench, key, _ in GROUPS:
            v = b["groups"].get(key) if bench == name else None
            if v is not None and not _number(v):
                raise ValueError(f"{where}.groups.{key}: {v!r} is not a finite number")
        subsets = b.get("subsets", {})
        if not isinstance(subsets, dict) or not all(isinstance(v, dict) for v in subsets.values()):
            raise ValueError(f"{where}.subsets: a mapping of subset -> {{n, correct, accuracy}} expected")
        for sub, v in subsets.items():
            n = v.get("n", 0)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"{where}.subsets.{sub}.n: {n!r} is not a count")
            acc = v.get("accuracy")
            if acc is not None and not _number(acc):
                raise ValueError(f"{where}.subsets.{sub}.accuracy: {acc!r} is not a finite number")
        cases = b.get("cases", {})
        if not isinstance(cases, dict) or not all(isinstance(c, str) and set(c) <= set("01x")
                                                  for c in cases.values()):
            raise ValueError(f"{where}.cases: a mapping of group -> a string of 1/0/x per case expected")


def _missing_images(results: dict[str, list[dict]]) -> dict[str, dict[str, int]]:
    """{benchmark: {model: cases without an image}} of the runs scored with ``allow_missing``."""
    out: dict[str, dict[str, int]] = {}
    for label, runs in results.items():
        for r in runs:
            for b, res in r["benchmarks"].items():
                k = sum(v.get("missing_images", 0) for v in res.get("subsets", {}).values())
                if k:
                    out.setdefault(b, {})[label] = out.get(b, {}).get(label, 0) + k
    return out


def _dropped_groups(results: dict[str, list[dict]]) -> dict[str, list[str]]:
    """{report row: the models whose results hold its benchmark but no value for the group} — e.g. an ARO
    VG-Attribution macro with every group under ``vga_min_count`` cases, or a file with no scorable case: named
    in the report instead of left out silently."""
    out: dict[str, list[str]] = {}
    for bench, key, name in GROUPS:
        for label, runs in results.items():
            if any(bench in r["benchmarks"] and r["benchmarks"][bench]["groups"].get(key) is None for r in runs):
                out.setdefault(name, []).append(label)
    return out


def load_results(specs: list[str]) -> dict[str, list[dict]]:
    """``LABEL=PATH`` specs -> {label: [evaluation json per seed]} for ``write_report``. PATH is a results.json
    (``macco eval --out``, the evaluate stage) or the evaluate stage directory holding one; a label given more
    than once is several seeds of one model, each seed read from the run name in its json (``NAME-s<seed>``, as
    the flow names runs), else its position among the label's files."""
    results: dict[str, list[dict]] = {}
    files: dict[str, list[Path]] = {}
    for spec in specs:
        label, sep, path = (x.strip() for x in spec.partition("="))
        if not sep or not label or not path:
            raise ValueError(f"bad results spec {spec!r}: expected LABEL=PATH (a results.json or an evaluate "
                             "stage directory)")
        p = Path(path)
        if p.is_dir():
            p = p / "results.json"
        if not p.is_file():
            raise FileNotFoundError(f"{label}: no such file {p}")
        try:
            run = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not valid JSON ({exc})") from exc
        benches = run.get("benchmarks") if isinstance(run, dict) else None
        if not benches or not isinstance(benches, dict) or \
                not all(isinstance(b, dict) and "groups" in b for b in benches.values()):
            raise ValueError(f"{p}: not an evaluation results.json (needs benchmarks.<name>.groups, as macco eval "
                             "--out writes; a report's results.json is not one)")
        check_results_shape(benches, p)
        results.setdefault(label, []).append(run)
        files.setdefault(label, []).append(p)
    for label, runs in results.items():
        seeds = [_seed(r, i) for i, r in enumerate(runs)]
        twice = [s for s in dict.fromkeys(seeds) if seeds.count(s) > 1]
        if twice:
            same = [str(f) for f, s in zip(files[label], seeds) if s == twice[0]]
            raise ValueError(f"{label}: seed {twice[0]} given more than once ({', '.join(same)})")
    return results


def write_report(results: dict[str, list[dict]], out_dir: str | Path, title: str, note: str = "",
                 control: str = "clip-ft", alpha: float = 0.05) -> dict:
    """``results.md`` / ``results.json`` / ``results.png``. Every model's cells are marked where a paired
    McNemar test against ``control`` (cases pooled over seeds) gives p < ``alpha``: ▲ better, ▼ worse."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = collect(results)
    labels = list(table)
    tests = paired_tests(results, control)
    others = [m for m in labels if m not in (control, "base")]
    names = [name for _, _, name in GROUPS if any(name in table[m] for m in labels)]
    marks = paired_marks(table, tests, control, alpha)
    seeds = {m: max((v[2] for v in table[m].values()), default=0) for m in labels}
    lines = [f"# {title}", "", note, "",
             "| benchmark group | n | chance | " + " | ".join(f"{m} ({seeds[m]} seed{'s' if seeds[m] != 1 else ''})"
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
        lines.append(f"| {name} | {n} | {100 * CHANCE[name]:.0f} | " + " | ".join(cells) + " |")
    lines += ["", "Accuracy in %; ± is the standard deviation over seeds." if any(seeds[m] > 1 for m in labels)
              else "Accuracy in %; one seed per model: no spread estimate."]
    if others and control in results:
        lines[-1] += (f" ▲/▼: better/worse than {control} in a paired test over the same cases (p < {alpha}; the "
                      "case-level sign test, seeds paired, and the direction of the cell's mean agrees).")
    elif others:
        lines[-1] += f" No paired tests: the control {control!r} was not evaluated."
    for m, rows in tests.items():
        if not rows:
            continue
        k = max(r["pairs"] for r in rows.values())
        lines += ["", f"### {m} vs {control}: paired tests over {k} seed pair(s)", "",
                  f"| benchmark group | cases | pooled pairs | {m} right, {control} wrong | {control} right, {m} "
                  f"wrong | McNemar p (pooled) | cases {m} > / < {control} | sign-test p (cases) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r in rows.items():
            lines.append(f"| {name} | {r['cases']} | {r['n']} | {r['b']} | {r['c']} | {r['p']:.3g} | "
                         f"{r['b_case']} / {r['c_case']} | {r['p_case']:.3g}{' *' if r['p_case'] < alpha else ''} |")
    partial = _missing_images(results)
    if partial:
        lines += ["", "Scored with images missing (`--allow-missing`; those cases are left out of n): " + "; ".join(
            f"{b} ({', '.join(f'{m}: {k}' for m, k in ms.items())} cases)" for b, ms in partial.items())]
    dropped = _dropped_groups(results)
    if dropped:
        lines += ["", "Not reported (no cases scored): " + "; ".join(f"{g} ({', '.join(ms)})"
                                                                  for g, ms in dropped.items())]
    lines += _probe_section(results)
    md = out_dir / "results.md"
    md.write_text("\n".join(lines) + "\n")

    fig = results_figure(table, names, title, marks)
    png = out_dir / "results.png"
    fig.savefig(png, dpi=120)
    (out_dir / "results.json").write_text(json.dumps(
        {"benchmarks": {m: {n: {"mean": v[0], "sd": v[1], "seeds": v[2], "n": v[3]} for n, v in rows.items()}
                        for m, rows in table.items()},
         "paired_tests": {"control": control, "alpha": alpha, "models": tests},
         "probes": {m: {k: {"mean": v[0], "sd": v[1], "runs": v[2]} for k, v in
                        probe_summary([r["probes"] for r in runs if "probes" in r]).items()}
                    for m, runs in results.items()}}, indent=2))
    return {"markdown": str(md), "png": str(png), "table": "\n".join(lines)}


# (label, path into a probe result, format): the rows of the probe table
PROBE_ROWS = [
    ("image: position R² x (global)", ("image_global", "r2_x"), "r2"),
    ("image: position R² y (global)", ("image_global", "r2_y"), "r2"),
    ("image: pair direction (global) %", ("image_global", "direction_acc"), "pct"),
    ("image: position R² x (patches)", ("image_patches", "r2_x"), "r2"),
    ("image: pair direction (patches) %", ("image_patches", "direction_acc"), "pct"),
    ("text: relation-swap cosine", ("text", "relation_swap_cosine"), "r2"),
    ("text: attribute-swap cosine", ("text", "attribute_swap_cosine"), "r2"),
    ("text: relation direction %", ("text", "direction_acc"), "pct"),
    ("text: bigram shift, word tokens %", ("text", "bigram_shift_tokens_acc"), "pct"),
    ("text: bigram shift, EOT %", ("text", "bigram_shift_eot_acc"), "pct"),
    ("recon: relation words %", ("reconstruction", "relation_acc"), "pct"),
    ("recon: attribute words %", ("reconstruction", "attribute_acc"), "pct"),
    ("retrieval i→t R@1 %", ("retrieval", "i2t_r1"), "pct"),
    ("retrieval t→i R@1 %", ("retrieval", "t2i_r1"), "pct"),
    ("zero-shot top-1 %", ("zeroshot_top1",), "pct"),
] + [(f"grad ‖{tower}‖ ← {label}", ("gradient_norms", term, tower), "g")
     for tower in ("text", "image")
     for term, label in (("contrast_loss", "contrast"), ("intra_modal_contrast_loss", "MIR"),
                         ("text_reconstruction_loss", "masked text"), ("image_reconstruction_loss", "masked image"))]
# the reconstruction terms' names in probe results written before they were renamed (read as the new names)
OLD_TERM_NAMES = {"text_reconstruction_loss": "mask_loss_text", "image_reconstruction_loss": "mask_loss_image"}
PROBE_CHANCE = {"image: pair direction (global) %": "50", "image: pair direction (patches) %": "50",
                "text: relation direction %": "50", "image: position R² x (global)": "0",
                "image: position R² y (global)": "0", "image: position R² x (patches)": "0"}


def probe_value(res: dict, path: tuple[str, ...]):
    for k in path:
        if isinstance(res, dict) and k not in res:
            k = OLD_TERM_NAMES.get(k, k)
        if not isinstance(res, dict) or k not in res:
            return None
        res = res[k]
    return res


def probe_summary(runs: list[dict]) -> dict[str, tuple[float, float, int]]:
    """{row label: (mean, sd, runs)} over several runs' probe results (seeds)."""
    out = {}
    for label, path, _ in PROBE_ROWS:
        vals = [v for v in (probe_value(r, path) for r in runs) if v is not None]
        if vals:
            out[label] = (statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0, len(vals))
    return out


def format_probes(results: dict[str, list[dict] | dict]) -> str:
    """A markdown table: probe rows x models ({label: result or [results over seeds]})."""
    summ = {m: probe_summary(r if isinstance(r, list) else [r]) for m, r in results.items()}
    labels = list(summ)
    lines = ["| probe | chance | " + " | ".join(labels) + " |", "|---|---:|" + "---:|" * len(labels)]
    for label, _, fmt in PROBE_ROWS:
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
