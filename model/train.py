"""MACCO / CLIP-FT training: AdamW with the reference's three groups, warmup + cosine, resumable checkpoints,
export of the plain CLIP. ``main(argv)`` is the entry point (also under ``torchrun`` for DDP).

Decisions on the official implementation's choices (hiker-lw/MACCO, src/training/), each a config field where it
changes numbers:
- ``logit_scale_group="predictor"`` reproduces the reference (logit scale at the predictor lr 1e-3, wd 0.01);
  ``"clip"`` puts it with the CLIP no-decay group.
- ``betas=(0.9, 0.999)``, ``eps=1e-8`` reproduce the reference's RN50-derived defaults.
- ``predictor_wd=0.01`` applies to every predictor parameter (biases and LayerNorms too), as the reference.
- Gradient accumulation (``accum_steps``) is open_clip's ``accum_freq``: the contrastive terms see the whole batch,
  and the step's gradients are the unaccumulated step's (``model.train_step``). ``grad_clip_norm`` is its
  ``--grad-clip-norm``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from pathlib import Path
from typing import Callable

import torch

from data_schemas.config import ConfigError

from .checkpoint import (ResumeRefused, checkpoint_to_resume, latest_checkpoint, resume,  # noqa: F401 (API)
                         save)
from .masked import tower_shapes
from .runlog import RunLog, SkipCount, TooManySkipped, format_log_row, progress_printer  # noqa: F401 (API)
from .task import MaccoConfig, MaccoTask
from .train_config import HARDNEG_STYLES, TrainConfig, load_config  # noqa: F401 (API)
from .train_state import TrainState
from .train_step import train_step
from .training_task import TrainingTask

log = logging.getLogger(__name__)


# ---- helpers ----------------------------------------------------------------------------------------------
def _dist_env() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


class NothingToReconstruct(ValueError):
    """A mode with a reconstruction term whose data hold no mask for it: the term would be 0 throughout."""


def check_masks(task: TrainingTask, samples: list, counts: dict, cfg: TrainConfig) -> None:
    """A mode that reconstructs masked words or patches needs data with such masks: with none, its term is 0
    at every step and the run is CLIP-FT under another name. Partial coverage is logged."""
    if not samples:
        return
    n = len(samples)
    if task.masks_text:
        with_text = n - counts["empty_text_mask"]
        if with_text == 0:
            raise NothingToReconstruct(f"mode {cfg.mode}: none of the {n} training captions has a relation or "
                                       "attribute token mask (token_masks); the masked-text term would be 0 (check "
                                       "the parse, or train mode clip-ft)")
        log.info("train %s: %d of %d captions have a text mask", cfg.mode, with_text, n)
    if task.masks_image:
        with_box = n - counts["no_region"]
        if with_box == 0 and cfg.rect_prob <= 0:
            raise NothingToReconstruct(f"mode {cfg.mode}: none of the {n} training captions has a grounded region "
                                       "(regions) and rect_prob is 0; the masked-image term would be 0 (check the "
                                       "ground stage)")
        log.info("train %s: %d of %d captions have a grounded region", cfg.mode, with_box, n)


def check_tokens(task: TrainingTask, samples: list, cfg: TrainConfig) -> None:
    """The token masks must be in the model's tokenizer: their length is its context, their ids in its
    vocabulary (token_masks from another tokenizer would crash in the embedding, or train on wrong ids)."""
    if not samples or not task.reads_text:
        return
    shapes = tower_shapes(task.clip)
    context = shapes["context"]
    lengths = {len(s.token_ids) for s in samples}
    top = max(max(s.token_ids) for s in samples)
    if lengths != {context} or top >= shapes["vocab"]:
        raise ValueError(f"train {cfg.arch}: the token_masks rows have {sorted(lengths)} positions and ids up to "
                         f"{top}, the model's text tower {context} positions and {shapes['vocab']} ids: parse the "
                         f"captions with this architecture's tokenizer (parse.clip_model = {cfg.arch!r})")


def check_accumulation(task: TrainingTask, cfg: TrainConfig) -> None:
    """Accumulation needs a task that splits its batch-level terms over micro-batches (``batch_rows``, the
    ``micro`` pass: ``model.train_state.MicroBatch``); for any other it would shrink them to the micro-batch."""
    if cfg.accum_steps > 1 and not callable(getattr(task, "batch_rows", None)):
        raise ConfigError(f"train {cfg.mode}: accum_steps {cfg.accum_steps} is not supported: {type(task).__name__} "
                          "cannot split its batch-level terms (means over the batch) into micro-batches; set "
                          "accum_steps 1")


NEEDED_TABLES = ("captions", "token_masks")  # and for masking: scene_graphs (hard negatives), regions (image masks)


def check_tables(cfg: TrainConfig) -> None:
    """The tables a run reads are given and are tables: one ``ConfigError`` naming what is missing."""
    needed = [*NEEDED_TABLES, *(("regions",) if cfg.mode in ("macco", "image-only", "macco+negclip",
                                                               "macco+ce-clip") else ()),
              # the hard negatives are made from it, unless the data gives them (negclip-tsv: negative_captions)
              *(("scene_graphs",) if cfg.mode in HARDNEG_STYLES and "negative_captions" not in cfg.tables else ())]
    if "negative_captions" in cfg.tables and HARDNEG_STYLES.get(cfg.mode) != "negclip":
        raise ConfigError(f"train config tables: negative_captions (a file's NegCLIP negatives) train modes negclip "
                          f"and macco+negclip; mode {cfg.mode} makes its own or none")
    missing = [t for t in needed if t not in cfg.tables]
    if missing:
        raise ConfigError(f"train config tables: no {', '.join(missing)} (tables: {{captions: DIR, token_masks: DIR, "
                          "scene_graphs: DIR, regions: DIR}, the folders macco parse / ground write; "
                          "configs/train-example.yaml shows them)")
    gone = [f"{t} ({cfg.tables[t]})" for t in cfg.tables if not (Path(cfg.tables[t]) / "manifest.json").is_file()]
    if gone:
        raise ConfigError(f"train config tables: not a complete table: {', '.join(gone)}")


def check_pairs(cfg: TrainConfig, counts: dict, world: int) -> None:
    """A step needs a full batch on every rank: no training pair (an empty captions table, no caption of the split)
    or fewer pairs per epoch than one batch is one line naming the numbers, before any model is built."""
    pairs, need = counts["pairs_per_epoch"], cfg.batch_size * world
    what = "images (captions_per_image 1)" if cfg.captions_per_image == "1" else "caption-image pairs"
    if pairs == 0:
        raise ConfigError(f"train: no training data: the captions table {cfg.tables['captions']} holds "
                          f"{counts['captions']} caption(s) of split {cfg.split!r} ({counts['no_token_mask']} of them "
                          "without a token_masks row): check the source and the split")
    if pairs < need:
        raise ConfigError(f"train: {pairs} training {what} per epoch are fewer than batch_size {cfg.batch_size}"
                          f"{f' x {world} ranks' if world > 1 else ''}: lower batch_size to at most "
                          f"{pairs // world} or train on more data")


def scenes_path(cfg: TrainConfig) -> Path:
    return Path(cfg.scenes) if cfg.scenes else Path(cfg.image_root) / f"scenes_{cfg.split}.json"


def build_task(cfg: TrainConfig, vocab=None, weights_later: bool = False) -> TrainingTask:
    """The training task: ``MaccoTask`` (macco, clip-ft and the ablations), ``SceneTask`` (mode scene, with
    the scene vocabulary ``vocab``) or ``LMTask`` (mode lm, ``vocab`` the training captions' token ids), each a
    ``model.training_task.TrainingTask``. ``lock_image`` freezes the image tower. ``weights_later``: every weight
    is loaded afterwards (a resumed checkpoint), see ``model.factory.create_clip``."""
    from .factory import create_clip, register_model_configs, resolve_arch

    register_model_configs()
    arch = resolve_arch(cfg.arch, cfg.pretrained)
    clip = create_clip(arch, cfg.pretrained, weights_later=weights_later)
    if cfg.mode == "lm":
        from .lm import LMTask

        return LMTask(clip, vocab)  # vocab: the training captions' token ids (lm_vocabulary)
    if cfg.mode == "scene":
        from .scene import SceneTask

        if cfg.lock_image:
            raise ValueError("mode 'scene' trains the image tower: lock_image must be false")
        return SceneTask(clip, vocab)
    mc = MaccoConfig.from_train(cfg)
    large = arch.split("-quickgelu")[0] in ("ViT-B-16", "ViT-L-14")
    if cfg.mode in HARDNEG_STYLES:
        from .hardneg import CeClipConfig
        from .task_hardneg import HardNegativeTask

        task = HardNegativeTask(clip, mc, large, CeClipConfig(threshold_type=cfg.ce_threshold))
    else:
        task = MaccoTask(clip, mc, large_backbone=large)
    if cfg.init_task and not weights_later:  # a resumed run reads every weight from its own checkpoint
        from .factory import weights_file

        with weights_file(cfg.init_task):
            task.load_state_dict(torch.load(cfg.init_task, map_location="cpu", weights_only=True)["task"])
    if cfg.lock_image:
        # any mode: the pixel term never reaches the image tower (its masked-image query is detached), so a
        # locked tower only stops the contrastive and MIR gradients into it
        for p in clip.visual.parameters():
            p.requires_grad_(False)
    if cfg.freeze_towers:  # the predictors learn on the towers as they are (the contrastive terms train nothing)
        for p in clip.parameters():
            p.requires_grad_(False)
    return task


# ---- training ---------------------------------------------------------------------------------------------
def setup(cfg: TrainConfig) -> TrainState:
    """Process group, device, seeds, task, data, optimiser and schedule, then the checkpoint to resume from."""
    from torch.utils.data import DataLoader

    from .data import build_samples, collate, image_groups
    from .neighbour_batches import steps_per_epoch
    from .optim import make_optimizer, schedule

    check_tables(cfg)  # before any model is built: a missing table is one line, not a KeyError minutes later
    rank, world, local_rank = _dist_env()
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() and cfg.device != "cpu" else "gloo"
        torch.distributed.init_process_group(backend)
    if cfg.device == "auto":
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)

    scenes = vocab = None
    if cfg.mode == "scene":
        from .scene import scene_targets

        scenes, vocab = scene_targets(scenes_path(cfg))
    elif cfg.mode == "lm":
        from .lm import lm_vocabulary

        vocab = lm_vocabulary(cfg.tables["token_masks"], cfg.tables["captions"], cfg.split)
    samples, counts = build_samples({k: Path(v) for k, v in cfg.tables.items()}, cfg.split,
                                    hard_negatives=cfg.hardneg, seed=cfg.seed)
    hard = None
    if cfg.mode in HARDNEG_STYLES:  # made once per run from its scene graphs, seeded (model.hardneg_data)
        from .hardneg_data import build_hard_negatives

        hard = build_hard_negatives({k: Path(v) for k, v in cfg.tables.items()}, samples, HARDNEG_STYLES[cfg.mode],
                                    cfg.seed)
        counts["hard_negatives"] = hard.summary
    groups = image_groups(samples) if cfg.captions_per_image == "1" else None
    counts["pairs_per_epoch"] = len(groups) if groups is not None else len(samples)
    check_pairs(cfg, counts, world)  # before the model is built and before resume: fresh removes a run
    total = cfg.max_steps or steps_per_epoch(counts["pairs_per_epoch"], cfg.batch_size, world, cfg.neg_images) * \
        cfg.epochs
    ck, ck_state = checkpoint_to_resume(cfg, total)
    task = build_task(cfg, vocab, weights_later=ck is not None).to(device)
    task.rank, task.world_size = rank, world
    check_accumulation(task, cfg)
    check_masks(task, samples, counts, cfg)
    check_tokens(task, samples, cfg)
    dataset = training_dataset(task, cfg, samples, cfg.split, scenes, hard)

    opt = make_optimizer(task, cfg, device)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(cfg, total))
    precision = cfg.precision if cfg.precision != "auto" else ("fp16" if device.type == "cuda" else "fp32")
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    state = TrainState(cfg, task, task, opt, sched, scaler, device,
                       {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision), None, total, 0, rank, world,
                       counts, Path(cfg.out_dir))
    if ck is not None:
        resume(state, ck, ck_state)
    if world > 1:
        state.model = torch.nn.parallel.DistributedDataParallel(
            task, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=cfg.mode != "macco")
    if cfg.compile:
        state.model = torch.compile(state.model)
    sampler = batch_sampler(cfg, samples, counts, (state.start, total, rank, world), groups, str(device))
    state.loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=cfg.workers,
                              pin_memory=device.type == "cuda", persistent_workers=False)
    return state


def batch_sampler(cfg: TrainConfig, samples: list, counts: dict, steps: tuple[int, int, int, int], groups=None,
                  device: str = "cpu"):
    """The run's batches (``steps``: start, total, rank, world): ``EpochBatchSampler``'s, or with ``neg_images``
    NegCLIP's anchors and their neighbour images (``model.neighbour_batches``; its counts to ``counts``)."""
    from .data import EpochBatchSampler

    if not cfg.neg_images:
        return EpochBatchSampler(len(samples), cfg.batch_size, cfg.seed, *steps, groups)
    from .neighbour_batches import NeighbourBatchSampler, load_candidates

    cands, counts["neighbour_images"] = load_candidates(cfg, samples, device)
    return NeighbourBatchSampler(cands, cfg.batch_size, cfg.seed, *steps, groups)


def training_dataset(task, cfg: TrainConfig, samples: list, split: str, scenes=None, hard=None):
    """The ``MaccoDataset`` of ``samples`` as training reads them: the model's patch grid and normalisation
    (``preprocess_cfg``: OpenAI's for CLIP, 0.5 for SigLIP), the hard negatives in the model's own tokenizer
    (every CLIP arch: the BPE of the tables; a local-dir SigLIP folder: its SentencePiece); ``hard``: the
    hard-negative modes' slots (``model.hardneg_data``)."""
    import open_clip

    from data_schemas.geometry import Geometry

    from .data import DataConfig, MaccoDataset

    shapes = tower_shapes(task.clip)
    pp = getattr(task.clip.visual, "preprocess_cfg", None) or {}
    dcfg = DataConfig.from_train(cfg, split, **{k: tuple(pp[k]) for k in ("mean", "std") if k in pp})
    tokenizer = open_clip.get_tokenizer(resolve_export_arch(cfg)) if cfg.hardneg or hard is not None else None
    return MaccoDataset(samples, dcfg, Geometry(shapes["grid"] * shapes["patch"], shapes["patch"]), seed=cfg.seed,
                        tokenizer=tokenizer, scenes=scenes, hard=hard)


def train(cfg: TrainConfig, on_log: Callable[[dict], None] | None = None,
          on_note: Callable[[str], None] | None = None) -> dict:
    """Train one run; returns its summary (and on rank 0 writes the final checkpoint and the export). ``on_log``
    gets every logged row with ``total_steps``, ``samples_per_s`` and ``eta_s`` added; ``on_note`` (default: this
    module's log) one line saying what the run starts from (``model.factory.weights_note``: a resumed checkpoint, a
    weights file, a random initialisation). TF32 is the run's (``cfg.tf32``), set for its duration and restored
    after it; the allocator setting is the launcher's (``model.runtime.apply_process_settings``)."""
    from .runtime import tf32

    with tf32(cfg.tf32 and torch.cuda.is_available() and cfg.device != "cpu"):
        return _train(cfg, on_log, on_note)


def _train(cfg: TrainConfig, on_log, on_note) -> dict:
    from .factory import weights_note
    from .export import export_clip

    state = setup(cfg)
    note = weights_note(cfg.arch, cfg.pretrained, (state.start, str(state.resumed_from)) if state.start else None)
    if state.is_main:
        (on_note or log.info)(f"train {cfg.mode}: {note}")
        if "hard_negatives" in state.counts:
            from .hardneg_data import summary_note

            (on_note or log.info)(summary_note(cfg.mode, state.counts["hard_negatives"]))
        if "neighbour_images" in state.counts:
            n = state.counts["neighbour_images"]
            (on_note or log.info)(f"train {cfg.mode}: neighbour images: {n['with_neighbour']} of {n['anchors']} "
                                  f"anchors have one among the training samples ({n['without_neighbour']} without: "
                                  "a random sample joins their batch)")
    run_log, skips = RunLog(state, on_log), SkipCount(cfg)
    batches = iter(state.loader)
    try:
        for step in range(state.start, state.total):
            batch = next(batches)
            skips.add(batch.pop("skipped"), step + 1 - state.start)
            if "image" not in batch:  # nothing usable (allowed by max_skipped_fraction): the schedule moves on
                state.sched.step()
                continue
            log_now = run_log.due(step)
            terms, lrs = train_step(state, batch, step, stats=log_now)
            if log_now:
                run_log.log(step, terms, lrs, skips.n)
            run_log.advance()
            if state.is_main and cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < state.total:
                save(state, step + 1)
    finally:
        run_log.close()
    summary = {"steps": state.total, "start_step": state.start, "samples": state.counts, **skips.summary(),
               "history": run_log.history, "init": note}
    if skips.n:
        log.warning("train %s: %d unreadable or resized image(s) skipped, e.g. %s", cfg.mode, skips.n,
                    summary["skipped_examples"][:3])
    if state.is_main:
        summary["checkpoint"] = str(save(state, state.total))
        summary["export"] = export_clip(state.task.clip, resolve_export_arch(cfg), state.out_dir / "export",
                                        meta={"mode": cfg.mode, "steps": state.total, "seed": cfg.seed})
        (state.out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    if state.world > 1:
        torch.distributed.barrier()
    return summary


def note_printer(line: str) -> None:
    """``train``'s notes on stderr (stdout stays for results)."""
    print(line, file=sys.stderr, flush=True)


def resolve_export_arch(cfg: TrainConfig) -> str:
    from .factory import resolve_arch

    return resolve_arch(cfg.arch, cfg.pretrained)


def main(argv: list[str] | None = None) -> dict:
    """The DDP entry (``torchrun ... -m model.train --config FILE``; alone, one process). Rank 0 holds the runner's
    lock on ``out_dir`` (``data_schemas.locks.output_lock``, the lock ``macco train`` and the flow take) for the
    whole run, taken before the process group forms: a second training into the folder, by either entry, fails at
    once naming the holder, and the other ranks write nothing before rank 0 joins them (refused, it never does,
    and torchrun stops them)."""
    from data_schemas import lock_file
    from data_schemas.locks import output_lock

    ap = argparse.ArgumentParser(prog="macco train", description="train MACCO / CLIP-FT on the mask tables")
    ap.add_argument("--config", help="YAML/JSON file with the train settings (a top-level 'train:' key is allowed)")
    args, overrides = ap.parse_known_args(argv)
    cfg = load_config(args.config, overrides)
    from .runtime import apply_process_settings

    apply_process_settings(cfg.cpu_keep_freed_memory, cfg.device)  # the launcher's process-wide settings
    if _dist_env()[0] != 0:
        return train(cfg, progress_printer(cfg), note_printer)
    out = Path(cfg.out_dir)
    with output_lock(lock_file(out, "output"), out):
        return train(cfg, progress_printer(cfg), note_printer)


if __name__ == "__main__":
    from data_schemas import InputFileError

    try:
        main()
    except (InputFileError, ConfigError) as exc:  # the user's input (a held lock among them): one line, exit 2
        print(f"model.train: {exc}", file=sys.stderr)
        sys.exit(2)
