"""``results.png``: grouped bars of the report's table, error bars over seeds, each group's chance line, and the
paired test's marks."""
from __future__ import annotations

from pipeline.results import PARTIAL_MARK


def chance_segments(names: list[str], chance: dict[str, float], half: float = 0.45) -> list[tuple[float, float, float]]:
    """(x from, x to, chance %) of each group's chance line on the bar chart (group i centred on x = i); ``chance``:
    each row's chance accuracy (``pipeline.results.chance_of``)."""
    return [(i - half, i + half, 100 * chance[n]) for i, n in enumerate(names)]


def paired_marks(table: dict, tests: dict, control: str, alpha: float) -> dict[tuple[str, str], str]:
    """{(model, report row): "▲" / "▼"}: the case-level paired test is significant after Holm's correction over
    the model's groups (``p_holm``) and its direction agrees with the cell's mean against the control's (a macro
    average can move the other way than the pooled cases)."""
    marks = {}
    for m, rows in tests.items():
        for name, t in rows.items():
            ref, cell = table.get(control, {}).get(name), table.get(m, {}).get(name)
            if ref is None or cell is None or t["p_holm"] >= alpha:
                continue
            if t["b_case"] > t["c_case"] and cell[0] > ref[0]:
                marks[(m, name)] = "▲"
            elif t["b_case"] < t["c_case"] and cell[0] < ref[0]:
                marks[(m, name)] = "▼"
    return marks


def results_figure(table: dict, names: list[str], title: str, marks: dict | None = None,
                   partial: set[str] | frozenset = frozenset(), *, chance: dict[str, float]):
    """Grouped bars of ``collect``'s table (error bars: sd over seeds where a model has several), each group's
    n under its name and its own chance line; ▲/▼ above a bar: the paired test against the control
    (``paired_marks``); † after a group's name: ``partial`` (averaged over part of its files)."""
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
    ax.set_xticklabels([f"{n}{' ' + PARTIAL_MARK if n in partial else ''}\n(n={k})" for n, k in zip(names, ns)],
                       rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    segs = chance_segments(names, chance)
    if segs:
        x0, x1, ys = zip(*segs)
        ax.hlines(ys, x0, x1, color="black", lw=1.0, ls="--", label="chance")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    notes = (["▲/▼: better/worse than the control in the paired case-level test"] if marks else []) + \
        ([f"{PARTIAL_MARK}: partial, averaged over part of the group's files (results.md names them)"]
         if partial & set(names) else [])
    if notes:
        fig.text(0.01, 0.01, "; ".join(notes), fontsize=7)
    fig.tight_layout()
    return fig
