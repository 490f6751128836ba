"""The training config: ``TrainConfig`` (every training default, typed; the enum-like options are ``Literal``
and checked) and ``load_config`` (a YAML file's ``train`` section, then ``key=value`` overrides)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from data_schemas.config import ConfigError, check_choices, check_ranges, from_dict, parse_yaml, unkeyed
from data_schemas.geometry import DEFAULT_ARCH

from .losses import LossWeights

# the MaccoTask modes (model.task.MODES); the last four train with hard-negative captions (model.hardneg):
# NegCLIP, CE-CLIP, and MACCO stacked on each (HARDNEG_STYLES: the model.negatives style each makes)
Mode = Literal["macco", "clip-ft", "text-only", "image-only", "negclip", "ce-clip", "macco+negclip", "macco+ce-clip"]
TrainMode = Literal[Mode, "scene", "lm"]  # scene: model.scene (image tower); lm: model.lm (text tower)
SECTION = "train config"
HARDNEG_STYLES = {"negclip": "negclip", "ce-clip": "ce-clip", "macco+negclip": "negclip", "macco+ce-clip": "ce-clip"}
# the tables a source may give beside the training tables (NegCLIP's file, pipeline.negclip_tsv): a run reads each
# where its settings use it (given_tables)
GIVEN_TABLES = ("negative_captions", "image_neighbours")


@dataclass
class TrainConfig:
    """A training run's settings; ``unkeyed()`` fields do not decide the trained model (paths whose content is keyed
    apart: the tables, the images, the starting weights; where and how the run executes, logs and saves): a change
    to one neither retrains (the stage key) nor refuses a resume (``checkpoint.checkpoint_to_resume``)."""
    arch: str = DEFAULT_ARCH  # the demo configs: macco-tiny
    pretrained: str | None = unkeyed(None)  # open_clip tag or weights file (e.g. a base model's export .pt)
    tables: dict = unkeyed(default_factory=dict)  # captions, token_masks, scene_graphs, regions -> table dirs
    image_root: str = unkeyed("")
    split: str = "train"
    # all: every caption of every image each epoch; 1: one caption per image, drawn afresh each epoch (seeded) —
    # the paper's ~110k COCO pairs per epoch (Karpathy train + restval: 113k images, 567k captions)
    captions_per_image: Literal["all", "1"] = "all"
    out_dir: str = unkeyed("artifacts/runs/default")
    # scene: the image tower on the world's scene truth (model.scene); lm: the text tower as a causal language model
    # on the training captions (model.lm)
    mode: TrainMode = "macco"
    hardneg: bool = False  # one swapped caption per sample (model.data.swap_negative) for the other modes
    ce_threshold: Literal["mean", "max", "fixed"] = "mean"  # modes *ce-clip: the CMR threshold (model.hardneg)
    # modes negclip / macco+negclip: NegCLIP's hard-negative images, each anchor's image neighbour (tables:
    # image_neighbours) with a caption of it in the same batch, half the batch anchors (model.neighbour_batches)
    neg_images: bool = False
    mca: bool = True  # masked samples as extra contrastive negatives (the ablation "macco without MCA": false)
    mir: bool = True  # the intra-modal masked-vs-full term (the ablation "macco without MIR": false)
    lock_image: bool = False  # freeze the image tower (LiT: the text tower learns against a locked image tower)
    freeze_towers: bool = False  # train only the predictors and mask tokens (both towers and the logit scale frozen)
    # the text predictor reads a zero image instead of the image's features: the image-free control of the
    # masked-word probe (what the words around a mask alone give)
    withhold_image: bool = False
    init_task: str | None = unkeyed(None)  # a training checkpoint whose task (CLIP, predictors, mask tokens) starts the run
    scenes: str | None = None  # mode scene: the world's scenes_<split>.json (default: image_root/scenes_<split>.json)
    loss_weights: dict = field(default_factory=lambda: asdict(LossWeights()))
    text_cross_layers: int | None = None
    image_cross_layers: int | None = None
    predictor_heads: int | None = None  # None: 8 (the reference) for the paper backbones, width // 32 if narrower
    epochs: int = 5
    max_steps: int | None = None  # overrides epochs when set
    batch_size: int = 256
    # gradient accumulation (open_clip's accum_freq): accum_steps micro-batches of batch_size / accum_steps hold
    # the activations, but the contrastive batch is the full batch_size (every negative) and the gradients are the
    # full batch's; it costs one more forward of the batch per step (a pass without gradient caching its features)
    accum_steps: int = 1
    grad_clip_norm: float | None = None  # clip the total gradient norm (after fp16 unscaling) to this; None: no clip
    lr_clip: float = 5e-7
    lr_predictor: float = 1e-3
    wd: float = 0.2
    predictor_wd: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup: int = 50
    schedule: Literal["cosine", "constant"] = "cosine"  # after the warmup: cosine to 0 (the reference's), or constant
    logit_scale_group: Literal["predictor", "clip"] = "predictor"  # predictor: the reference's
    # auto: on CUDA fp16 autocast + GradScaler, the reference's (the masked negatives differ from the full
    # ones by small logit gaps: bf16's MCA+MIR gradient error was 8x fp16's), fp32 on CPU | fp32 | bf16 | fp16
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    fused_adamw: Literal["auto", "on", "off"] = "auto"  # auto: on CUDA and CPU, where torch has the fused kernel
    compile: bool = unkeyed(False)
    tf32: bool = True  # CUDA: TF32 matmuls / convolutions during the run (restored after it; model.runtime.tf32)
    workers: int = unkeyed(2)
    seed: int = 0
    rect_prob: float = 0.1
    rect_ratio: float = 0.75
    # the phrase an image mask covers: any (the reference: one of the caption's phrases at random) or relation (a
    # relation phrase: its subject's and object's boxes, so filling them needs the relation; docs/experiments H3)
    mask_phrases: Literal["any", "relation"] = "any"
    crop_scale: tuple[float, float] = (0.9, 1.0)
    save_every: int = unkeyed(0)  # steps between resumable checkpoints (0: only at the end)
    max_skipped_fraction: float = unkeyed(0.01)  # unreadable or resized images allowed (share of samples drawn); past it: fail
    log_every: int = unkeyed(10)
    # None: a new run (refused if out_dir holds another run's checkpoints); auto: continue the latest checkpoint in
    # out_dir (same settings, else refused); fresh: a new run replacing out_dir's earlier run; or a checkpoint path
    resume: str | None = unkeyed(None)
    device: str = unkeyed("auto")
    progress: bool = unkeyed(True)
    cpu_keep_freed_memory: bool = unkeyed(True)  # CPU: glibc keeps freed memory for reuse (see keep_freed_cpu_memory)

    def __post_init__(self):
        check_choices(self, SECTION)  # a typo (precision: bf-16) is an error, never a silent fallback
        # a value out of range is an error too (batch_size 0, lr_clip -1); a learning rate of 0 freezes its group
        check_ranges(self, SECTION, positive=("epochs", "max_steps", "batch_size", "accum_steps", "eps",
                                              "log_every", "predictor_heads", "crop_scale", "grad_clip_norm"),
                     non_negative=("lr_clip", "lr_predictor", "wd", "predictor_wd", "warmup", "workers", "save_every",
                                   "text_cross_layers", "image_cross_layers", "loss_weights", "seed"),
                     probability=("rect_prob", "rect_ratio", "max_skipped_fraction", "betas", "crop_scale"))
        unknown = sorted(set(self.loss_weights) - set(asdict(LossWeights())))
        if unknown:
            raise ConfigError(f"{SECTION} loss_weights: unknown term(s) {unknown}; known: "
                              f"{sorted(asdict(LossWeights()))}")
        if self.mode in HARDNEG_STYLES and self.hardneg:
            raise ConfigError(f"{SECTION} hardneg: mode {self.mode} makes its own hard negatives; set hardneg false")
        if self.neg_images and (HARDNEG_STYLES.get(self.mode) != "negclip" or self.batch_size % 2):
            raise ConfigError(f"{SECTION} neg_images: NegCLIP's neighbour images are for modes negclip and "
                              f"macco+negclip with an even batch_size (mode {self.mode}, batch_size {self.batch_size})")
        if self.batch_size % self.accum_steps:
            raise ConfigError(f"{SECTION} accum_steps: {self.accum_steps} does not divide batch_size "
                              f"{self.batch_size} (micro-batches of equal size)")
        if self.crop_scale[0] > self.crop_scale[1]:
            raise ConfigError(f"{SECTION} crop_scale: {list(self.crop_scale)} (low > high)")


def given_tables(cfg: TrainConfig) -> tuple[str, ...]:
    """Of ``GIVEN_TABLES``, those a run of ``cfg`` trains on when its data has them: the file's negative captions
    in modes negclip / macco+negclip, the neighbour images with ``neg_images``."""
    return (*(("negative_captions",) if HARDNEG_STYLES.get(cfg.mode) == "negclip" else ()),
            *(("image_neighbours",) if cfg.neg_images else ()))


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, **kw) -> TrainConfig:
    """YAML/JSON file (its ``train`` section, or the whole file), then ``kw``, then ``key=value`` overrides
    (values parsed as YAML). Unknown keys, wrong types and values outside a ``Literal`` are errors."""
    from data_schemas.config import load_yaml

    data: dict = {}
    if path:
        data = load_yaml(path) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a mapping expected (a train section), got {type(data).__name__}")
        data = data.get("train", data)
        flow_keys = sorted({"base", "common", "runs", "seeds", "torchrun_nproc"} & set(data or {}))
        if flow_keys:
            raise ConfigError(f"{path} is a flow config (train.{', train.'.join(flow_keys)}): run it with `macco run "
                              f"--config {path}`; `macco train` takes one training section (configs/"
                              "train-example.yaml shows one)")
    data.update(kw)
    for ov in overrides or []:
        if "=" not in ov:
            raise ConfigError(f"override {ov!r} is not key=value")
        k, v = ov.split("=", 1)
        data[k.lstrip("-").replace("-", "_")] = parse_yaml(v, f"override {k}")
    return from_dict(TrainConfig, data, SECTION)
