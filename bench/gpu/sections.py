"""The GPU run's sections, each run by ``run.py`` in its own child process (``--section NAME``).

A section writes one JSON line per finished measurement to its result file (``Emit``), so what it measured before
its time box ran out still counts. It reuses the bench scripts' and the project's own functions: the synthetic
training batch (``bench/train_step.py``), the training loop's ``model.train_step.train_step`` (autocast, GradScaler,
the finite check), the data loader benchmark (``bench/loader.py``), the grounders (``pipeline.grounding``), the
evaluation harness's ``Encoder`` and ``macco train`` itself (``model.train.main``).
"""
from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from common import Emit, _free, _rss_gib, _sync  # noqa: F401 (Emit: what run.py hands each section)
from sections_pipeline import e2e, ground, prepare_world, world_tables  # noqa: F401 (prepare_world: prepare.py's)

REPO = Path(__file__).resolve().parents[2]

# Sizes per mode: "full" is the device run (ViT-B/32 at batch 256); "tiny" is the CPU dry run of the same code.
SIZES = {
    "full": dict(arch="ViT-B-32", batch=256, steps=20, warmup=3,
                 loader_images=512, loader_batch=64, loader_workers=(1, 2, 4, 8, 12),
                 ground_model="swint", ground_images=32, ground_single=8, ground_batch=16, ground_wh=(1000, 800),
                 eval_arch="ViT-B-32-quickgelu", eval_images=2048, eval_captions=8192, eval_batch=256,
                 e2e_arch="ViT-B-32", e2e_batch=256, e2e_steps=20, e2e_workers=8,
                 world_images=256, world_size=224),
    "tiny": dict(arch="macco-micro", batch=8, steps=2, warmup=1,
                 loader_images=8, loader_batch=4, loader_workers=(0, 1),
                 ground_model="tiny", ground_images=4, ground_single=2, ground_batch=4, ground_wh=(224, 224),
                 eval_arch="macco-micro", eval_images=16, eval_captions=32, eval_batch=8,
                 e2e_arch="macco-micro", e2e_batch=8, e2e_steps=2, e2e_workers=0,
                 world_images=8, world_size=64),
}
# the eager and compiled step grids: (precision, mode)
EAGER = [("fp16", "clip-ft"), ("fp16", "macco"), ("bf16", "clip-ft"), ("bf16", "macco")]
COMPILED = [("fp16", "macco"), ("fp16", "clip-ft"), ("bf16", "macco"), ("bf16", "clip-ft")]
PACKAGES = ("torch", "torchvision", "open_clip_torch", "ftfy", "wcwidth", "timm", "transformers", "huggingface_hub",
            "tokenizers", "safetensors", "pyarrow", "numpy", "pillow", "pyyaml", "tqdm", "regex", "pytest",
            "tensorboard", "spacy", "prefect", "duckdb", "groundingdino-py")


# ---- env ----------------------------------------------------------------------------------------------------
def env(emit: Emit, size: dict, device: str) -> None:
    """Python, torch, the device, and every package the run touches: version and where it was imported from."""
    from importlib import metadata

    import torch

    cuda = torch.cuda.is_available() and device != "cpu"
    row = {"python": platform.python_version(), "executable": sys.executable, "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "cuda": cuda, "cpus": os.cpu_count(),
           "device": "cpu"}
    if cuda:
        p = torch.cuda.get_device_properties(0)
        row.update(device=torch.cuda.get_device_name(0), capability=f"{p.major}.{p.minor}",
                   memory_gib=round(p.total_memory / 2 ** 30, 1))
    emit("env", **row)
    target = os.environ.get("MACCO_GPU_SITE", "")
    for name in PACKAGES:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            emit("package", name=name, version=None, where="not installed")
            continue
        loc = str(dist.locate_file(""))
        emit("package", name=name, version=dist.version,
             where="carried wheel" if target and loc.startswith(target) else "machine")
    # the carried wheels' requirements against what is there (installed with --no-deps)
    from packaging.requirements import Requirement

    for name in ("open_clip_torch", "ftfy"):
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for r in map(Requirement, reqs):
            if r.marker and not r.marker.evaluate({"extra": ""}):
                continue
            try:
                have = metadata.version(r.name)
            except metadata.PackageNotFoundError:
                have = None
            ok = have is not None and (not r.specifier or r.specifier.contains(have, prereleases=True))
            emit("requirement", of=name, requirement=str(r), have=have, ok=ok)


# ---- training steps -----------------------------------------------------------------------------------------
def step_bench(arch: str, mode: str, batch: int, steps: int, warmup: int, precision: str, compile_: bool,
               device: str) -> dict:
    """``steps`` timed optimiser steps (after ``warmup``) of the training loop's own ``train_step`` on the
    synthetic batch of ``bench/train_step.py``, pinned on the host as the loader gives it."""
    import torch

    from model.optim import make_optimizer, warmup_cosine
    from model.train import TrainConfig, TrainState, build_task
    from model.train_step import train_step
    from train_step import synthetic_batch

    dev = torch.device(device)
    sync = _sync(device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    cfg = TrainConfig(arch=arch, mode=mode, batch_size=batch, precision=precision, compile=compile_,
                      device=device, log_every=10, progress=False)
    task = build_task(cfg).to(dev)
    opt = make_optimizer(task, cfg, dev)  # fused, as the loop builds it
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg.warmup, warmup + steps))
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
    model = torch.compile(task) if compile_ else task
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)  # fp32: None
    state = TrainState(cfg=cfg, task=task, model=model, opt=opt, sched=sched, scaler=scaler, device=dev,
                       amp_dtype=amp, loader=None, total=warmup + steps, start=0, rank=0, world=1, counts={},
                       out_dir=Path(tempfile.gettempdir()))
    images, texts, tm, im = synthetic_batch(task, batch, "cpu")
    host = {"image": images, "text": texts, "text_mask": tm, "image_mask": im}
    if dev.type == "cuda":
        host = {k: v.pin_memory() for k, v in host.items()}
    t_start = time.perf_counter()
    first_s = None
    t0 = t_start
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            t0 = time.perf_counter()
        terms, _ = train_step(state, dict(host), i, stats=False)
        if i == 0:
            sync()
            first_s = time.perf_counter() - t_start
    sync()
    dt = (time.perf_counter() - t0) / steps
    out = {"arch": arch, "mode": mode, "precision": precision, "compile": compile_, "batch": batch,
           "steps": steps, "step_ms": dt * 1000, "samples_per_s": batch / dt, "first_step_s": first_s,
           "loss": float(terms["total_loss"])}
    if dev.type == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
        out["reserved_gib"] = torch.cuda.max_memory_reserved() / 2 ** 30
    else:
        out["rss_gib"] = _rss_gib()  # the process's peak so far (monotonic over the section)
    del state, model, task, opt, sched, scaler, host
    if compile_:
        torch._dynamo.reset()
    _free(device)
    return out


def _train_grid(emit: Emit, size: dict, device: str, grid, compile_: bool) -> None:
    import torch

    from model.runtime import apply_process_settings, tf32

    apply_process_settings(True, device)
    with tf32(torch.cuda.is_available() and device != "cpu"):  # as a training run (TrainConfig.tf32 on)
        _train_rows(emit, size, device, grid, compile_)


def _train_rows(emit: Emit, size: dict, device: str, grid, compile_: bool) -> None:
    for precision, mode in grid:
        what = f"{mode} {precision}{' compiled' if compile_ else ''}"
        try:
            emit.row(**step_bench(size["arch"], mode, size["batch"], size["steps"], size["warmup"], precision,
                                  compile_, device))
        except Exception as exc:  # one configuration failing (e.g. fp16 autocast on a CPU build) is a row
            emit.skip(what, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
            _free(device)


def train(emit: Emit, size: dict, device: str) -> None:
    """MACCO and CLIP-FT steps, fp16 autocast + GradScaler and bf16 autocast, eager."""
    _train_grid(emit, size, device, EAGER, False)


def compiled(emit: Emit, size: dict, device: str) -> None:
    """The same steps under ``torch.compile`` (the first step's time includes the compilation)."""
    _train_grid(emit, size, device, COMPILED, True)


# ---- data loader --------------------------------------------------------------------------------------------
def loader(emit: Emit, size: dict, device: str) -> None:
    """``bench/loader.py``: 640x480 JPEG -> 224 crop + patch mask, samples/s per worker count."""
    import loader as lbench

    emit("note", cpus=os.cpu_count())
    res = lbench.main(size["loader_images"], size["loader_workers"], size["loader_batch"])  # one set of JPEGs
    for w, rate in res.items():
        emit.row(workers=w, samples_per_s=rate, images=size["loader_images"], batch=size["loader_batch"])


# ---- grounding ----------------------------------------------------------------------------------------------
def eval_throughput(device: str, arch: str, n_images: int, n_captions: int, batch: int,
                    autocast: bool = False) -> tuple[float, float]:
    """Images/s through ``encode_image`` and captions/s through the evaluation harness's text path
    (``Encoder.texts``: tokenise, length-sorted trimmed batches) on world captions."""
    import random

    import open_clip
    import torch

    from model.factory import register_model_configs
    from model.benchmarks.scoring import Encoder
    from pipeline.world import captions_for, sample_scene

    register_model_configs()
    sync = _sync(device)
    model = open_clip.create_model(arch).to(device).eval()
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    rng = random.Random(0)
    caps = [captions_for(sample_scene(rng, i, 224), rng, 1)[0] for i in range(n_captions)]
    enc = Encoder(model, None, open_clip.get_tokenizer(arch), device, batch, autocast=autocast)
    x = torch.randn(n_images, 3, size, size, device=device)
    with torch.no_grad():
        with enc._ctx():
            model.encode_image(x[:8])
        enc.texts(caps[:8])
        sync()
        t0 = time.perf_counter()
        with enc._ctx():
            for i in range(0, n_images, batch):
                model.encode_image(x[i:i + batch])
        sync()
        ips = n_images / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        enc.texts(caps)  # returns host arrays: synchronised
        tps = n_captions / (time.perf_counter() - t0)
    return ips, tps


def evaluate(emit: Emit, size: dict, device: str) -> None:
    for autocast in (False, True):
        ips, tps = eval_throughput(device, size["eval_arch"], size["eval_images"], size["eval_captions"],
                                   size["eval_batch"], autocast)
        emit.row(arch=size["eval_arch"], autocast=autocast, images_per_s=ips, captions_per_s=tps,
                 images=size["eval_images"], captions=size["eval_captions"], batch=size["eval_batch"])
        _free(device)


# ---- end to end ---------------------------------------------------------------------------------------------
SECTIONS = {"env": env, "train": train, "compile": compiled, "loader": loader, "ground": ground,
            "eval": evaluate, "e2e": e2e}
