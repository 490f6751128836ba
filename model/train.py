"""MACCO / CLIP-FT training: AdamW with the reference's three groups, warmup + cosine, resumable checkpoints,
export of the plain CLIP. ``main(argv)`` is the entry point (also under ``torchrun`` for DDP).

Reference decisions (macco-reference.md §7), each a config field where it changes numbers:
- ``logit_scale_group="predictor"`` reproduces the reference (logit scale at the predictor lr 1e-3, wd 0.01);
  ``"clip"`` puts it with the CLIP no-decay group.
- ``betas=(0.9, 0.999)``, ``eps=1e-8`` reproduce the reference's RN50-derived defaults.
- ``predictor_wd=0.01`` applies to every predictor parameter (biases and LayerNorms too), as the reference.
- Gradient accumulation splits the batch into ``accum_steps`` micro-batches (contrastive terms per micro-batch).
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import torch

from .losses import LossWeights
from .task import MODES, MaccoConfig, MaccoTask

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    arch: str = "macco-tiny"
    pretrained: str | None = None  # open_clip tag or weights file (e.g. a base model's export .pt)
    tables: dict = field(default_factory=dict)  # captions, token_masks, scene_graphs, regions -> table dirs
    image_root: str = ""
    split: str = "train"
    out_dir: str = "artifacts/runs/default"
    mode: str = "macco"  # macco | clip-ft | text-only | image-only | scene (image tower on scene truth)
    hardneg: bool = False
    mca: bool = True  # masked samples as extra contrastive negatives (the ablation "macco without MCA": false)
    mir: bool = True  # the intra-modal masked-vs-full term (the ablation "macco without MIR": false)
    lock_image: bool = False  # freeze the image tower (LiT: the text tower learns against a locked image tower)
    scenes: str | None = None  # mode scene: the world's scenes_<split>.json (default: image_root/scenes_<split>.json)
    loss_weights: dict = field(default_factory=lambda: asdict(LossWeights()))
    text_cross_layers: int | None = None
    image_cross_layers: int | None = None
    predictor_heads: int | None = None  # None: 8 (the reference) for the paper backbones, width // 32 if narrower
    epochs: int = 5
    max_steps: int | None = None  # overrides epochs when set
    batch_size: int = 256
    accum_steps: int = 1
    lr_clip: float = 5e-7
    lr_predictor: float = 1e-3
    wd: float = 0.2
    predictor_wd: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup: int = 50
    logit_scale_group: str = "predictor"  # predictor (reference) | clip
    precision: str = "auto"  # auto (bf16 autocast on CUDA, fp32 on CPU) | fp32 | bf16 | fp16
    fused_adamw: str = "auto"  # auto (on CUDA and CPU, where torch has the fused kernel) | on | off
    compile: bool = False
    workers: int = 2
    seed: int = 0
    rect_prob: float = 0.1
    rect_ratio: float = 0.75
    crop_scale: tuple[float, float] = (0.9, 1.0)
    save_every: int = 0  # steps between resumable checkpoints (0: only at the end)
    max_skipped_fraction: float = 0.01  # unreadable images allowed (share of samples drawn); past it: fail
    log_every: int = 10
    resume: str | None = None  # checkpoint path, or "auto" (latest in out_dir/checkpoints)
    device: str = "auto"
    progress: bool = True
    cpu_keep_freed_memory: bool = True  # CPU: glibc keeps freed memory for reuse (see keep_freed_cpu_memory)

    def __post_init__(self):
        for key, allowed in CHOICES.items():
            value = getattr(self, key)
            if value not in allowed:
                raise ValueError(f"train config {key}: {value!r} is not one of {list(allowed)}")


# the enum-like fields: a typo (precision: bf-16) is an error, never a silent fallback
CHOICES = {"mode": (*MODES, "scene"), "logit_scale_group": ("predictor", "clip"),
           "precision": ("auto", "fp32", "bf16", "fp16"), "fused_adamw": ("auto", "on", "off")}


# ---- config -----------------------------------------------------------------------------------------------
def load_config(path: str | Path | None = None, overrides: list[str] | None = None, **kw) -> TrainConfig:
    """YAML/JSON file, then ``key=value`` overrides (values parsed as YAML). Unknown keys are errors."""
    import yaml

    data: dict = {}
    if path:
        text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        data = data.get("train", data)
    data.update(kw)
    for ov in overrides or []:
        if "=" not in ov:
            raise ValueError(f"override {ov!r} is not key=value")
        k, v = ov.split("=", 1)
        data[k.lstrip("-").replace("-", "_")] = yaml.safe_load(v)
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown train config key(s) {unknown}; known: {sorted(known)}")
    types = {f.name: str(f.type) for f in fields(TrainConfig)}
    for k, v in data.items():
        data[k] = _coerce(k, v, types[k])
    return TrainConfig(**data)


def _coerce(key: str, value, type_name: str):
    """Values from YAML to the field's type (YAML reads ``1e-4`` as a string); a wrong type is an error."""
    if value is None:
        if "None" not in type_name:
            raise ValueError(f"train config {key}: None is not allowed ({type_name})")
        return None
    base = type_name.split(" | ")[0]
    if base == "str" and isinstance(value, bool):  # YAML 1.1 reads on/off/yes/no as booleans
        if "on" in CHOICES.get(key, ()):
            return "on" if value else "off"
        raise ValueError(f"train config {key}: YAML read {value!r} as a boolean; quote the value")
    try:
        if base == "float":
            return float(value)
        if base == "int":
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if base == "bool":
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError
            return value
        if base.startswith("tuple"):
            return tuple(float(x) for x in value)
        if base == "str":
            return str(value)
        if base == "dict" and not isinstance(value, dict):
            raise ValueError
    except (TypeError, ValueError) as exc:
        raise ValueError(f"train config {key}: {value!r} is not a valid {type_name}") from exc
    return value


# ---- optimisation -----------------------------------------------------------------------------------------
def param_groups(task: MaccoTask, cfg: TrainConfig) -> list[dict]:
    """Group 0: CLIP no-decay (ndim < 2, bn/ln/bias/logit_scale); 1: CLIP decay; 2: predictors + mask tokens."""
    g0, g1, g2 = [], [], []
    for name, p in task.named_parameters():
        if not p.requires_grad:
            continue
        if name == "clip.logit_scale":
            (g2 if cfg.logit_scale_group == "predictor" else g0).append(p)
        elif name.startswith("clip."):
            excl = p.ndim < 2 or any(s in name for s in ("bn", "ln", "bias", "logit_scale"))
            (g0 if excl else g1).append(p)
        else:
            g2.append(p)
    return [{"params": g0, "lr": cfg.lr_clip, "weight_decay": 0.0, "name": "clip_no_decay"},
            {"params": g1, "lr": cfg.lr_clip, "weight_decay": cfg.wd, "name": "clip_decay"},
            {"params": g2, "lr": cfg.lr_predictor, "weight_decay": cfg.predictor_wd, "name": "predictor"}]


def make_optimizer(task, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over the reference's three parameter groups; the fused kernel on CUDA and CPU unless turned off
    (on CPU it is ~5x the per-parameter loop on the tiny model's 7.4 M parameters)."""
    fused = cfg.fused_adamw == "on" or (cfg.fused_adamw == "auto" and device.type in ("cuda", "cpu"))
    return torch.optim.AdamW(param_groups(task, cfg), betas=cfg.betas, eps=cfg.eps, fused=fused or None)


def keep_freed_cpu_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse, as a caching allocator (CUDA's, jemalloc) does.

    By default glibc hands a freed heap top above its (dynamic, at most 64 MB) trim threshold back to the OS, and
    the next step page-faults it in again. A MACCO step frees and re-grows more than that each step (two copies
    of every activation): 18–23k minor page faults per step on the tiny model at batch 32, against none for
    CLIP-FT's smaller swing. Raising the mmap and trim thresholds (both: setting only the trim threshold pins the
    mmap threshold at 128 kB, far worse) removes them. Process-wide and glibc-only; returns whether it applied.
    RSS then stays at the step's peak, as it does on a GPU with the caching allocator."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    limit = 1 << 30
    return bool(libc.mallopt(M_MMAP_THRESHOLD, limit)) and bool(libc.mallopt(M_TRIM_THRESHOLD, limit))


def warmup_cosine(warmup: int, total: int):
    """lr factor: (step + 1) / warmup during warmup, then cosine to 0 at ``total`` (the reference's cosine_lr)."""
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        e, es = step - warmup, max(total - warmup, 1)
        return 0.5 * (1 + math.cos(math.pi * e / es))
    return f


# ---- helpers ----------------------------------------------------------------------------------------------
def _dist_env() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def _atomic_save(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    ck = sorted((Path(out_dir) / "checkpoints").glob("step-*.pt"))
    return ck[-1] if ck else None


class NonFiniteLoss(FloatingPointError):
    pass


class TooManySkipped(RuntimeError):
    """More unreadable training images than ``max_skipped_fraction`` allows: the run would report success on
    data it did not use."""


class NothingToReconstruct(ValueError):
    """A mode with a reconstruction term whose data hold no mask for it: the term would be 0 throughout."""


def keep_rows_through(metrics: Path, step: int) -> None:
    """Drop the rows of ``metrics.csv`` after ``step`` (atomically): a resumed run re-logs them."""
    if not metrics.exists():
        return
    with metrics.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if int(r["step"]) <= step]
        header = reader.fieldnames
    tmp = metrics.with_name(metrics.name + ".tmp")
    with tmp.open("w", newline="") as f:
        if header:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerows(rows)
    os.replace(tmp, metrics)


def check_masks(task, samples: list, counts: dict, cfg: TrainConfig) -> None:
    """A mode that reconstructs masked words or patches needs data with such masks: with none, its term is 0
    at every step and the run is CLIP-FT under another name. Partial coverage is logged."""
    cfg_task = getattr(task, "cfg", None)
    if cfg_task is None or not samples:
        return
    n = len(samples)
    if cfg_task.masks_text:
        with_text = n - counts["empty_text_mask"]
        if with_text == 0:
            raise NothingToReconstruct(f"mode {cfg.mode}: none of the {n} training captions has a relation or "
                                       "attribute token mask (token_masks); the masked-text term would be 0 (check "
                                       "the parse, or train mode clip-ft)")
        log.info("train %s: %d of %d captions have a text mask", cfg.mode, with_text, n)
    if cfg_task.masks_image:
        with_box = n - counts["no_region"]
        if with_box == 0 and cfg.rect_prob <= 0:
            raise NothingToReconstruct(f"mode {cfg.mode}: none of the {n} training captions has a grounded region "
                                       "(regions) and rect_prob is 0; the masked-image term would be 0 (check the "
                                       "ground stage)")
        log.info("train %s: %d of %d captions have a grounded region", cfg.mode, with_box, n)


def scenes_path(cfg: TrainConfig) -> Path:
    return Path(cfg.scenes) if cfg.scenes else Path(cfg.image_root) / f"scenes_{cfg.split}.json"


def build_task(cfg: TrainConfig, vocab=None):
    """The training task: ``MaccoTask`` (macco, clip-ft and the ablations) or ``SceneTask`` (mode scene, with
    the scene vocabulary ``vocab``). ``lock_image`` freezes the image tower."""
    import open_clip

    from . import register_model_configs, resolve_arch

    register_model_configs()
    arch = resolve_arch(cfg.arch, cfg.pretrained)
    clip = open_clip.create_model(arch, pretrained=cfg.pretrained)
    if cfg.mode == "scene":
        from .scene import SceneTask

        if cfg.lock_image:
            raise ValueError("mode 'scene' trains the image tower: lock_image must be false")
        return SceneTask(clip, vocab)
    mc = MaccoConfig(mode=cfg.mode, hardneg=cfg.hardneg, text_cross_layers=cfg.text_cross_layers,
                     image_cross_layers=cfg.image_cross_layers, heads=cfg.predictor_heads,
                     weights=LossWeights(**cfg.loss_weights), mca=cfg.mca, mir=cfg.mir)
    large = arch.split("-quickgelu")[0] in ("ViT-B-16", "ViT-L-14")
    task = MaccoTask(clip, mc, large_backbone=large)
    if cfg.lock_image:
        # any mode: the pixel term never reaches the image tower (its masked-image query is detached), so a
        # locked tower only stops the contrastive and MIR gradients into it
        for p in clip.visual.parameters():
            p.requires_grad_(False)
    return task


# ---- training ---------------------------------------------------------------------------------------------
def format_log_row(name: str, row: dict) -> str:
    """One progress line: step/total, the loss terms, samples/s and the time left."""
    eta = int(round(row["eta_s"]))
    losses = " ".join(f"{k.removesuffix('_loss')} {v:.4f}" for k, v in row.items() if k.endswith("_loss"))
    return (f"train {name}: step {row['step']}/{row['total_steps']} ({100 * row['step'] / row['total_steps']:.0f} %)"
            f" | {losses} | {row['samples_per_s']:.0f} samples/s | ETA {eta // 60}m{eta % 60:02d}s")


def train(cfg: TrainConfig, on_log: Callable[[dict], None] | None = None) -> dict:
    """Train one run. ``on_log`` gets every logged row (each ``log_every`` steps) with ``total_steps``,
    ``samples_per_s`` and ``eta_s`` added: the flow's logger and progress artifact, the CLI's progress lines."""
    import open_clip
    from torch.utils.data import DataLoader

    from data_schemas.geometry import Geometry

    from .data import DataConfig, EpochBatchSampler, MaccoDataset, build_samples, collate
    from .export import export_clip

    rank, world, local_rank = _dist_env()
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() and cfg.device != "cpu" else "gloo"
        torch.distributed.init_process_group(backend)
    if cfg.device == "auto":
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
    if device.type == "cpu" and cfg.cpu_keep_freed_memory:
        keep_freed_cpu_memory()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    out_dir = Path(cfg.out_dir)

    scenes = vocab = None
    if cfg.mode == "scene":
        from .scene import scene_targets

        scenes, vocab = scene_targets(scenes_path(cfg))
    task = build_task(cfg, vocab).to(device)
    task.rank, task.world_size = rank, world
    visual = task.clip.visual
    patch = visual.patch_size[0] if isinstance(visual.patch_size, (tuple, list)) else visual.patch_size
    grid = visual.grid_size[0] if isinstance(visual.grid_size, (tuple, list)) else visual.grid_size
    geo = Geometry(grid * patch, patch)
    samples, counts = build_samples({k: Path(v) for k, v in cfg.tables.items()}, cfg.split,
                                    hard_negatives=cfg.hardneg, seed=cfg.seed)
    check_masks(task, samples, counts, cfg)
    dcfg = DataConfig(image_root=cfg.image_root, split=cfg.split, crop_scale=cfg.crop_scale, rect_prob=cfg.rect_prob,
                      rect_ratio=cfg.rect_ratio)
    tokenizer = open_clip.get_tokenizer("ViT-B-32") if cfg.hardneg else None
    dataset = MaccoDataset(samples, dcfg, geo, seed=cfg.seed, tokenizer=tokenizer, scenes=scenes)
    micro = cfg.batch_size // cfg.accum_steps
    if micro * cfg.accum_steps != cfg.batch_size:
        raise ValueError(f"batch_size {cfg.batch_size} is not divisible by accum_steps {cfg.accum_steps}")
    steps_per_epoch = len(samples) // (cfg.batch_size * world)
    total = cfg.max_steps or steps_per_epoch * cfg.epochs
    if total <= 0 or steps_per_epoch == 0:
        raise ValueError(f"{len(samples)} samples give no full batch of {cfg.batch_size} x {world} rank(s)")

    opt = make_optimizer(task, cfg, device)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg.warmup, total))
    precision = cfg.precision if cfg.precision != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    start = 0
    resume = latest_checkpoint(out_dir) if cfg.resume == "auto" else (Path(cfg.resume) if cfg.resume else None)
    if resume is not None:
        ck = torch.load(resume, map_location="cpu", weights_only=True)
        task.load_state_dict(ck["task"])
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        scaler.load_state_dict(ck["scaler"])
        start = int(ck["step"])
        torch.set_rng_state(ck["rng"]["torch"])
        random.setstate(ck["rng"]["python"])

    model = task
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            task, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=cfg.mode != "macco")
    if cfg.compile:
        model = torch.compile(model)

    sampler = EpochBatchSampler(len(samples), cfg.batch_size, cfg.seed, start, total, rank, world)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=cfg.workers,
                        pin_memory=device.type == "cuda", persistent_workers=False)

    def save(step: int) -> Path:
        path = out_dir / "checkpoints" / f"step-{step:07d}.pt"
        _atomic_save({"task": task.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                      "scaler": scaler.state_dict(), "step": step, "config": asdict(cfg),
                      "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}}, path)
        return path

    is_main = rank == 0
    writer = None
    log_file = None
    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
        try:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(str(out_dir / "logs"))
        except ImportError:
            writer = None
        log_path = out_dir / "metrics.csv"
        if start > 0:
            keep_rows_through(log_path, start)  # a killed run logged steps past its last checkpoint
        log_file = open(log_path, "a", newline="")
    csv_writer = None
    history: list[dict] = []
    skipped = 0
    check_every = 1 if device.type == "cpu" else max(cfg.log_every, 1)
    clamp_max = math.log(100)
    bar = None
    if is_main and cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=start, desc=f"train {cfg.mode}", dynamic_ncols=True)
    t0 = time.perf_counter()
    step = start
    it = iter(loader)
    skipped_items: list[tuple] = []
    for step in range(start, total):
        batch = next(it)
        skipped_now = batch.pop("skipped")
        if skipped_now:
            skipped += len(skipped_now)
            skipped_items += skipped_now[:max(0, 20 - len(skipped_items))]
            drawn = (step + 1 - start) * cfg.batch_size
            if skipped > cfg.max_skipped_fraction * drawn and drawn >= cfg.batch_size:
                raise TooManySkipped(f"{skipped} of {drawn} training images drawn so far could not be read (more "
                                     f"than max_skipped_fraction={cfg.max_skipped_fraction}); e.g. "
                                     + "; ".join(f"caption {c}: {p} ({why})" for c, p, why in skipped_items[:3]))
        if "image" not in batch:  # nothing usable (allowed by max_skipped_fraction): the schedule still moves
            sched.step()
            continue
        host = batch
        batch = {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
        terms_acc: dict[str, torch.Tensor] = {}
        log_now = is_main and ((step + 1) % max(cfg.log_every, 1) == 0 or step + 1 == total)
        for m in range(cfg.accum_steps):
            sl = slice(m * micro, (m + 1) * micro)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                if cfg.mode == "scene":
                    out = model(batch["image"][sl], batch["scene"][sl], stats=log_now)
                else:
                    # the step's shapes from the host copy of the batch: no device sync inside the step
                    sizes = task.step_sizes(host["text"][sl], host["text_mask"][sl], host["image_mask"][sl])
                    out = model(batch["image"][sl], batch["text"][sl], batch["text_mask"][sl],
                                batch["image_mask"][sl], batch["hard_text"][sl] if "hard_text" in batch else None,
                                stats=log_now, sizes=sizes)
            scaler.scale(out["total_loss"] / cfg.accum_steps).backward()
            for k, v in out.items():
                terms_acc[k] = terms_acc.get(k, 0) + v.detach().float() / cfg.accum_steps
        if (step + 1) % check_every == 0 or step == start:
            if not torch.isfinite(terms_acc["total_loss"]):
                raise NonFiniteLoss(f"non-finite loss at step {step}: "
                                    f"{ {k: float(v) for k, v in terms_acc.items()} }")
        lrs = [g["lr"] for g in opt.param_groups]  # this step's learning rates, for the log
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        with torch.no_grad():
            task.clip.logit_scale.clamp_(0, clamp_max)
        if log_now:
            row = {"step": step + 1, "lr_clip": lrs[0], "lr_predictor": lrs[2],
                   **{k: round(float(v), 6) for k, v in terms_acc.items()}, "skipped_images": skipped,
                   "elapsed_s": round(time.perf_counter() - t0, 2)}
            history.append(row)
            if csv_writer is None:
                csv_writer = csv.DictWriter(log_file, fieldnames=list(row))
                if log_file.tell() == 0:
                    csv_writer.writeheader()
            csv_writer.writerow(row)
            log_file.flush()
            if writer is not None:
                for k, v in row.items():
                    if k != "step":
                        writer.add_scalar(k, v, step + 1)
            if bar is not None:
                bar.set_postfix(total=f"{row['total_loss']:.3f}")
            if on_log is not None:
                done, elapsed = step + 1 - start, time.perf_counter() - t0
                on_log({**row, "total_steps": total, "samples_per_s": done * cfg.batch_size * world / elapsed,
                        "eta_s": elapsed / done * (total - step - 1)})
        if bar is not None:
            bar.update(1)
        if is_main and cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < total:
            save(step + 1)
    if bar is not None:
        bar.close()
    summary: dict = {"steps": total, "start_step": start, "samples": counts, "skipped_images": skipped,
                     "skipped_examples": [{"caption_id": c, "path": p, "error": why} for c, p, why in skipped_items],
                     "history": history}
    if skipped:
        log.warning("train %s: %d unreadable image(s) skipped, e.g. %s", cfg.mode, skipped,
                    summary["skipped_examples"][:3])
    if is_main:
        summary["checkpoint"] = str(save(total))
        summary["export"] = export_clip(task.clip, resolve_export_arch(cfg), out_dir / "export",
                                        meta={"mode": cfg.mode, "steps": total, "seed": cfg.seed})
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        log_file.close()
        if writer is not None:
            writer.close()
    if world > 1:
        torch.distributed.barrier()
    return summary


def resolve_export_arch(cfg: TrainConfig) -> str:
    from . import resolve_arch

    return resolve_arch(cfg.arch, cfg.pretrained)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="macco train", description="train MACCO / CLIP-FT on the mask tables")
    ap.add_argument("--config", help="YAML/JSON file with the train settings (a top-level 'train:' key is allowed)")
    args, overrides = ap.parse_known_args(argv)
    cfg = load_config(args.config, overrides)
    return train(cfg, progress_printer(cfg))


def progress_printer(cfg: TrainConfig) -> Callable[[dict], None] | None:
    """Without a progress bar (the flow's torchrun runs, ``progress: false``): one line per logged step on
    stderr (stdout stays for results)."""
    if cfg.progress:
        return None
    return lambda row: print(format_log_row(cfg.mode, row), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
