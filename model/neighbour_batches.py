"""NegCLIP's hard-negative images in the batch: with ``neg_images: true`` (modes ``negclip``, ``macco+negclip``)
each batch is half anchors, each followed by one of its image's neighbours (``image_neighbours``: the base model's
nearest images, ``model.neighbours``, or those NegCLIP's file gives) with a caption of that neighbour, so the
contrast meets the neighbour image and its caption (and, through the dataset, the neighbour's own hard-negative
caption) beside the anchor's, as NegCLIP's loader does (it returns each row's image with one neighbour drawn from
its ``neg_image`` list, that neighbour's caption and negative).

Deterministic: the anchors are ``EpochBatchSampler``'s order (a seeded shuffle per epoch; with one caption per
image, the caption drawn per epoch), and an anchor's neighbour, and the neighbour's caption where the table does
not name one, are drawn by a generator keyed on (seed, epoch, anchor): the same seed gives the same batches, a
resumed run the batches the uninterrupted one had, and under DDP each rank's anchors bring their own neighbours.
"""
from __future__ import annotations

import random
from pathlib import Path

import torch

from .data import EpochBatchSampler, _key_seed


def neighbour_candidates(samples: list, captions: list[dict], rows: list[dict]) -> tuple[list[list[list[int]]], dict]:
    """Per sample (index into ``samples``): its image's neighbours (the rows of its own caption where the table has
    them, as NegCLIP's file gives them per row, else its image's), each the list of sample indices that may stand
    for it (the caption the row names, else every training caption of the neighbour image), nearest first;
    neighbours with no training sample (another split, an unreadable row) are left out. Returns (candidates,
    counts: anchors with and without a neighbour in the training samples)."""
    image_of = {r["caption_id"]: r["image_id"] for r in captions}
    by_image: dict[int, list[int]] = {}
    index_of = {}
    for i, s in enumerate(samples):
        by_image.setdefault(image_of[s.caption_id], []).append(i)
        index_of[s.caption_id] = i
    listed: dict[tuple, list[dict]] = {}  # (image_id, None) or (image_id, caption_id) -> its rows by rank
    for r in sorted(rows, key=lambda r: r["rank"]):
        listed.setdefault((r["image_id"], r["caption_id"]), []).append(r)
    out, without = [], 0
    for s in samples:
        cands, image = [], image_of[s.caption_id]
        for r in listed.get((image, s.caption_id), listed.get((image, None), [])):
            cid = r["neighbour_caption_id"]
            pick = [index_of[cid]] if cid is not None and cid in index_of else \
                (by_image.get(r["neighbour_image_id"], []) if cid is None else [])
            if pick:
                cands.append(pick)
        without += not cands
        out.append(cands)
    return out, {"anchors": len(samples), "with_neighbour": len(samples) - without, "without_neighbour": without}


def load_candidates(cfg, samples: list, device: str = "cpu") -> tuple[list[list[list[int]]], dict]:
    """``neighbour_candidates`` of a run (``cfg``: its ``TrainConfig``) from its captions table and its neighbours:
    ``tables.image_neighbours`` where given (NegCLIP's file, or a table the user computed), else ``run_neighbours``."""
    from data_schemas import TABLES, read_table

    caps = read_table(TABLES["captions"], cfg.tables["captions"]).to_pylist()
    if "image_neighbours" in cfg.tables:
        rows = read_table(TABLES["image_neighbours"], cfg.tables["image_neighbours"]).to_pylist()
    else:
        rows = run_neighbours(cfg, samples, caps, device)
    return neighbour_candidates(samples, caps, rows)


def run_neighbours(cfg, samples: list, captions: list[dict], device: str = "cpu") -> list[dict]:
    """The training images' neighbours by the run's starting weights (``arch`` + ``pretrained``: in the flow the
    base's export), computed once and kept as ``<out_dir>/image_neighbours``, which a later start of the same run
    (a resume) reads back when its manifest names the same data, weights and k."""
    from data_schemas import TABLES, read_manifest, read_table
    from data_schemas.provenance import file_sha256

    from .factory import resolve_arch
    from .neighbours import NeighboursConfig, image_neighbours, write_image_neighbours

    ncfg = NeighboursConfig(arch=resolve_arch(cfg.arch, cfg.pretrained), pretrained=cfg.pretrained, split=None,
                            device=device)
    weights = file_sha256(cfg.pretrained) if cfg.pretrained and Path(cfg.pretrained).is_file() else cfg.pretrained
    ident = {"arch": ncfg.arch, "weights": weights, "k": ncfg.k,
             "captions": read_manifest(Path(cfg.tables["captions"]))["content_hash"],
             "samples": len(samples)}
    out = Path(cfg.out_dir) / "image_neighbours"
    if (out / "manifest.json").is_file() and read_manifest(out).get("config") == ident:
        return read_table(TABLES["image_neighbours"], out).to_pylist()
    wanted = {s.caption_id for s in samples}
    rows = image_neighbours(ncfg, [r for r in captions if r["caption_id"] in wanted], cfg.image_root)
    if not (torch.distributed.is_initialized() and torch.distributed.get_rank() > 0):  # DDP: every rank computes
        write_image_neighbours(rows, out, ident)  # the same rows (deterministic); one writes them
    return rows


class NeighbourBatchSampler(EpochBatchSampler):
    """``EpochBatchSampler`` over ``batch_size // 2`` anchors per rank and step, each followed by a neighbour:
    ``[a1, n1, a2, n2, ...]`` (a micro-batch of an even size keeps its pairs). An anchor whose image has no neighbour
    among the training samples gets a sample drawn at random (counted in ``neighbour_candidates``)."""

    def __init__(self, candidates: list[list[list[int]]], batch_size: int, seed: int, start_step: int,
                 total_steps: int, rank: int = 0, world_size: int = 1, groups: list[list[int]] | None = None):
        if batch_size % 2:
            raise ValueError(f"neg_images: batch_size {batch_size} is odd (half anchors, half their neighbours)")
        super().__init__(len(candidates), batch_size // 2, seed, start_step, total_steps, rank, world_size, groups)
        self.candidates = candidates

    def neighbour(self, epoch: int, anchor: int) -> int:
        """The sample that joins ``anchor``'s batch in ``epoch``: one of its neighbours, then one of its captions."""
        rng = random.Random(_key_seed("neighbour", self.seed, epoch, anchor))
        cands = self.candidates[anchor]
        if not cands:
            return rng.randrange(self.n)
        return rng.choice(rng.choice(cands))

    def __iter__(self):
        for anchors in super().__iter__():
            yield [pair for e, i in anchors for pair in ((e, i), (e, self.neighbour(e, i)))]


def steps_per_epoch(units: int, batch_size: int, world_size: int, neg_images: bool) -> int:
    """Optimiser steps in one pass over ``units`` (samples or images): with ``neg_images`` half of each batch is
    anchors, so a pass over the anchors takes twice the steps."""
    return units // ((batch_size // 2 if neg_images else batch_size) * world_size)
