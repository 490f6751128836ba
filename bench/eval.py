"""Evaluation harness throughput (unique images/captions encoded once, batched) vs a per-sample loop
(encode the image and every caption of each case), same tiny model and cases. Target >= 5x."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(images: int = 200) -> dict:
    import open_clip
    import torch
    from PIL import Image

    from model.factory import register_model_configs
    from model.benchmarks import aro, sugarcrepe
    from model.benchmarks.registry import world_sets
    from model.benchmarks.scoring import Encoder, score_cases
    from pipeline.world import WorldConfig, generate_world
    from pipeline.world_benchmarks import benchmark_roots

    register_model_configs()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        generate_world(d, WorldConfig(seed=3, images=images * 5, size=64, eval_fraction=0.2), world_sets())
        roots = benchmark_roots(d)
        cases = aro.load_vg(roots["aro-vgr"], "relation") + sugarcrepe.load(roots["sugarcrepe"])
        model, _, pre = open_clip.create_model_and_transforms("macco-tiny")
        tok = open_clip.get_tokenizer("macco-tiny")
        model.eval()
        enc = Encoder(model, pre, tok, batch_size=128)
        score_cases(enc, cases[:20])  # warm-up
        t0 = time.perf_counter()
        score_cases(enc, cases)
        harness = len(cases) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        with torch.no_grad():
            for c in cases:
                with Image.open(c.image) as im:
                    im = im.convert("RGB")
                    if c.crop:
                        x, y, w, h = c.crop
                        im = im.crop((x, y, x + w, y + h))
                fi = model.encode_image(pre(im)[None])
                ft = model.encode_text(tok(c.options))
                (torch.nn.functional.normalize(ft, dim=-1) @ torch.nn.functional.normalize(fi, dim=-1)[0])
        loop = len(cases) / (time.perf_counter() - t0)
    ratio = harness / loop
    print(f"eval harness: {len(cases)} cases, batched {harness:7.1f} cases/s, per-sample loop {loop:7.1f} cases/s, "
          f"ratio {ratio:.1f} (target >= 5: {'met' if ratio >= 5 else 'NOT met'})")
    return {"cases": len(cases), "harness_per_s": harness, "loop_per_s": loop, "ratio": ratio}


if __name__ == "__main__":
    main()
