"""Training data over the captions, token_masks, scene_graphs and regions tables plus the images.

Per sample: the tracking RandomResizedCrop (scale 0.9-1, ratio 3/4-4/3, bicubic, no flip) with the patch mask
recomputed from the boxes and the sampled crop (boxes outside the crop mark nothing); the region of **one**
random phrase masked, or with probability ``rect_prob`` a random rectangle of ~``rect_ratio`` of the (correct)
grid; the text mask = every relation and attribute token. Randomness is keyed on (seed, epoch, index), so a
resumed run sees exactly the batches an uninterrupted run would. Unreadable images, and images whose displayed
size (EXIF orientation applied) is not the captions table's width x height, are skipped and named (training fails
past ``max_skipped_fraction``).
"""
from __future__ import annotations

import hashlib
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image, ImageOps
from torch.utils.data import Dataset, Sampler

from data_schemas import TABLES, read_table
from data_schemas.geometry import Geometry, boxes_patches, random_rectangle, to_rgb

from .train_config import TrainConfig

log = logging.getLogger(__name__)
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
FALLBACK_NEGATIVE = "A photo of full black image."  # the reference's caption when no negative exists


@dataclass
class Sample:
    caption_id: int
    file_name: str
    token_ids: list[int]
    text_positions: list[int]
    phrase_boxes: list[list[list[float]]]  # per grounded phrase, its boxes (original pixels)
    hard_negative: str | None = None
    size: tuple[int, int] = (0, 0)  # (width, height) the captions table records (the boxes' frame); 0: unknown
    phrase_kinds: tuple[str, ...] = ()  # the kind of each phrase of phrase_boxes (attribute / relation)


@dataclass
class DataConfig:
    """What the dataset reads of a run's settings; every default is ``TrainConfig``'s (one source; ``from_train``
    builds it from a run's)."""
    image_root: str = TrainConfig.image_root
    split: str = TrainConfig.split
    crop_scale: tuple[float, float] = TrainConfig.crop_scale
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)  # RandomResizedCrop's default, as the reference
    rect_prob: float = TrainConfig.rect_prob
    rect_ratio: float = TrainConfig.rect_ratio
    # any: one phrase's boxes drawn from all the caption's phrases (the reference); relation: from its relation
    # phrases only (their boxes are the subject's and the object's: both objects masked), else from all
    mask_phrases: str = TrainConfig.mask_phrases
    mean: tuple[float, float, float] = OPENAI_MEAN
    std: tuple[float, float, float] = OPENAI_STD

    @classmethod
    def from_train(cls, cfg: TrainConfig, split: str, **kw) -> "DataConfig":
        """A run's data settings (``kw``: the model's normalisation ``mean`` / ``std``)."""
        return cls(image_root=cfg.image_root, split=split, crop_scale=cfg.crop_scale, rect_prob=cfg.rect_prob,
                   rect_ratio=cfg.rect_ratio, mask_phrases=cfg.mask_phrases, **kw)


def swap_negative(caption: str, concepts: list[dict], rng: random.Random) -> str | None:
    """A NegCLIP-style hard negative from the scene graph: swap a relation's subject and object noun phrases
    (each with its attributes), else swap the attributes of two objects; None if neither exists."""
    by_id = {c["concept_id"]: c for c in concepts}
    attrs: dict[int, list[dict]] = {}
    for c in concepts:
        if c["kind"] == "attribute":
            attrs.setdefault(c["object_id"], []).append(c)

    def np_span(obj_id: int) -> tuple[int, int]:
        o = by_id[obj_id]
        starts = [a["char_start"] for a in attrs.get(obj_id, []) if a["char_start"] < o["char_start"]]
        return min(starts + [o["char_start"]]), o["char_end"]

    rels = [c for c in concepts if c["kind"] == "relation"]
    rng.shuffle(rels)
    for r in rels:
        (a0, a1), (b0, b1) = np_span(r["subject_id"]), np_span(r["object_id"])
        if a1 <= b0 or b1 <= a0:
            (a0, a1), (b0, b1) = sorted([(a0, a1), (b0, b1)])
            neg = caption[:a0] + caption[b0:b1] + caption[a1:b0] + caption[a0:a1] + caption[b1:]
            if neg.lower() != caption.lower():
                return neg
    with_attr = [o for o in attrs if attrs[o]]
    if len(with_attr) >= 2:
        o1, o2 = sorted(rng.sample(with_attr, 2), key=lambda o: by_id[o]["char_start"])
        a, b = attrs[o1][0], attrs[o2][0]
        if a["text"].lower() != b["text"].lower():
            (s0, e0), (s1, e1) = sorted([(a["char_start"], a["char_end"]), (b["char_start"], b["char_end"])])
            return caption[:s0] + caption[s1:e1] + caption[e0:s1] + caption[s0:e0] + caption[e1:]
    return None


def build_samples(tables: dict[str, Path], split: str | None = "train", mask_kinds=("relation", "attribute"),
                  hard_negatives: bool = False, seed: int = 0) -> tuple[list[Sample], dict]:
    """Join the tables into training samples; returns (samples, counts)."""
    splits = None if split is None else set(split.split(","))  # e.g. "train,restval" for the Karpathy split
    caps = {r["caption_id"]: r for r in read_table(TABLES["captions"], tables["captions"]).to_pylist()
            if splits is None or r["split"] in splits}
    tm = {r["caption_id"]: r for r in read_table(TABLES["token_masks"], tables["token_masks"]).to_pylist()}
    concepts: dict[int, list[dict]] = {}
    kind_of: dict[tuple[int, int], str] = {}
    if "scene_graphs" in tables:
        for r in read_table(TABLES["scene_graphs"], tables["scene_graphs"]).to_pylist():
            concepts.setdefault(r["caption_id"], []).append(r)
            kind_of[(r["caption_id"], r["concept_id"])] = r["kind"]
    # the image-mask candidates: one per (concept, phrase) — a concept's phrase (the grounders: one phrase each, so
    # the same groups as per concept), or each phrase of MACCO's file (its loader draws one phrase: two phrases
    # sharing a word, or two without a caption word (both concept -1), stay two candidates, never their union)
    boxes: dict[int, dict[tuple[int, str], list]] = {}
    if "regions" in tables:
        for r in read_table(TABLES["regions"], tables["regions"]).to_pylist():
            boxes.setdefault(r["caption_id"], {}).setdefault((r["concept_id"], r["phrase"]), []).append(
                list(r["box_xyxy"]))
    rng = random.Random(seed)
    out, counts = [], {"captions": len(caps), "no_token_mask": 0, "empty_text_mask": 0, "no_region": 0}
    for cid in sorted(caps):
        if cid not in tm:
            counts["no_token_mask"] += 1
            continue
        t = tm[cid]
        pos = sorted({p for k in mask_kinds for p in t[f"{k}_idx"]})
        counts["empty_text_mask"] += not pos
        phrases = sorted(boxes.get(cid, {}).items())
        phrase_boxes = [v for _, v in phrases]
        counts["no_region"] += not phrase_boxes
        neg = swap_negative(caps[cid]["caption"], concepts.get(cid, []), rng) if hard_negatives else None
        out.append(Sample(cid, caps[cid]["file_name"], t["token_ids"], pos, phrase_boxes, neg,
                          (caps[cid]["width"], caps[cid]["height"]),
                          tuple(kind_of.get((cid, k), "") for (k, _), _ in phrases)))
    return out, counts


def rrc_params(width: int, height: int, scale, ratio, rng: random.Random) -> tuple[int, int, int, int]:
    """torchvision ``RandomResizedCrop.get_params`` (same sampling rule) drawn from ``rng`` instead of the global
    torch generator, so the crop is a pure function of the sample's seed: (top, left, h, w)."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        ar = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * ar)))
        h = int(round(math.sqrt(target / ar)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    in_ratio = width / height  # fallback: centre crop at the closest allowed ratio
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _key_seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


class MaccoDataset(Dataset):
    """Indexed by (epoch, index) pairs (see ``EpochBatchSampler``) so augmentation is a function of the step."""

    def __init__(self, samples: list[Sample], cfg: DataConfig, geo: Geometry, seed: int = 0, tokenizer=None,
                 scenes: dict[str, torch.Tensor] | None = None, hard=None):
        self.samples, self.cfg, self.geo, self.seed = samples, cfg, geo, seed
        self.scenes = scenes  # file name -> scene targets (``model.scene``), for mode 'scene'
        if scenes is not None:
            missing = sorted({Path(s.file_name).name for s in samples} - set(scenes))
            if missing:
                raise ValueError(f"{len(missing)} training image(s) have no scene truth, e.g. {missing[:3]}")
        self.negatives = None
        if tokenizer is not None and any(s.hard_negative is not None for s in samples):
            texts = [s.hard_negative or FALLBACK_NEGATIVE for s in samples]
            self.negatives = tokenizer(texts)
        self.hard = None  # the hard-negative modes' slots (model.hardneg_data.HardNegatives): tokens [N, K, L], valid
        if hard is not None:
            K = len(hard.kinds)
            tokens = tokenizer([t for slots in hard.texts for t in slots]).to(torch.int32)  # half of int64's memory
            self.hard = (hard.style, tokens.reshape(len(samples), K, -1), torch.tensor(hard.valid, dtype=torch.bool))

    def __len__(self) -> int:
        return len(self.samples)

    def _crop(self, img: Image.Image, rng: random.Random) -> tuple[torch.Tensor, tuple]:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        top, left, h, w = rrc_params(img.width, img.height, self.cfg.crop_scale, self.cfg.crop_ratio, rng)
        s = self.geo.image_size
        x = TF.resized_crop(img, top, left, h, w, [s, s], InterpolationMode.BICUBIC)
        x = TF.normalize(TF.to_tensor(x), self.cfg.mean, self.cfg.std)
        return x, (top, left, h, w)

    def _phrases(self, s: Sample) -> list:
        """The phrases whose boxes the image mask is drawn from (``mask_phrases``)."""
        if self.cfg.mask_phrases == "relation":
            rel = [b for b, k in zip(s.phrase_boxes, s.phrase_kinds) if k == "relation"]
            return rel or s.phrase_boxes
        return s.phrase_boxes

    def __getitem__(self, key):
        epoch, idx = key
        s = self.samples[idx]
        seed = _key_seed(self.seed, epoch, idx)
        rng = random.Random(seed)
        path = Path(self.cfg.image_root) / s.file_name
        try:
            with Image.open(path) as im:
                img = to_rgb(ImageOps.exif_transpose(im))  # as displayed: the frame of the boxes
        except (OSError, ValueError, Image.DecompressionBombError) as exc:  # too large: Pillow refuses it too
            log.warning("skipping unreadable image %s (caption %s): %s", path, s.caption_id, exc)
            return {"skipped": (s.caption_id, str(path), f"{type(exc).__name__}: {exc}")}
        if all(s.size) and img.size != tuple(s.size):  # replaced since the tables: its boxes would be misplaced
            why = (f"image_size_mismatch: the image is {img.width}x{img.height} as displayed, the captions table "
                   f"says {s.size[0]}x{s.size[1]} (its boxes and patch masks are in that frame)")
            log.warning("skipping image %s (caption %s): %s", path, s.caption_id, why)
            return {"skipped": (s.caption_id, str(path), why)}
        x, crop = self._crop(img, rng)
        g = self.geo.grid
        image_mask = torch.zeros(g * g, dtype=torch.bool)
        if rng.random() < self.cfg.rect_prob:
            idx_patches = random_rectangle(g, self.cfg.rect_ratio, rng)
        elif s.phrase_boxes:
            idx_patches = boxes_patches(rng.choice(self._phrases(s)), crop, self.geo)
        else:
            idx_patches = []
        image_mask[idx_patches] = True
        text = torch.tensor(s.token_ids, dtype=torch.long)
        text_mask = torch.zeros(len(s.token_ids), dtype=torch.bool)
        text_mask[s.text_positions] = True
        item = {"image": x, "text": text, "text_mask": text_mask, "image_mask": image_mask,
                "caption_id": s.caption_id}
        if self.negatives is not None:
            item["hard_text"] = self.negatives[idx]
        if self.hard is not None:
            item["hard_texts"], item["hard_valid"] = self._hard(idx, rng)
        if self.scenes is not None:
            from .scene import crop_targets

            item["scene"] = crop_targets(self.scenes[Path(s.file_name).name], crop, img.width, img.height)
        return item


    def _hard(self, idx: int, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample's hard-negative slots: CE-CLIP's K typed slots and their validity; NegCLIP's one negative, drawn
        from the caption's valid ones for this (epoch, index) as NegCLIP's loader draws one of its list (invalid,
        the placeholder, when it has none)."""
        style, tokens, valid = self.hard
        if style == "ce-clip":
            return tokens[idx].long(), valid[idx]
        ok = valid[idx].nonzero().flatten().tolist()
        j = rng.choice(ok) if ok else 0
        return tokens[idx, j:j + 1].long(), valid[idx, j:j + 1]


def collate(items: list) -> dict:
    from torch.utils.data import default_collate

    good = [it for it in items if "skipped" not in it]
    batch = default_collate(good) if good else {}
    batch["skipped"] = [it["skipped"] for it in items if "skipped" in it]  # (caption_id, path, why) each
    return batch


def image_groups(samples: list[Sample]) -> list[list[int]]:
    """The samples' indices grouped by image (groups in the order of each image's first sample)."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.file_name, []).append(i)
    return list(groups.values())


class EpochBatchSampler(Sampler):
    """Deterministic batches of (epoch, index): a seeded shuffle per epoch, drop_last, this rank's share,
    starting at global step ``start_step`` (resume) and running for ``total_steps``.

    With ``groups`` (the sample indices of each image, ``image_groups``) an epoch is one pass over the images,
    each with one of its captions drawn afresh every epoch (seeded by (seed, epoch)): the paper's ~110k COCO pairs
    per epoch rather than every caption of every image."""

    def __init__(self, n: int, batch_size: int, seed: int, start_step: int, total_steps: int,
                 rank: int = 0, world_size: int = 1, groups: list[list[int]] | None = None):
        self.n, self.bs, self.seed, self.groups = n, batch_size, seed, groups
        self.start, self.total, self.rank, self.world = start_step, total_steps, rank, world_size
        self.units = len(groups) if groups is not None else n  # what one epoch passes over once
        self.steps_per_epoch = self.units // (batch_size * world_size)
        if self.steps_per_epoch == 0:
            what = "images" if groups is not None else "training samples"
            raise ValueError(f"{self.units} {what} are fewer than one batch of {batch_size} x {world_size} ranks")

    def __len__(self) -> int:
        return self.total - self.start

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The epoch's sample indices in order (before the split into batches and ranks)."""
        gen = torch.Generator().manual_seed(self.seed * 1000003 + epoch)
        perm = torch.randperm(self.units, generator=gen)
        if self.groups is None:
            return perm
        sizes = torch.tensor([len(g) for g in self.groups])
        pick = (torch.rand(self.units, generator=gen) * sizes).long()  # one caption per image, this epoch's
        return torch.tensor([self.groups[g][int(pick[g])] for g in perm])

    def __iter__(self):
        step, order, order_epoch = self.start, None, -1
        while step < self.total:
            epoch, k = divmod(step, self.steps_per_epoch)
            if epoch != order_epoch:
                order, order_epoch = self.epoch_order(epoch), epoch
            per_step = self.bs * self.world
            chunk = order[k * per_step:(k + 1) * per_step]
            mine = chunk[self.rank * self.bs:(self.rank + 1) * self.bs]
            yield [(epoch, int(i)) for i in mine]
            step += 1
