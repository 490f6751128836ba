"""MACCO step time / CLIP-FT step time at equal batch (tiny and ViT-B/32, CPU; target <= 2.0), and peak memory
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


def stepper(arch: str, mode: str, batch: int, lock_image: bool = False, encode_only: bool = False):
    """A function running one optimiser step of ``mode`` on fixed random inputs; returns its seconds. Mode
    ``scene`` gets random scene targets for 8 colours, 6 kinds and 2 sizes. ``encode_only``: the towers' part of
    the step alone (``MaccoTask.encode``: every copy the mode runs, forward and backward, no predictor, loss or
    optimiser)."""
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
        if encode_only:
            def forward():
                enc = task.encode(images, texts, tm, im, sizes)
                feats = [v for v in vars(enc).values() if isinstance(v, torch.Tensor) and v.requires_grad]
                return {"total_loss": sum(f.float().sum() for f in feats)}
        else:
            forward = lambda: task(b, stats=False, sizes=sizes)  # noqa: E731  (an unlogged step)

    def step() -> float:
        t0 = time.perf_counter()
        out = forward()
        out["total_loss"].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    return step


def quantile(xs: list[float], f: float) -> float:
    """The ``f`` quantile of ``xs`` (the sorted value at ``int(f * n)``: the upper median for ``f`` 0.5)."""
    return sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]


def alternating(steps: dict, repeats: int) -> dict[str, list[float]]:
    """Each step of ``steps`` (name -> a timed step) once to warm up, then ``repeats`` rounds of one step each, in
    turn, so every step sees the same machine state: the seconds of each."""
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            times[name].append(step())
    return times


def step_times(arch: str, batch: int, steps: int) -> dict:
    """MACCO and CLIP-FT step times, the two steps alternating so both see the same machine state: the median of
    each, and the ratio as the median of the per-pair ratios with its interquartile range (a pair shares the
    machine's load of its moment, so the ratio holds where the absolute times drift)."""
    t = alternating({"macco": stepper(arch, "macco", batch), "clip-ft": stepper(arch, "clip-ft", batch)}, steps)
    m, c = t["macco"], t["clip-ft"]
    r = [a / b for a, b in zip(m, c)]
    return {"macco_s": quantile(m, 0.5), "clip_ft_s": quantile(c, 0.5), "ratio": quantile(r, 0.5),
            "ratio_p25": quantile(r, 0.25), "ratio_p75": quantile(r, 0.75), "pairs": steps}


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


def main(steps: int = 20, threads: int = 2) -> dict:
    import torch

    torch.set_num_threads(threads)  # pinned: the ratio is quoted at a stated thread count
    res: dict = {}
    for arch, batch, n in (("macco-tiny", 32, 3 * steps), ("ViT-B-32", 8, steps)):  # tiny steps are cheap: more
        t = step_times(arch, batch, n)
        res[arch] = {**t, "batch": batch, "threads": threads}
        print(f"train step {arch:<10} batch {batch:>3}: MACCO {t['macco_s']:.3f} s, CLIP-FT {t['clip_ft_s']:.3f} s, "
              f"ratio {t['ratio']:.2f} (median of {n} alternating pairs, "
              f"IQR {t['ratio_p25']:.2f}-{t['ratio_p75']:.2f}, "
              f"{threads} threads; target <= 2.0: {'met' if t['ratio'] <= 2.0 else 'NOT met'})")
    mem = {}
    for masked in (True, False):
        out = subprocess.run([sys.executable, __file__, "--head-memory", str(int(masked))], capture_output=True,
                             text=True, check=True)
        mem[masked] = json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]
    ratio = mem[True] / mem[False]
    res["text_head_memory"] = {"masked_only_mb": mem[True], "all_positions_mb": mem[False], "ratio": ratio}
    print("text reconstruction memory kept for backward (B=128, width 512, 8 masked/caption): "
          f"masked-only {mem[True]:.0f} MB, "
          f"all 77 positions {mem[False]:.0f} MB, ratio {ratio:.2f} "
          f"(target <= 0.5: {'met' if ratio <= 0.5 else 'NOT met'})")
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20, help="alternating pairs (tiny: three times as many)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--head-memory", type=int, choices=(0, 1))
    a = ap.parse_args()
    if a.head_memory is not None:
        head_memory(bool(a.head_memory))
    else:
        main(a.steps, a.threads)
