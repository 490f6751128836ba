"""The README's "Seeds, ablations" table from two reports: clip-ft and macco from one results.md (5 seeds), the
ablations from another (their seeds, each marked against that report's clip-ft). Numbers are copied from the
reports (rounded half-up where the README shows fewer digits), never recomputed.

    python docs/experiments/readme_table.py docs/experiments/e5-core-results.md docs/experiments/e5-abl3-results.md
"""
from __future__ import annotations

import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

GROUPS = [("ARO VG-Relation (macro)", "VG-Relation"), ("ARO VG-Attribution (macro)", "VG-Attribution"),
          ("ARO COCO-Order (P@1)", "COCO-Order"), ("SugarCrepe attribute", "SugarCrepe attribute"),
          ("SugarCrepe relation", "SugarCrepe relation"), ("SugarCrepe object", "SugarCrepe object"),
          ("VL-CheckList attribute", "VL-CheckList attribute"), ("VL-CheckList relation", "VL-CheckList relation"),
          ("VL-CheckList object", "VL-CheckList object"), ("VALSE avg", "VALSE"), ("What's Up controlled", "What's Up")]
CORE = [("clip-ft", "clip-ft"), ("macco", "macco")]
ABLATIONS = [("text-only", "text-only"), ("image-only", "image-only"), ("macco-no-mca", "macco no MCA"),
             ("macco-no-mir", "macco no MIR"), ("clip-ft-hn", "clip-ft + hard neg."),
             ("macco-hn", "macco + hard neg."), ("clip-ft-time", "clip-ft, macco's wall time")]


def tables(path: Path) -> dict[str, dict[str, dict[str, str]]]:
    """{first header cell: {row label: {column: cell}}} for every markdown table of a report."""
    out: dict = {}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            head = [c.strip() for c in lines[i].strip("|").split("|")]
            rows = {}
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip("|").split("|")]
                rows[cells[0]] = dict(zip(head, cells))
                i += 1
            out.setdefault(head[0], rows)
        else:
            i += 1
    return out


def column(head: dict, run: str) -> str:
    """The column of ``run`` in a table ('clip-ft (5 seeds)' in the results table, 'clip-ft' in the probes')."""
    return next(k for k in head if k == run or k.startswith(run + " ("))


def seeds(head: dict, run: str) -> str:
    return column(head, run).split("(")[1].split()[0] if "(" in column(head, run) else "?"


def mean(cell: str, digits: int) -> str:
    if cell in ("-", ""):
        return "–"
    q = Decimal(1).scaleb(-digits) if digits else Decimal(1)
    return str(Decimal(cell.split(" ± ")[0]).quantize(q, rounding=ROUND_HALF_UP))


def build(core_md: Path, abl_md: Path) -> str:
    core, abl = tables(core_md), tables(abl_md)
    res_c, res_a = core["benchmark group"], abl["benchmark group"]
    pr_c, pr_a = core["probe"], abl["probe"]
    runs = [(res_c, pr_c, key, label) for key, label in CORE] + [(res_a, pr_a, key, label) for key, label in ABLATIONS]
    any_row = lambda rows: next(iter(rows.values()))  # noqa: E731
    head = ["group (chance)"] + [f"{label} ({seeds(any_row(r), key)}{' seeds' if key in ('clip-ft', 'macco') else ''})"
                                 for r, _, key, label in runs]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * len(runs) + "|"]
    for report, label in GROUPS:
        chance = res_c[report]["chance"]
        cells = [r[report][column(r[report], key)] for r, _, key, _ in runs]
        lines.append(f"| {label} ({chance}) | " + " | ".join(cells) + " |")

    def probe(name: str, key_rows, key: str) -> str:
        return key_rows[name][column(key_rows[name], key)]

    lines.append("| text direction probe (50) | " + " | ".join(probe("text: relation direction %", p, k)
                                                             for _, p, k, _ in runs) + " |")
    recon = []
    for _, p, k, _ in runs:
        rel, att = (mean(probe(f"recon: {w} words %", p, k), 1) for w in ("relation", "attribute"))
        recon.append("–" if rel == "–" else f"{rel} / {att}")
    lines.append("| masked words rel. / attr. | " + " | ".join(recon) + " |")
    lines.append("| retrieval i→t R@1 | " + " | ".join(probe("retrieval i→t R@1 %", p, k) for _, p, k, _ in runs) + " |")
    grads = [" / ".join(mean(probe(f"grad ‖text‖ ← {t}", p, k), d) for t, d in
                        (("contrast", 1), ("masked text", 1), ("masked image", 0))) for _, p, k, _ in runs]
    lines.append("| ‖∇ text tower‖: contrast / masked text / masked image | " + " | ".join(grads) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), Path(sys.argv[2])))
