"""NegCLIP's hard-negative images: each training image's k nearest neighbours by the base model's image embedding,
computed once per data set and base, written as the ``image_neighbours`` table (``data_schemas.image_neighbours``).

NegCLIP's released file gives three neighbours per row (``neg_image``), found with the pretrained CLIP's image
features; here ``nearest_neighbours`` is the rule (cosine similarity of the L2-normalised embeddings, the image itself
left out, ties broken by the lower row: deterministic), ``image_embeddings`` the base model's embeddings (eval mode,
no augmentation: open_clip's validation transform) and ``image_neighbours`` the two over a captions table's images of
one split. The training side (``model.neighbour_batches``) puts one neighbour of each anchor image in its batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from data_schemas.config import unkeyed
from data_schemas.geometry import DEFAULT_ARCH


@dataclass
class NeighboursConfig:
    """The neighbours of one data set under one base model (``k``: NegCLIP's file has 3)."""
    arch: str = DEFAULT_ARCH
    pretrained: str | None = unkeyed(None)  # the base model's weights (open_clip tag or file; keyed by content)
    k: int = 3
    split: str | None = "train"  # None: every row of the captions given
    batch_size: int = unkeyed(64)
    device: str = unkeyed("cpu")


def nearest_neighbours(features: torch.Tensor, k: int, rows_per_block: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """([N, k] row indices, [N, k] cosine similarities) of each row's k most similar other rows (fewer rows than
    k + 1: k is cut to N - 1), nearest first; equal similarities in row order. Computed ``rows_per_block`` rows at
    a time (COCO's 113k images: never the N x N matrix), the result the same for any block size."""
    if features.ndim != 2:
        raise ValueError(f"features: [N, D] expected, got {tuple(features.shape)}")
    n = features.shape[0]
    k = max(min(k, n - 1), 0)
    f = torch.nn.functional.normalize(features.double(), dim=-1)
    order, sims = torch.zeros(n, k, dtype=torch.long), torch.zeros(n, k, dtype=torch.float64)
    for start in range(0, n if k else 0, rows_per_block):
        sim = f[start:start + rows_per_block] @ f.T
        rows = torch.arange(sim.shape[0])
        sim[rows, rows + start] = float("-inf")  # never its own neighbour
        kth = sim.topk(k, dim=1).values[:, -1:]
        for r in range(sim.shape[0]):  # every row at or above the k-th value, by similarity then row (stable)
            cand = (sim[r] >= kth[r]).nonzero().squeeze(1)
            best = cand[torch.sort(sim[r, cand], descending=True, stable=True).indices[:k]]
            order[start + r], sims[start + r] = best, sim[r, best]
    return order, sims.float()


@torch.no_grad()
def image_embeddings(model, preprocess, paths: list[Path], batch_size: int = 64, device: str = "cpu") -> torch.Tensor:
    """[N, E] image embeddings of ``paths`` by ``model`` (eval mode; the images through ``preprocess``)."""
    from data_schemas.geometry import preprocessed

    was_training = model.training
    model.eval()
    out = []
    try:
        for i in range(0, len(paths), batch_size):
            ims = preprocessed(preprocess, paths[i:i + batch_size])
            out.append(model.encode_image(torch.stack(ims).to(device)).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, 0)


def neighbour_rows(image_ids: list[int], order: torch.Tensor, sim: torch.Tensor) -> list[dict]:
    """The ``image_neighbours`` rows of ``nearest_neighbours``' result over the images ``image_ids``."""
    return [{"image_id": image_ids[i], "caption_id": None, "rank": r, "neighbour_image_id": image_ids[int(j)],
             "neighbour_caption_id": None, "similarity": float(sim[i, r])}
            for i in range(order.shape[0]) for r, j in enumerate(order[i].tolist())]


def split_images(captions: list[dict], split: str) -> tuple[list[int], list[str]]:
    """(image ids, file names) of the split's images (``None``: every row's), in the order of each image's first
    caption row."""
    seen: dict[int, str] = {}
    for r in captions:
        if split is None or r["split"] == split:
            seen.setdefault(r["image_id"], r["file_name"])
    return list(seen), list(seen.values())


def image_neighbours(cfg: NeighboursConfig, captions: list[dict], image_root: str | Path, model=None) -> list[dict]:
    """The ``image_neighbours`` rows of the split's images under the base model (``model``: an open_clip CLIP
    already built; else ``cfg.arch`` with ``cfg.pretrained``)."""
    import open_clip

    from data_schemas import InputFileError

    from .factory import create_clip, register_model_configs

    ids, files = split_images(captions, cfg.split)
    if len(ids) < 2:
        raise InputFileError(f"image neighbours: split {cfg.split!r} has {len(ids)} image(s); neighbours need 2")
    if model is None:
        register_model_configs()
        model = create_clip(cfg.arch, cfg.pretrained).to(cfg.device)
    pp = getattr(model.visual, "preprocess_cfg", None) or {}
    preprocess = open_clip.image_transform(model.visual.image_size, is_train=False,
                                           **{k: tuple(pp[k]) for k in ("mean", "std") if k in pp})
    feats = image_embeddings(model, preprocess, [Path(image_root) / f for f in files], cfg.batch_size, cfg.device)
    order, sim = nearest_neighbours(feats, cfg.k)
    return neighbour_rows(ids, order, sim)


def write_image_neighbours(rows: list[dict], out: Path, config: dict | None = None) -> dict:
    """The rows as the ``image_neighbours`` table at ``out`` (its manifest entry, as every table writer)."""
    from data_schemas import TABLES, write_table
    from data_schemas.provenance import closure_version

    spec = TABLES["image_neighbours"]
    return write_table(spec, Path(out), spec.from_rows(rows), config=config or {}, code_version=closure_version(__name__))
