"""What varies with the thread count, and by how much (README "Reproducibility"): the demo's two fine-tunes (clip-ft
and macco, from the demo's base, on its tables; 100 steps each) trained and evaluated twice, with 1 and with 2 torch
threads (``OMP_NUM_THREADS``), everything else equal; then, side by side: the exports' bytes and their largest
parameter difference, each loss term at the last step, every benchmark group's score and every case that flips.
The same thread count twice is byte-identical (``tests/unit/test_runner.py``'s two flows); this measures the other
case. Needs a finished ``make demo`` (its artifacts folder).

    python bench/threads_repro.py [--artifacts artifacts] [--steps 100] [--root artifacts-repro]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path.cwd()))


def demo_inputs(art: Path) -> dict:
    """The demo's tables, image root and base export, from its flow folders (the newest of each)."""
    from pipeline.validate import discover_tables

    found = discover_tables(art)
    world = next(p for p in sorted((art / "world").iterdir()) if (p / "world.json").is_file())
    base = max((art / "runs").glob("base-*/run/export.pt"), key=lambda p: p.stat().st_mtime)
    return {"tables": {t: str(found[t]) for t in ("captions", "token_masks", "scene_graphs", "regions")},
            "image_root": str(world), "pretrained": str(base), "world": str(world)}


def train_and_eval(mode: str, threads: int, inputs: dict, steps: int, root: Path) -> dict:
    macco = str(Path(sys.executable).with_name("macco"))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    out = root / f"{mode}-t{threads}"
    cfg = {"arch": "macco-tiny", "mode": mode, "pretrained": inputs["pretrained"], "tables": inputs["tables"],
           "image_root": inputs["image_root"], "out_dir": str(out), "max_steps": steps, "batch_size": 128,
           "lr_clip": 1.0e-4, "lr_predictor": 1.0e-3, "warmup": 20, "workers": 2, "log_every": 10,
           "progress": False, "resume": "fresh", "seed": 0}
    path = root / f"{mode}-t{threads}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    subprocess.run([macco, "train", "--config", str(path)], env=env, check=True, capture_output=True)
    ev = root / f"{mode}-t{threads}-eval.json"
    subprocess.run([macco, "eval", "--model", "macco-tiny", "--checkpoint", str(out / "export.pt"), "--benchmark",
                    "all", "--world", inputs["world"], "--out", str(ev)], env=env, check=True, capture_output=True)
    results = json.loads(ev.read_text())
    with open(out / "metrics.csv") as f:
        last = list(csv.DictReader(f))[-1]
    return {"export": out / "export.pt", "metrics": last, "results": results}


def compare(a: dict, b: dict) -> list[str]:
    import hashlib

    import torch

    lines = []
    ha, hb = (hashlib.sha256(x["export"].read_bytes()).hexdigest()[:12] for x in (a, b))
    sa, sb = (torch.load(x["export"], map_location="cpu", weights_only=True) for x in (a, b))
    sa, sb = (s.get("state_dict", s) for s in (sa, sb))
    diff = max(float((sa[k].float() - sb[k].float()).abs().max()) for k in sa if sa[k].is_floating_point())
    scale = max(float(sa[k].float().abs().max()) for k in sa if sa[k].is_floating_point())
    lines.append(f"export sha256 {ha} vs {hb}; largest parameter difference {diff:.3g} (largest parameter {scale:.3g})")
    terms = [k for k in a["metrics"] if k.endswith("_loss")]
    lines.append("last step's terms: " + ", ".join(
        f"{k} {float(a['metrics'][k]):.6f} vs {float(b['metrics'][k]):.6f}" for k in terms))
    ga, gb = a["results"].get("benchmarks", {}), b["results"].get("benchmarks", {})
    flips = scores = 0
    worst = 0.0
    for bench, ra in ga.items():
        rb = gb.get(bench, {})
        for key, sa_ in ra.get("groups", {}).items():
            sb_ = rb.get("groups", {}).get(key)
            if isinstance(sa_, (int, float)) and isinstance(sb_, (int, float)):
                scores += 1
                worst = max(worst, abs(sa_ - sb_))
        for key, ca in ra.get("cases", {}).items():
            cb = rb.get("cases", {}).get(key, "")
            flips += sum(x != y for x, y in zip(ca, cb))
    lines.append(f"benchmark groups: {scores} scores, largest difference {100 * worst:.2f} points; {flips} case "
                 "outcomes differ")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--root", type=Path, default=Path("artifacts-repro"))
    a = ap.parse_args()
    a.root.mkdir(parents=True, exist_ok=True)
    inputs = demo_inputs(a.artifacts)
    for mode in ("clip-ft", "macco"):
        one, two = (train_and_eval(mode, t, inputs, a.steps, a.root) for t in (1, 2))
        for line in compare(one, two):
            print(f"{mode} {a.steps} steps, 1 vs 2 threads: {line}", flush=True)


if __name__ == "__main__":
    main()
