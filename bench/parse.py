"""Parse stage throughput vs raw spaCy ``nlp.pipe`` (same components) on the same 20,000 captions.

Target: stage / raw >= 0.8 with 1 and with 2 processes.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def captions(n: int) -> list[dict]:
    import random

    from pipeline.parse_eval import load_gold
    from pipeline.world import Scene, captions_for, sample_scene

    rng = random.Random(0)
    gold = [g["caption"] for g in load_gold(Path(__file__).resolve().parents[1] / "tests/data/gold_scene_graphs.txt")]
    out = []
    while len(out) < n:
        if rng.random() < 0.5:
            out.append(rng.choice(gold))
        else:
            out.append(captions_for(sample_scene(rng, 0, 64), rng, 1)[0])
    return [{"caption_id": i, "caption": c} for i, c in enumerate(out)]


def main(n: int = 20_000) -> dict:
    from pipeline.scene_graph import load_nlp
    from pipeline.stages import ParseConfig, parse_stage

    rows = captions(n)
    texts = [r["caption"] for r in rows]
    results = {}
    for procs in (1, 2):
        t0 = time.perf_counter()  # raw = load the same pipeline (NER disabled) + nlp.pipe
        nlp = load_nlp()
        for _ in nlp.pipe(texts, batch_size=256, n_process=procs):
            pass
        raw = n / (time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            parse_stage(ParseConfig(n_process=procs, shard_size=n), rows, Path(d))
            stage = n / (time.perf_counter() - t0)
        ratio = stage / raw
        results[procs] = {"raw_per_s": raw, "stage_per_s": stage, "ratio": ratio}
        print(f"parse n_process={procs}: raw nlp.pipe {raw:7.0f} captions/s, stage {stage:7.0f} captions/s, "
              f"stage/raw {ratio:.2f} (target >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'})")
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    main(ap.parse_args().n)
