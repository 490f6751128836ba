"""Step time with 1 torch thread / with torch's default thread count (the cores), for each training stage of
`make demo` (macco-tiny, batch 128, the demo's batch): how much the cores buy a step, i.e. whether the demo could
run faster by parallelism alone (docs/experiments.md E7). No target: the figures say where the demo's minutes
can and cannot come from."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train_step import stepper  # noqa: E402  (bench/ is the script's folder)

STAGES = (  # (label, mode, lock_image): the demo's two base stages, then its two fine-tunes
    ("base 1: scene", "scene", False),
    ("base 2: LiT (clip-ft, image locked)", "clip-ft", True),
    ("fine-tune: clip-ft", "clip-ft", False),
    ("fine-tune: macco", "macco", False),
)


def main(steps: int = 5, batch: int = 128) -> dict:
    import torch

    cores = torch.get_num_threads()  # torch's default: the machine's cores
    res = {}
    for label, mode, lock in STAGES:
        step = stepper("macco-tiny", mode, batch, lock_image=lock)
        times: dict[int, list[float]] = {1: [], cores: []}
        for n in (1, cores):  # warm-up at both thread counts
            torch.set_num_threads(n)
            step()
        for _ in range(steps):  # alternating, so both see the same machine state
            for n in times:
                torch.set_num_threads(n)
                times[n].append(step())
        one, all_ = (sorted(times[n])[steps // 2] for n in (1, cores))
        res[label] = {"one_thread_s": one, "all_threads_s": all_, "ratio": one / all_}
        print(f"{label:<36} batch {batch}: 1 thread {one:.3f} s, {cores} threads {all_:.3f} s, "
              f"speed-up ratio {one / all_:.2f}")
    torch.set_num_threads(cores)
    return res


if __name__ == "__main__":
    main()
