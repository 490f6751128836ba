"""The preprocessing DAG at scale (``make scale``): the synthetic world at a given caption count, then captions ->
parse -> ground (annotations) -> masks (the ViT-B/32 and the tiny grid) -> validate, as the flow runs them (the stage
registry through ``flows.runner``, in-process, no Prefect), each stage in a process of its own so its wall time and
peak RSS are its own; per stage also the rows it wrote and its folder's size on disk. Then ``macco validate --deep``
and the DuckDB inspection queries of the docs over the full tables.

    python bench/scale.py --captions 1000 10000 100000 616767 --out bench/scale.json [--size 64] [--shard 20000]
    python bench/scale.py --plot bench/scale.json bench/scale.png

COCO 2014 has 123,287 images (82,783 train, 40,504 val) and 616,767 captions (5 per image): ``--captions 616767``
builds a world of that many images and captions (train 82,783; val and test 20,252 each). The world's benchmark sets
are not written (they are evaluation sets, not the preprocessing DAG).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
COCO_IMAGES, COCO_CAPTIONS, COCO_TRAIN = 123_287, 616_767, 82_783
EVAL_FRACTION = (COCO_IMAGES / COCO_TRAIN - 1) / 2  # val and test each, as a share of train: COCO's 40,504 / 2
STAGES = ("world", "captions", "parse", "ground", "masks", "validate")


def config_for(captions: int, size: int, shard: int, artifacts: Path) -> dict:
    """A flow config of ``captions`` captions (5 per image) in COCO 2014's train / held-out proportion."""
    train = max(1, round(captions / 5 / (1 + 2 * EVAL_FRACTION)))
    return {"name": f"scale-{captions}", "artifacts": str(artifacts),
            "world": {"seed": 0, "images": train, "size": size, "eval_fraction": EVAL_FRACTION, "benchmarks": False},
            "parse": {"clip_model": "ViT-B-32", "shard_size": shard, "batch_size": 256},
            "ground": {"backend": "annotations", "shard_size": shard},
            "masks": {"models": ["ViT-B-32", "macco-tiny"]},
            "validate": {"params": {"min_text_mask_coverage": 0.9, "min_grounded_coverage": 0.9}}}


def run_stage(config: Path, stage: str) -> dict:
    """One stage (its upstream read back) in a child process: wall time, the child's peak RSS (its own and its
    children's), the rows it wrote and its folder's size."""
    code = (f"import sys, json, resource; sys.path.insert(0, {str(Path.cwd())!r})\n"
            "from flows.config import load_config\nfrom flows.runner import Runner\n"
            f"cfg = load_config({str(config)!r})\n"
            f"out = Runner(cfg.artifacts, [{stage!r}], log=lambda line: None).run_dag(cfg)\n"
            "peak = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))\n"
            f"print(json.dumps([out.get({stage!r}), peak], default=str))\n")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{stage}: {r.stderr[-2000:]}")
    manifest, peak_kb = json.loads(r.stdout.strip().splitlines()[-1])
    rows = {k: v.get("rows") for k, v in manifest.get("outputs", {}).items() if v.get("kind") == "table"}
    folder = Path(manifest["dir"])
    disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {"stage": stage, "wall_s": round(wall, 1), "peak_rss_mb": round(peak_kb / 1024), "rows": rows,
            "disk_mb": round(disk / 2 ** 20, 1)}


def peak_rss_of(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of a command in a child process of its own (a fresh RUSAGE_CHILDREN reading)."""
    code = ("import resource, subprocess, sys, time, json\n"
            f"t0 = time.perf_counter(); subprocess.run({cmd!r}, check=True, capture_output=True)\n"
            "print(json.dumps([time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall, kb = json.loads(r.stdout)
    return round(wall, 1), round(kb / 1024)


def queries(artifacts: Path) -> dict:
    """``macco validate --deep`` and the docs' inspection queries over the full tables, timed."""
    macco = str(Path(sys.executable).with_name("macco"))
    out = {"validate --deep": peak_rss_of([macco, "validate", str(artifacts), "--deep"])}
    for label, sql in (("patches per phrase per grid",
                        "select grid, avg(len(patch_idx)) from patch_masks group by grid"),
                       ("top relation words", "select lower(text) w, count(*) n from scene_graphs where kind = "
                                              "'relation' group by w order by n desc limit 10"),
                       ("unaligned concepts", "select count(*) from token_masks t join captions c using (caption_id) "
                                              "where len(t.unmatched) > 0")):
        out[f"sql: {label}"] = peak_rss_of([macco, "sql", sql, "--root", str(artifacts)])
    return out


def measure(captions: int, size: int, shard: int, root: Path) -> dict:
    import yaml

    art = root / f"c{captions}"
    config = root / f"c{captions}.yaml"
    root.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(config_for(captions, size, shard, art)))
    stages = [run_stage(config, s) for s in STAGES]
    return {"captions": captions, "size": size, "shard": shard, "stages": stages, "queries": queries(art)}


def plot(results: list[dict], png: Path, size: int) -> None:
    """Wall time and peak RSS per stage against the caption count, for the runs at image size ``size``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in results if r["size"] == size]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for stage in STAGES:
        xs = [r["captions"] for r in results]
        a.plot(xs, [next(s["wall_s"] for s in r["stages"] if s["stage"] == stage) for r in results], "o-", label=stage)
        b.plot(xs, [next(s["peak_rss_mb"] or 0 for s in r["stages"] if s["stage"] == stage) for r in results], "o-",
               label=stage)
    for ax, title in ((a, "wall time (s)"), (b, "peak RSS (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log" if ax is a else "linear")
        ax.set_xlabel("captions")
        ax.set_title(f"{title}, {size} px images")
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captions", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--size", type=int, default=64, help="the world's image size in pixels")
    ap.add_argument("--shard", type=int, default=20000, help="parse and ground shard size")
    ap.add_argument("--root", type=Path, default=Path("artifacts-scale"))
    ap.add_argument("--out", type=Path, default=Path("bench/scale.json"))
    ap.add_argument("--plot", nargs=2, type=Path, metavar=("JSON", "PNG"))
    args = ap.parse_args()
    if args.plot:
        plot(json.loads(args.plot[0].read_text()), args.plot[1], args.size)
        return
    results = json.loads(args.out.read_text()) if args.out.is_file() else []
    for n in args.captions:
        res = measure(n, args.size, args.shard, args.root)
        results = [r for r in results if (r["captions"], r["size"]) != (n, args.size)] + [res]
        args.out.write_text(json.dumps(sorted(results, key=lambda r: (r["size"], r["captions"])), indent=1))
        for s in res["stages"]:
            print(f"{n:>7} captions {s['stage']:<9} {s['wall_s']:>8.1f} s {s['peak_rss_mb'] or 0:>7} MB "
                  f"{s['disk_mb']:>8.1f} MB on disk {s['rows']}", flush=True)
        for q, (wall, mb) in res["queries"].items():
            print(f"{n:>7} captions {q:<35} {wall:>6.1f} s {mb:>6} MB", flush=True)


if __name__ == "__main__":
    main()
