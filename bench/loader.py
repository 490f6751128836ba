"""Training data loading: decoded + transformed samples/s with N workers (JPEG decode, tracked random resized
crop, patch-mask assembly, collate), on 640x480 JPEGs at 224 px output (the ViT-B/32 geometry)."""
from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(n_images: int = 256, workers=(0, 1, 2), batch: int = 64) -> dict:
    from PIL import Image
    from torch.utils.data import DataLoader

    from data_schemas.geometry import Geometry
    from model.data import DataConfig, EpochBatchSampler, MaccoDataset, Sample, collate

    rng = random.Random(0)
    res = {}
    with tempfile.TemporaryDirectory() as d:
        samples = []
        for i in range(n_images):
            img = Image.effect_noise((640, 480), 60).convert("RGB")
            img.save(Path(d) / f"{i}.jpg", quality=90)
            boxes = [[[rng.uniform(0, 300), rng.uniform(0, 200), rng.uniform(320, 640), rng.uniform(240, 480)]]
                     for _ in range(3)]
            samples.append(Sample(i, f"{i}.jpg", [49406, 320, 49407] + [0] * 74, [1], boxes))
        ds = MaccoDataset(samples, DataConfig(image_root=d), Geometry(224, 32))
        for w in workers:
            steps = n_images // batch
            loader = DataLoader(ds, batch_sampler=EpochBatchSampler(n_images, batch, 0, 0, steps), collate_fn=collate,
                                num_workers=w)
            t0 = time.perf_counter()
            n = sum(len(b["caption_id"]) for b in loader)
            rate = n / (time.perf_counter() - t0)
            res[w] = rate
            print(f"loader workers={w}: {rate:7.1f} samples/s (640x480 JPEG -> 224 crop + patch mask)")
    return res


if __name__ == "__main__":
    main()
