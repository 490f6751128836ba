"""Where a MACCO step's extra time goes (``python bench/step_profile.py``): one optimiser step of each mode at equal
batch, the modes alternating (clip-ft, text-only, image-only, macco), medians over the repeats, threads pinned; the
differences against clip-ft split the extra time into the masked text path (text copy, text predictor, vocabulary
head) and the masked image path (second image copy, image predictor, pixel targets), and what macco costs beyond
their sum (MCA's and MIR's extra columns). Then torch.profiler's operators of one macco step beside one clip-ft
step, the largest self-time differences first.

    python bench/step_profile.py [--arch macco-tiny --batch 32 --repeats 30] [--threads 2]

Then the towers' part alone (every copy each mode runs, forward and backward) for clip-ft and macco: what the
reference's design costs before any predictor.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import alternating, quantile, stepper  # noqa: E402  (the same step and timing as the ratio bench)

MODES = ("clip-ft", "text-only", "image-only", "macco")


def mode_times(arch: str, batch: int, repeats: int) -> dict[str, float]:
    times = alternating({m: stepper(arch, m, batch) for m in MODES}, repeats)
    return {m: quantile(v, 0.5) for m, v in times.items()}


def tower_times(arch: str, batch: int, repeats: int) -> dict[str, float]:
    """The towers' part alone (``stepper(encode_only=True)``): clip-ft's and macco's copies, alternating."""
    times = alternating({m: stepper(arch, m, batch, encode_only=True) for m in ("clip-ft", "macco")}, repeats)
    return {m: quantile(v, 0.5) for m, v in times.items()}


def operator_table(arch: str, batch: int, top: int = 15) -> list[str]:
    """Self CPU time per operator (forward and backward, the optimiser step included) of one macco and one clip-ft
    step, after a warm-up; the operators whose time grows most, first."""
    from torch.profiler import ProfilerActivity, profile

    per = {}
    for m in ("clip-ft", "macco"):
        step = stepper(arch, m, batch)
        step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        per[m] = {e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}
    keys = sorted(set(per["macco"]) | set(per["clip-ft"]),
                  key=lambda k: per["macco"].get(k, 0) - per["clip-ft"].get(k, 0), reverse=True)
    lines = [f"{'operator':<44} {'clip-ft ms':>10} {'macco ms':>10} {'extra ms':>10}"]
    for k in keys[:top]:
        a, b = per["clip-ft"].get(k, 0.0), per["macco"].get(k, 0.0)
        lines.append(f"{k[:44]:<44} {a:>10.1f} {b:>10.1f} {b - a:>10.1f}")
    total = {m: sum(v.values()) for m, v in per.items()}
    lines.append(f"{'all operators':<44} {total['clip-ft']:>10.1f} {total['macco']:>10.1f} "
                 f"{total['macco'] - total['clip-ft']:>10.1f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="macco-tiny")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    t = mode_times(a.arch, a.batch, a.repeats)
    base = t["clip-ft"]
    print(f"{a.arch} batch {a.batch}, {a.threads} threads, medians of {a.repeats} alternating steps:")
    for m in MODES:
        print(f"  {m:<11} {t[m]:.4f} s  ({t[m] / base:.2f}x clip-ft; +{t[m] - base:.4f} s)")
    text, image, both = t["text-only"] - base, t["image-only"] - base, t["macco"] - base
    print(f"  extra of macco {both:.4f} s: masked text path {text:.4f} s ({100 * text / both:.0f} %), "
          f"masked image path "
          f"{image:.4f} s ({100 * image / both:.0f} %), the rest {both - text - image:.4f} s "
          f"({100 * (both - text - image) / both:.0f} %)")
    tw = tower_times(a.arch, a.batch, a.repeats)
    print(f"  the towers alone, forward and backward (every copy the reference runs: macco's second image copy, its "
          f"full text at every position and its masked text copy): clip-ft {tw['clip-ft']:.4f} s, macco "
          f"{tw['macco']:.4f} s, ratio {tw['macco'] / tw['clip-ft']:.2f}; the rest of macco's extra (predictors, "
          f"vocabulary head, pixel targets, losses, the optimiser's extra parameters): "
          f"{t['macco'] - base - (tw['macco'] - tw['clip-ft']):.4f} s")
    print("\n".join(operator_table(a.arch, a.batch, a.top)))


if __name__ == "__main__":
    main()
