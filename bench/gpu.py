"""GPU figures (one script, < 10 min on one GPU): ViT-B/32 MACCO and CLIP-FT training steps at batch 256
(bf16 autocast, fused AdamW, synthetic images), full-size GroundingDINO at 800 px batched, evaluation
throughput. Prints each figure; skips (exit 0 with a note) without CUDA."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def train_steps(mode: str, batch: int = 256, steps: int = 20, compile_: bool = False) -> dict:
    import torch

    from model.optim import make_optimizer
    from model.train import TrainConfig, build_task
    from train_step import synthetic_batch

    dev = torch.device("cuda")
    cfg = TrainConfig(arch="ViT-B-32", mode=mode)
    task = build_task(cfg).to(dev)
    opt = make_optimizer(task, cfg, dev)  # fused, as the training loop builds it
    model = torch.compile(task) if compile_ else task
    images, texts, tm, im = synthetic_batch(task, batch, dev)  # the CPU benchmark's inputs, on the GPU
    sizes = task.step_sizes(texts.cpu(), tm.cpu(), im.cpu())  # as the loop: host-side shapes, no sync per step
    torch.cuda.reset_peak_memory_stats()
    for i in range(steps + 3):
        if i == 3:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(images, texts, tm, im, stats=False, sizes=sizes)  # as the loop on steps it does not log
        out["total_loss"].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / steps
    return {"step_s": dt, "samples_per_s": batch / dt, "peak_gb": torch.cuda.max_memory_allocated() / 2 ** 30}


def main(train_only: bool = False) -> None:
    import torch

    if not torch.cuda.is_available():
        print("gpu: no CUDA device; nothing measured")
        return
    print(f"gpu: {torch.cuda.get_device_name(0)}")
    res = {}
    for mode in ("clip-ft", "macco"):
        res[mode] = r = train_steps(mode)
        print(f"train ViT-B/32 {mode:<7} batch 256 bf16: {r['step_s'] * 1000:.0f} ms/step, "
              f"{r['samples_per_s']:.0f} samples/s, peak {r['peak_gb']:.1f} GiB")
    print(f"train MACCO / CLIP-FT step time: {res['macco']['step_s'] / res['clip-ft']['step_s']:.2f}")
    if train_only:
        return
    try:
        r = train_steps("macco", compile_=True)
        print(f"train ViT-B/32 macco + torch.compile: {r['step_s'] * 1000:.0f} ms/step "
              f"({res['macco']['step_s'] / r['step_s']:.2f}x vs eager)")
    except Exception as exc:  # measured option: report why compile is not used, then continue
        print(f"torch.compile failed: {type(exc).__name__}: {str(exc)[:200]}")
    # GroundingDINO full size (SwinT-OGC architecture, random weights) at 800 px, batched vs per image
    from PIL import Image

    import ground as gbench
    from pipeline.grounding import make_grounder
    from pipeline.grounding.base import GroundingConfig, GroundItem

    with tempfile.TemporaryDirectory() as d:
        files = gbench.build("full", Path(d))
        g = make_grounder(GroundingConfig(backend="groundingdino", device="cuda", batch_size=16,
                                          extra={"image_size": 800}, **files))
        imgs = [Image.effect_noise((1000, 800), 50).convert("RGB") for _ in range(32)]
        items = [GroundItem(i, 1000, 800, ["a dog", "a red frisbee", "grass"], im) for i, im in enumerate(imgs)]
        g.ground(items[:4])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g.ground(items)
        torch.cuda.synchronize()
        batched = len(items) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for it in items[:8]:
            g.ground([it])
        torch.cuda.synchronize()
        single = 8 / (time.perf_counter() - t0)
    print(f"ground GroundingDINO SwinT 800px fp16: batched(16) {batched:.1f} img/s, per-image {single:.1f} img/s")
    ips, tps = eval_throughput("cuda")
    print(f"eval ViT-B/32 fp32: {ips:.0f} images/s (encode_image), {tps:.0f} captions/s (the harness's "
          f"Encoder.texts: tokenise, length-sorted trimmed batches)")


def eval_throughput(device: str, n_images: int = 512, n_captions: int = 4096, batch: int = 256) -> tuple[float, float]:
    """Images/s through ``encode_image`` and captions/s through the evaluation harness's text path."""
    import random

    import open_clip
    import torch

    from model.benchmarks.scoring import Encoder
    from pipeline.world import captions_for, sample_scene

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    model = open_clip.create_model("ViT-B-32-quickgelu").to(device).eval()
    rng = random.Random(0)
    caps = [captions_for(sample_scene(rng, i, 224), rng, 1)[0] for i in range(n_captions)]
    enc = Encoder(model, None, open_clip.get_tokenizer("ViT-B-32"), device, batch)
    x = torch.randn(n_images, 3, 224, 224, device=device)
    with torch.no_grad():
        model.encode_image(x[:8])
        enc.texts(caps[:8])
        sync()
        t0 = time.perf_counter()
        for i in range(0, n_images, batch):
            model.encode_image(x[i:i + batch])
        sync()
        ips = n_images / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        enc.texts(caps)  # returns host arrays: synchronised
        tps = n_captions / (time.perf_counter() - t0)
    return ips, tps


if __name__ == "__main__":
    main(train_only="--train-only" in sys.argv)
