"""MACCO step time / CLIP-FT step time at equal batch (tiny and ViT-B/32, CPU; target <= 2.2), and peak memory
of the text reconstruction with masked-only vocabulary logits / all-77-position logits (target <= 0.5)."""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # reference_losses: the all-position loss


def synthetic_batch(task, batch: int, device) -> tuple:
    """Random images, 20-token captions, 5 masked tokens per caption and a quarter of the patches masked."""
    import torch

    from model.masked import tower_shapes

    shapes = tower_shapes(task.clip)  # MaccoTask and SceneTask alike
    grid, size = shapes["grid"], shapes["grid"] * shapes["patch"]
    images = torch.randn(batch, 3, size, size, device=device)
    texts = torch.randint(1, 49000, (batch, 77), device=device)
    texts[:, 0], texts[:, 20], texts[:, 21:] = 49406, 49407, 0
    tm = torch.zeros(batch, 77, dtype=torch.bool, device=device)
    tm[:, 3:8] = True
    im = torch.zeros(batch, grid ** 2, dtype=torch.bool, device=device)
    im[:, : grid ** 2 // 4] = True
    return images, texts, tm, im


def stepper(arch: str, mode: str, batch: int, lock_image: bool = False):
    """A function running one optimiser step of ``mode`` on fixed random inputs; returns its seconds. Mode
    ``scene`` gets random scene targets for 8 colours, 6 kinds and 2 sizes."""
    import torch

    from model.optim import make_optimizer
    from model.runtime import keep_freed_cpu_memory
    from model.scene import SceneVocab
    from model.train import TrainConfig, build_task

    torch.manual_seed(0)
    cfg = TrainConfig(arch=arch, mode=mode, lock_image=lock_image)
    keep_freed_cpu_memory()  # as the launchers do on CPU (cpu_keep_freed_memory), for every mode
    vocab = SceneVocab(tuple(f"c{i}" for i in range(8)), tuple(f"k{i}" for i in range(6)), ("small", "large"))
    task = build_task(cfg, vocab)
    opt = make_optimizer(task, cfg, torch.device("cpu"))  # as the training loop builds it
    images, texts, tm, im = synthetic_batch(task, batch, "cpu")
    if mode == "scene":
        C, K, S = task.sizes
        targets = torch.stack([torch.ones(batch, C), torch.ones(batch, C), torch.rand(batch, C),
                               torch.rand(batch, C), torch.randint(0, K, (batch, C)).float(),
                               torch.randint(0, S, (batch, C)).float()], dim=-1)  # model.scene.SLOT_FIELDS
        forward = lambda: task({"image": images, "scene": targets}, stats=False)  # noqa: E731
    else:
        b = {"image": images, "text": texts, "text_mask": tm, "image_mask": im}
        sizes = task.sizes_for(b)  # the loop computes them from the host batch
        forward = lambda: task(b, stats=False, sizes=sizes)  # noqa: E731  (an unlogged step)

    def step() -> float:
        t0 = time.perf_counter()
        out = forward()
        out["total_loss"].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    return step


def step_times(arch: str, batch: int, steps: int) -> tuple[float, float]:
    """Median MACCO and CLIP-FT step times, the two steps alternating so both see the same machine state."""
    macco, clip_ft = stepper(arch, "macco", batch), stepper(arch, "clip-ft", batch)
    macco(), clip_ft()  # warm-up
    m, c = [], []
    for _ in range(steps):
        m.append(macco())
        c.append(clip_ft())
    return sorted(m)[len(m) // 2], sorted(c)[len(c) // 2]


def head_memory(masked_only: bool, batch: int = 128, width: int = 512, masked_per_caption: int = 8) -> None:
    """Child process: text predictor forward+backward at ViT-B/32 width; prints the MB autograd keeps for the
    backward pass ("peak_mb") and the RSS growth."""
    import torch

    from model.losses import text_reconstruction_loss
    from model.predictors import TextPredictor
    from reference_losses import masked_text_nll, text_log_probs

    torch.manual_seed(0)
    pred = TextPredictor(width, 8, 2)
    x, g = torch.randn(batch, 77, width, requires_grad=True), torch.randn(batch, width)
    y, yg = torch.randn(batch, 50, width), torch.randn(batch, width)
    texts = torch.randint(0, 49408, (batch, 77))
    tm = torch.zeros(batch, 77, dtype=torch.bool)
    tm[:, 2:2 + masked_per_caption] = True
    saved = []  # bytes of every tensor autograd keeps for the backward pass (deterministic, unlike RSS)

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    hooks.__enter__()
    if masked_only:  # the training path (MaccoTask): features at masked positions, the fused head + NLL
        h = pred.predict(x, g, y, yg, tm)
        loss = text_reconstruction_loss(h, pred.head, texts[tm], tm.nonzero()[:, 0], batch)
    else:  # the reference: log-probabilities at all 77 positions, then the mask
        loss = masked_text_nll(text_log_probs(pred, x, g, y, yg), texts, tm)
    hooks.__exit__(None, None, None)
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mb": sum(saved) / 2 ** 20, "rss_growth_mb": (peak - base) / 1024}))


def main(steps: int = 5) -> dict:
    res: dict = {}
    for arch, batch, n in (("macco-tiny", 32, 3 * steps), ("ViT-B-32", 8, steps)):  # tiny steps are cheap: more
        m, c = step_times(arch, batch, n)
        res[arch] = {"macco_s": m, "clip_ft_s": c, "ratio": m / c, "batch": batch}
        print(f"train step {arch:<10} batch {batch:>3}: MACCO {m:.3f} s, CLIP-FT {c:.3f} s, ratio {m / c:.2f} "
              f"(target <= 2.2: {'met' if m / c <= 2.2 else 'NOT met'})")
    mem = {}
    for masked in (True, False):
        out = subprocess.run([sys.executable, __file__, "--head-memory", str(int(masked))], capture_output=True,
                             text=True, check=True)
        mem[masked] = json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]
    ratio = mem[True] / mem[False]
    res["text_head_memory"] = {"masked_only_mb": mem[True], "all_positions_mb": mem[False], "ratio": ratio}
    print(f"text reconstruction memory kept for backward (B=128, width 512, 8 masked/caption): masked-only {mem[True]:.0f} MB, "
          f"all 77 positions {mem[False]:.0f} MB, ratio {ratio:.2f} (target <= 0.5: {'met' if ratio <= 0.5 else 'NOT met'})")
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--head-memory", type=int, choices=(0, 1))
    a = ap.parse_args()
    if a.head_memory is not None:
        head_memory(bool(a.head_memory))
    else:
        main(a.steps)
