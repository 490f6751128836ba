"""The training input path over a scale run's full tables (``bench/scale.py`` first): the samples built from the
tables as ``macco train`` builds them (``model.data.build_samples``: seconds and the process's memory), the epoch
sampler over them (``EpochBatchSampler`` with one caption per image, the paper's setting: memory of an epoch's
order), then the DataLoader's samples/s with 0 / 1 / 2 workers at the ViT-B/32 geometry (224 px crop, 7x7 grid),
each worker's resident memory after its batches (a worker shares the parent's samples copy-on-write: growth there
is the samples being copied), beside the ViT-B/32 MACCO step's samples/s on this CPU at batch 8.

    python bench/scale_loader.py ARTIFACTS [--batches 20] [--batch 64]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def rss_mb(pid: int | str = "self") -> float:
    """Resident and proportional set size (MB) of a process (PSS splits pages shared with the parent)."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, *rest = line.split()
        if key in ("Rss:", "Pss:", "Private_Dirty:"):
            out[key[:-1].lower()] = int(rest[0]) / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifacts", type=Path)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    import torch
    from torch.utils.data import DataLoader

    from data_schemas.geometry import Geometry
    from model.data import DataConfig, EpochBatchSampler, MaccoDataset, build_samples, collate, image_groups
    from pipeline.validate import discover_tables

    found = discover_tables(a.artifacts)
    tables = {t: found[t] for t in ("captions", "token_masks", "scene_graphs", "regions")}
    world = next(p for p in sorted((a.artifacts / "world").iterdir()) if (p / "world.json").is_file())
    res: dict = {}
    before = rss_mb()["rss"]
    t0 = time.perf_counter()
    samples, counts = build_samples(tables, "train")
    res["build_samples"] = {"samples": len(samples), "s": round(time.perf_counter() - t0, 1),
                            "rss_growth_mb": round(rss_mb()["rss"] - before),
                            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    print(f"build_samples: {len(samples):,} training samples in {res['build_samples']['s']} s, the process "
          f"+{res['build_samples']['rss_growth_mb']} MB (peak {res['build_samples']['peak_rss_mb']} MB)", flush=True)
    before = rss_mb()["rss"]
    groups = image_groups(samples)
    sampler = EpochBatchSampler(len(samples), a.batch, 0, 0, 10 ** 6, groups=groups)
    t0 = time.perf_counter()
    order = sampler.epoch_order(0)
    res["sampler"] = {"images": len(groups), "epoch_order_s": round(time.perf_counter() - t0, 2),
                      "rss_growth_mb": round(rss_mb()["rss"] - before)}
    print(f"sampler: {len(groups):,} images, one epoch's order ({len(order):,}) in "
          f"{res['sampler']['epoch_order_s']} s, +{res['sampler']['rss_growth_mb']} MB (groups and order)", flush=True)
    ds = MaccoDataset(samples, DataConfig(image_root=str(world)), Geometry(224, 32))
    res["loader"] = {}
    for w in (0, 1, 2):
        loader = DataLoader(ds, batch_sampler=EpochBatchSampler(len(samples), a.batch, 0, 0, a.batches,
                                                                groups=groups),
                            collate_fn=collate, num_workers=w, persistent_workers=w > 0)
        it = iter(loader)
        next(it)  # the workers started and warm
        t0 = time.perf_counter()
        n = sum(len(b["caption_id"]) for b in it)
        rate = n / (time.perf_counter() - t0)
        workers = [rss_mb(p.pid) for p in getattr(it, "_workers", [])]
        res["loader"][w] = {"samples_per_s": round(rate, 1), "worker_mb": workers}
        mem = ", ".join(f"worker RSS {m['rss']:.0f} MB (PSS {m['pss']:.0f}, private dirty {m['private_dirty']:.0f})"
                        for m in workers) or "in-process"
        print(f"loader workers={w}: {rate:7.1f} samples/s at 224 px over the full tables; {mem}", flush=True)
        del it, loader
    from train_step import step_times

    torch.set_num_threads(2)
    t = step_times("ViT-B-32", 8, 5)
    res["vit_b32_macco_step"] = {"s": t["macco_s"], "samples_per_s": round(8 / t["macco_s"], 2)}
    print(f"ViT-B/32 MACCO step (CPU, batch 8, 2 threads): {t['macco_s']:.2f} s = {8 / t['macco_s']:.1f} samples/s: "
          f"one loader worker feeds {res['loader'][1]['samples_per_s'] / (8 / t['macco_s']):.0f}x that", flush=True)
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))
    os._exit(0)  # persistent workers: no teardown wait


if __name__ == "__main__":
    main()
