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


def _n(bench: dict) -> int:
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
            n = _n(next(r for r in runs if bench in r["benchmarks"])["benchmarks"][bench])
            spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
            rows[name] = (statistics.mean(vals), spread, len(vals), n)
        table[label] = rows
    return table


def write_report(results: dict[str, list[dict]], out_dir: str | Path, title: str, note: str = "") -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = collect(results)
    labels = list(table)
    names = [name for _, _, name in GROUPS if any(name in table[m] for m in labels)]
    seeds = {m: max((v[2] for v in table[m].values()), default=0) for m in labels}
    lines = [f"# {title}", "", note, "",
             "| benchmark group | n | " + " | ".join(f"{m} ({seeds[m]} seed{'s' if seeds[m] != 1 else ''})"
                                                  for m in labels) + " |",
             "|---|---:|" + "---:|" * len(labels)]
    for name in names:
        n = next(table[m][name][3] for m in labels if name in table[m])
        cells = []
        for m in labels:
            if name not in table[m]:
                cells.append("-")
                continue
            mean, sd, k, _ = table[m][name]
            cells.append(f"{100 * mean:.1f}" + (f" ± {100 * sd:.1f}" if k > 1 else ""))
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    lines += ["", "Accuracy in %; ± is the standard deviation over seeds."]
    md = out_dir / "results.md"
    md.write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(names)), 4.5))
    width = 0.8 / max(len(labels), 1)
    for k, m in enumerate(labels):
        xs = [i + (k - (len(labels) - 1) / 2) * width for i in range(len(names))]
        ys = [100 * table[m][n][0] if n in table[m] else 0 for n in names]
        err = [100 * table[m][n][1] if n in table[m] and table[m][n][2] > 1 else 0 for n in names]
        ax.bar(xs, ys, width, yerr=err if any(err) else None, capsize=3, label=m)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.axhline(50, color="grey", lw=0.5, ls="--")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = out_dir / "results.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    (out_dir / "results.json").write_text(json.dumps(
        {m: {n: {"mean": v[0], "sd": v[1], "seeds": v[2], "n": v[3]} for n, v in rows.items()}
         for m, rows in table.items()}, indent=2))
    return {"markdown": str(md), "png": str(png), "table": "\n".join(lines)}
