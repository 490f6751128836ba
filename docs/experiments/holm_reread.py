"""Every stored results file of docs/experiments re-read under Holm's correction (pipeline.report.holm over each
model's groups against its control): each raw p < 0.05 with its corrected p, kept or dropped. Usage (from the
repository root): python docs/experiments/holm_reread.py"""
import glob
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from pipeline.report import holm  # noqa: E402

for f in sorted(glob.glob("docs/experiments/*-results.json")):
    tests = json.loads(Path(f).read_text()).get("paired_tests", {})
    for model, rows in tests.get("models", {}).items():
        adjusted = holm({name: r["p_case"] for name, r in rows.items()})
        raw = [(name, r) for name, r in rows.items() if r["p_case"] < 0.05]
        if raw:
            cells = "; ".join(f"{name} {'▲' if r['b_case'] > r['c_case'] else '▼'} p {r['p_case']:.3g} → "
                              f"{adjusted[name]:.3g} {'kept' if adjusted[name] < 0.05 else 'dropped'}"
                              for name, r in raw)
            print(f"| {Path(f).name[:-13]} | {model} vs {tests['control']} ({len(rows)} groups) | {cells} |")
