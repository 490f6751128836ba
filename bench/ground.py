"""Grounding throughput: batched vs a per-image loop, same model and images (groundingdino-py, CPU).

Models: the tiny random model of the tests and the full-size SwinT-OGC architecture with random weights
(and a random BERT-base-sized text encoder). Target: batched / per-image >= 2x.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def build(kind: str, root: Path) -> dict:
    from tests_support import TINY_GDINO_CFG, build_tiny_groundingdino_py

    if kind == "tiny":
        return build_tiny_groundingdino_py(root)
    import torch
    from groundingdino.models import build_model
    from groundingdino.util.slconfig import SLConfig
    from transformers import BertConfig, BertModel

    from tests_support import write_tiny_bert

    bert = write_tiny_bert(root / "bert", with_model=False)
    BertModel(BertConfig(vocab_size=1031)).save_pretrained(bert)  # bert-base sized, random
    full = TINY_GDINO_CFG
    for k, v in {"enc_layers = 1": "enc_layers = 6", "dec_layers = 1": "dec_layers = 6",
                 "dim_feedforward = 128": "dim_feedforward = 2048", "num_queries = 20": "num_queries = 900"}.items():
        full = full.replace(k, v)
    cfg = root / "swint_ogc.py"
    cfg.write_text(full)
    args = SLConfig.fromfile(str(cfg))
    args.device, args.text_encoder_type = "cpu", str(bert)
    torch.manual_seed(0)
    ckpt = root / "swint.pth"
    torch.save({"model": build_model(args).state_dict()}, ckpt)
    return {"checkpoint": str(ckpt), "config_file": str(cfg), "bert_dir": str(bert)}


def main(n_images: int = 16, batch: int = 8, size: int = 224, kinds=("tiny", "full"), repeats: int = 3) -> dict:
    import torch
    from PIL import Image

    from pipeline.grounding import make_grounder
    from pipeline.grounding.base import GroundingConfig, GroundItem

    torch.manual_seed(0)
    results = {}
    for kind in kinds:
        n = n_images if kind == "tiny" else batch  # the full-size model: one batch (about a minute per repeat)
        imgs = [Image.effect_noise((size, size), 40 + i).convert("RGB") for i in range(n)]
        items = [GroundItem(i, size, size, ["small red circle", "blue square"], im) for i, im in enumerate(imgs)]
        with tempfile.TemporaryDirectory() as d:
            files = build(kind, Path(d))
            g = make_grounder(GroundingConfig(backend="groundingdino", batch_size=batch,
                                              extra={"image_size": size}, **files))
            g.ground(items[:2])  # warm-up
            loop_t, batch_t = [], []
            for _ in range(repeats if kind == "tiny" else 2):  # interleaved, best of each
                t0 = time.perf_counter()
                for it in items:
                    g.ground([it])
                loop_t.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                g.ground(items)
                batch_t.append(time.perf_counter() - t0)
        loop, batched = n / min(loop_t), n / min(batch_t)
        ratio = batched / loop
        results[kind] = {"per_image": loop, "batched": batched, "ratio": ratio}
        print(f"ground {kind:<4} {size}px: per-image {loop:6.2f} img/s, batched(b={batch}) {batched:6.2f} img/s, "
              f"ratio {ratio:.2f} (target >= 2: {'met' if ratio >= 2 else 'NOT met'}; {n} images, best of "
              f"{len(loop_t)})")
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--kinds", nargs="+", default=["tiny", "full"])
    a = ap.parse_args()
    main(a.images, size=a.size, kinds=a.kinds)
