"""The GPU run's sections, each run by ``run.py`` in its own child process (``--section NAME``).

A section writes one JSON line per finished measurement to its result file (``Emit``), so what it measured before
its time box ran out still counts. It reuses the bench scripts' and the project's own functions: the synthetic
training batch (``bench/train_step.py``), the training loop's ``model.train.train_step`` (autocast, GradScaler,
the finite check), the data loader benchmark (``bench/loader.py``), the grounders (``pipeline.grounding``), the
evaluation harness's ``Encoder`` and ``macco train`` itself (``model.train.main``).
"""
from __future__ import annotations

import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

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


class Emit:
    """Appends one JSON object per line to the section's result file (flushed at once)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __call__(self, kind: str, **data) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"kind": kind, **data}, default=str) + "\n")

    def row(self, **data) -> None:
        self("row", **data)

    def skip(self, what: str, reason: str) -> None:
        self("skip", what=what, reason=reason)


def _sync(device: str):
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


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
    from model.train import TrainConfig, TrainState, build_task, train_step
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
    from model.runtime import apply_process_settings

    apply_process_settings(True, device)  # TF32 on CUDA, as the launcher
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
def build_hf_swint(root: Path) -> Path:
    """transformers' GroundingDINO at full size with random weights: the default config's Swin-T backbone and a
    bert-base-sized text tower over the tests' small vocabulary (bert-base-uncased's vocabulary cannot be
    fetched), with the default 800/1333 processor, saved as a model directory for the hf backend."""
    import torch
    from transformers import (BertConfig, BertTokenizer, GroundingDinoConfig, GroundingDinoForObjectDetection,
                              GroundingDinoImageProcessor, GroundingDinoProcessor)

    from tests_support import write_tiny_bert

    torch.manual_seed(0)
    bert = write_tiny_bert(root / "bert", with_model=False)
    tok = BertTokenizer(str(bert / "vocab.txt"), do_lower_case=True)
    model = GroundingDinoForObjectDetection(GroundingDinoConfig(text_config=BertConfig(vocab_size=len(tok)))).eval()
    proc = GroundingDinoProcessor(image_processor=GroundingDinoImageProcessor(), tokenizer=tok)
    out = root / "hf"
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


def _ground_rate(grounder, items: list, single: int, device: str) -> dict:
    sync = _sync(device)
    grounder.ground(items[:2])  # warm-up
    sync()
    t0 = time.perf_counter()
    grounder.ground(items)
    sync()
    batched = len(items) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for it in items[:single]:
        grounder.ground([it])
    sync()
    per_image = single / (time.perf_counter() - t0)
    return {"batched": batched, "per_image": per_image, "ratio": batched / per_image}


def ground(emit: Emit, size: dict, device: str) -> None:
    """Batched vs per-image grounding: the hf backend (transformers' GroundingDINO), then groundingdino-py."""
    import importlib.util

    from PIL import Image

    from pipeline.grounding import make_grounder
    from pipeline.grounding.base import GroundingConfig, GroundItem

    w, h = size["ground_wh"]
    imgs = [Image.effect_noise((w, h), 40 + i).convert("RGB") for i in range(size["ground_images"])]
    items = [GroundItem(i, w, h, ["a small red circle", "a blue square", "grass"], im) for i, im in enumerate(imgs)]
    import transformers

    tv = transformers.__version__
    if not hasattr(transformers, "GroundingDinoForObjectDetection"):
        emit.skip("hf", f"transformers {tv} has no GroundingDinoForObjectDetection")
    else:
        from tests_support import build_tiny_hf_groundingdino

        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            build = build_hf_swint if size["ground_model"] == "swint" else build_tiny_hf_groundingdino
            model_dir = build(Path(d))
            build_s = time.perf_counter() - t0
            g = make_grounder(GroundingConfig(backend="hf", model_dir=str(model_dir), device=device,
                                              batch_size=size["ground_batch"]))
            params = sum(p.numel() for p in g.model.parameters()) / 1e6
            r = _ground_rate(g, items, size["ground_single"], device)
            emit.row(backend="hf", model=size["ground_model"], params_m=params, transformers=tv, image=f"{w}x{h}",
                     batch=size["ground_batch"], images=len(items), half=device.startswith("cuda"),
                     build_s=build_s, **r)
            del g
            _free(device)
    if size["ground_model"] == "tiny":
        emit.skip("groundingdino", "not part of the tiny dry run (bench/ground.py measures groundingdino-py on the "
                                   "CPU; the lent machine lacks it)")
    elif importlib.util.find_spec("groundingdino") is None:
        emit.skip("groundingdino", "groundingdino-py is not installed (it builds its model only under "
                                   f"transformers 4.x; this machine has {tv}, so it is not carried)")
    elif int(tv.split(".")[0]) >= 5:
        emit.skip("groundingdino", f"groundingdino-py builds its model only under transformers 4.x (here {tv})")
    else:
        import ground as gbench

        with tempfile.TemporaryDirectory() as d:
            files = gbench.build("tiny" if size["ground_model"] == "tiny" else "full", Path(d))
            g = make_grounder(GroundingConfig(backend="groundingdino", device=device, batch_size=size["ground_batch"],
                                              extra={"image_size": min(w, h)}, **files))
            r = _ground_rate(g, items, size["ground_single"], device)
            emit.row(backend="groundingdino", model=size["ground_model"], transformers=tv, image=f"{w}x{h}",
                     batch=size["ground_batch"], images=len(items), half=device.startswith("cuda"), **r)


# ---- evaluation ---------------------------------------------------------------------------------------------
def eval_throughput(device: str, arch: str, n_images: int, n_captions: int, batch: int,
                    autocast: bool = False) -> tuple[float, float]:
    """Images/s through ``encode_image`` and captions/s through the evaluation harness's text path
    (``Encoder.texts``: tokenise, length-sorted trimmed batches) on world captions."""
    import random

    import open_clip
    import torch

    from model import register_model_configs
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
WORLD_TABLES = ("captions", "token_masks", "scene_graphs", "regions")


def world_tables(world: Path) -> dict[str, Path]:
    t = world / "tables"
    return {"captions": t / "captions", "token_masks": t / "token_masks", "scene_graphs": t / "scene_graphs",
            "regions": t / "ground" / "regions"}


def prepare_world(world: Path, images: int, size: int, seed: int = 0) -> dict[str, Path]:
    """A synthetic world under ``world/images`` and its training tables under ``world/tables``: captions ->
    parse (spaCy) -> ground (the world's annotations), as the tests' ``world_tables`` fixture builds them."""
    from pipeline.world import WorldConfig, generate_world
    from tests_support import build_world_tables

    root = world / "images"
    generate_world(root, WorldConfig(seed=seed, images=images, size=size, benchmarks=False))
    build_world_tables(root, world / "tables")
    return world_tables(world)


def e2e(emit: Emit, size: dict, device: str, world: str | None = None) -> None:
    """``macco train`` (``model.train.main``) for a few steps on the world, then its export loaded back."""
    import importlib.util

    import open_clip
    import torch
    import yaml

    from model.train import main as train_main

    world_dir = Path(world) if world else None
    tmp = tempfile.TemporaryDirectory()
    if world_dir is None or not all(p.exists() for p in world_tables(world_dir).values()):
        if importlib.util.find_spec("spacy") is None:
            emit.skip("e2e", f"no prepared world at {world_dir} (make gpu-wheels writes it; carry bench/gpu/.carry) "
                             "and spaCy, which the parse stage needs, is not installed here")
            return
        world_dir = Path(tmp.name) / "world"
        t0 = time.perf_counter()
        prepare_world(world_dir, size["world_images"], size["world_size"])
        emit("note", world="built here", seconds=time.perf_counter() - t0)
    tables = world_tables(world_dir)
    out_dir = Path(tmp.name) / "run"
    cfg = {"arch": size["e2e_arch"], "mode": "macco", "batch_size": size["e2e_batch"],
           "max_steps": size["e2e_steps"], "workers": size["e2e_workers"], "warmup": 2,
           "log_every": max(1, size["e2e_steps"] // 4), "progress": False, "device": device,
           "out_dir": str(out_dir), "image_root": str(world_dir / "images"),
           "tables": {k: str(v) for k, v in tables.items()}}
    cfg_file = Path(tmp.name) / "train.yaml"
    cfg_file.write_text(yaml.safe_dump({"train": cfg}))
    t0 = time.perf_counter()
    summary = train_main(["--config", str(cfg_file)])  # what `macco train --config FILE` runs
    wall = time.perf_counter() - t0
    hist = summary["history"]
    first, last = hist[0], hist[-1]
    steady = ((last["step"] - first["step"]) * size["e2e_batch"] / (last["elapsed_s"] - first["elapsed_s"])
              if len(hist) > 1 and last["elapsed_s"] > first["elapsed_s"] else None)
    precision = json.loads((out_dir / "config.json").read_text())["precision"]
    if precision == "auto":  # as model.train.setup resolves it
        precision = "auto: " + ("fp16 + GradScaler" if device.startswith("cuda") else "fp32")
    emit.row(arch=size["e2e_arch"], batch=size["e2e_batch"], steps=summary["steps"], workers=size["e2e_workers"],
             wall_s=wall, train_s=last["elapsed_s"],
             samples_per_s=summary["steps"] * size["e2e_batch"] / max(last["elapsed_s"], 1e-9),
             steady_samples_per_s=steady, steady_steps=f"{first['step']}-{last['step']}",
             pairs_per_epoch=summary["samples"]["pairs_per_epoch"],
             losses={k: v for k, v in last.items() if k.endswith("_loss")},
             first_losses={k: v for k, v in first.items() if k.endswith("_loss")}, precision=precision)
    # the export: local-dir and .pt loads agree with each other and with the final checkpoint's CLIP
    exp = summary["export"]
    local = open_clip.create_model(f"local-dir:{exp['dir']}")
    arch = json.loads((Path(exp["dir"]) / "open_clip_config.json").read_text())["macco"]["arch"]
    from model import register_model_configs

    register_model_configs()
    pt = open_clip.create_model(arch, pretrained=exp["pt"])
    ck = torch.load(summary["checkpoint"], map_location="cpu", weights_only=True)["task"]
    clip_sd = {k[len("clip."):]: v for k, v in ck.items() if k.startswith("clip.")}
    sd = local.state_dict()
    same_keys = set(sd) == set(clip_sd) == set(pt.state_dict())
    same_weights = same_keys and all(torch.equal(sd[k], clip_sd[k].to(sd[k].dtype)) for k in sd)
    res = local.visual.image_size
    res = res[0] if isinstance(res, (tuple, list)) else res
    x = torch.randn(2, 3, res, res)
    local, pt = local.to(device).eval(), pt.to(device).eval()
    with torch.no_grad():
        a, b = local.encode_image(x.to(device)), pt.encode_image(x.to(device))
    emit("export", keys=exp["keys"], same_keys=same_keys, same_weights=same_weights,
         local_vs_pt_max_abs=float((a - b).abs().max()), device=str(device))
    tmp.cleanup()


SECTIONS = {"env": env, "train": train, "compile": compiled, "loader": loader, "ground": ground,
            "eval": evaluate, "e2e": e2e}
