"""Step time with 1 torch thread / with all cores, for each training stage of `make demo` (macco-tiny, batch 128,
the demo's batch): how much the cores buy a step, i.e. whether the demo could run faster by parallelism alone
(docs/experiments.md E7). No target: the figures say where the demo's minutes can and cannot come from."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train_step import synthetic_batch  # noqa: E402  (bench/ is the script's folder)

STAGES = (  # (label, mode, lock_image): the demo's two base stages, then its two fine-tunes
    ("base 1: scene", "scene", False),
    ("base 2: LiT (clip-ft, image locked)", "clip-ft", True),
    ("fine-tune: clip-ft", "clip-ft", False),
    ("fine-tune: macco", "macco", False),
)


def stepper(mode: str, lock_image: bool, batch: int):
    """One optimiser step of ``mode`` on fixed random inputs (scene: random targets for 8 colours); returns
    its seconds."""
    import torch

    from model.optim import make_optimizer
    from model.scene import SceneVocab
    from model.train import TrainConfig, build_task

    torch.manual_seed(0)
    cfg = TrainConfig(arch="macco-tiny", mode=mode, lock_image=lock_image)
    vocab = SceneVocab(tuple(f"c{i}" for i in range(8)), tuple(f"k{i}" for i in range(6)), ("small", "large"))
    task = build_task(cfg, vocab)
    opt = make_optimizer(task, cfg, torch.device("cpu"))
    images, texts, tm, im = synthetic_batch(task if mode != "scene" else _grid(task), batch, "cpu")
    if mode == "scene":
        C = len(vocab.colours)
        targets = torch.stack([torch.ones(batch, C), torch.ones(batch, C), torch.rand(batch, C),
                               torch.rand(batch, C), torch.randint(0, 6, (batch, C)).float(),
                               torch.randint(0, 2, (batch, C)).float()], dim=-1)
        run = lambda: task(images, targets, stats=False)  # noqa: E731
    else:
        sizes = task.step_sizes(texts, tm, im)
        run = lambda: task(images, texts, tm, im, stats=False, sizes=sizes)  # noqa: E731

    def step() -> float:
        t0 = time.perf_counter()
        run()["total_loss"].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    return step


def _grid(task):
    """What ``synthetic_batch`` reads of a task (grid, patch size), for the scene task's CLIP."""
    from types import SimpleNamespace

    from model.masked import tower_shapes

    shapes = tower_shapes(task.clip)
    return SimpleNamespace(grid=shapes["grid"], patch_size=shapes["patch"])


def main(steps: int = 5, batch: int = 128) -> dict:
    import torch

    cores = os.cpu_count() or 1
    res = {}
    for label, mode, lock in STAGES:
        step = stepper(mode, lock, batch)
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
