"""The ``Grounder`` interface, the shared GroundingDINO post-processing, and query-phrase helpers.

A grounder takes a batch of items (one image each, with the object phrases to find in it, e.g.
"small red circle") and returns, per item and phrase, boxes in original-image pixels (xyxy, x2/y2
exclusive) with scores. Post-processing is a pure function of the model outputs, so it is tested on
hand-made logits with known answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol, Sequence

import numpy as np

from data_schemas.config import check_choices, check_ranges, unkeyed


@dataclass
class GroundItem:
    image_id: int
    width: int
    height: int
    phrases: list[str]
    image: object | None = None  # PIL.Image (RGB) for model backends; None for annotations


@dataclass(frozen=True)
class Box:
    xyxy: tuple[float, float, float, float]
    score: float
    label: str


Backend = Literal["annotations", "groundingdino", "hf", "official"]  # official: MACCO's file (no model)


@dataclass
class GroundingConfig:
    backend: Backend = "annotations"  # pipeline.grounding.BACKENDS: each one's module and class
    box_threshold: float = 0.35  # GroundingDINO demo defaults
    text_threshold: float = 0.25
    checkpoint: str | None = None  # groundingdino: .pth
    config_file: str | None = None  # groundingdino: model config .py
    bert_dir: str | None = None  # groundingdino: local BERT directory (text encoder + tokenizer)
    model_dir: str | None = None  # hf: save_pretrained directory
    device: str = unkeyed("cpu")  # unkeyed: where and how the work runs (the key, the shard fingerprint)
    half: bool = True  # fp16 autocast on CUDA
    batch_size: int = unkeyed(8)
    max_boxes_per_phrase: int = 5
    shard_size: int = unkeyed(500)  # images per shard (one Parquet part each; the flow maps shards over workers)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choices(self, "ground")
        check_ranges(self, "ground", positive=("batch_size", "max_boxes_per_phrase", "shard_size"),
                     probability=("box_threshold", "text_threshold"))


class Grounder(Protocol):
    name: str
    needs_images: bool

    def ground(self, items: Sequence[GroundItem]) -> list[list[list[Box]]]:
        """For each item, for each of its phrases, the boxes found (possibly none)."""


def build_prompt(phrases: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """GroundingDINO prompt "a . b ." (lowercased) and each phrase's character span in it."""
    spans, parts, pos = [], [], 0
    for p in phrases:
        p = " ".join(p.lower().replace(".", " ").split())
        spans.append((pos, pos + len(p)))
        parts.append(p + " .")
        pos += len(p) + 3
    return " ".join(parts), spans


def phrase_token_indices(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Token positions (from a tokenizer's offset mapping) inside each phrase's character span."""
    out = []
    for s, e in spans:
        out.append([t for t, (a, b) in enumerate(offsets) if b > a and a >= s and b <= e])
    return out


def select_boxes(probs: np.ndarray, boxes_cxcywh: np.ndarray, phrase_tokens: Sequence[Sequence[int]],
                 labels: Sequence[str], box_threshold: float, text_threshold: float, width: int, height: int,
                 max_per_phrase: int | None = None) -> list[list[Box]]:
    """Attribute each query box to the phrase whose tokens it matches best.

    probs: (n_queries, n_tokens) sigmoid token scores; boxes: (n_queries, 4) normalised cx, cy, w, h.
    A query is kept when its best token score over all phrase tokens exceeds ``box_threshold``; it goes to the
    phrase with the highest max-token score if that exceeds ``text_threshold``. Boxes are clipped to the
    image; a box with no area left is dropped. Per phrase, boxes are sorted by score (top ``max_per_phrase``).
    """
    probs = np.asarray(probs, dtype=np.float64)
    boxes = np.asarray(boxes_cxcywh, dtype=np.float64)
    if probs.ndim != 2 or boxes.shape != (probs.shape[0], 4):
        raise ValueError(f"expected probs (Q, T) and boxes (Q, 4), got {probs.shape} and {boxes.shape}")
    out: list[list[Box]] = [[] for _ in phrase_tokens]
    valid = [k for k, t in enumerate(phrase_tokens) if len(t)]
    if not valid:
        return out
    per_phrase = np.stack([probs[:, list(phrase_tokens[k])].max(axis=1) for k in valid], axis=1)  # (Q, P)
    best = per_phrase.max(axis=1)
    which = per_phrase.argmax(axis=1)
    for q in np.nonzero(best > box_threshold)[0]:
        if per_phrase[q, which[q]] <= text_threshold:
            continue
        cx, cy, w, h = boxes[q]
        x1, y1 = max((cx - w / 2) * width, 0.0), max((cy - h / 2) * height, 0.0)
        x2, y2 = min((cx + w / 2) * width, float(width)), min((cy + h / 2) * height, float(height))
        if x2 <= x1 or y2 <= y1:
            continue
        k = valid[which[q]]
        out[k].append(Box((float(x1), float(y1), float(x2), float(y2)), float(best[q]), labels[k]))
    for k in range(len(out)):
        out[k].sort(key=lambda b: -b.score)
        if max_per_phrase:
            out[k] = out[k][:max_per_phrase]
    return out


def size_batches(items: Sequence[GroundItem], batch_size: int) -> list[list[int]]:
    """Item indices in batches of images of equal or near shape (sorted by aspect ratio, then size).

    Detection models pad a batch to its largest height and width; a portrait next to a landscape COCO image
    wastes a third of the batch on padding and changes border features. Results go back in input order.
    """
    order = sorted(range(len(items)), key=lambda i: (round(items[i].width / max(items[i].height, 1), 2),
                                                      items[i].width * items[i].height, i))
    return [order[k:k + batch_size] for k in range(0, len(order), max(batch_size, 1))]


def ground_in_batches(items: Sequence[GroundItem], cfg: GroundingConfig,
                      forward: Callable[[list[GroundItem], list[str]], tuple[np.ndarray, np.ndarray]],
                      tokenizer) -> list[list[list[Box]]]:
    """The model backends' shared loop: ``size_batches``, one prompt per image, ``forward(batch, prompts)`` ->
    (sigmoid token scores [B, Q, T], boxes [B, Q, 4]), then ``select_boxes`` per image with the phrase tokens
    found through ``tokenizer``'s offsets. Results in input order."""
    results: list[list[list[Box]]] = [[] for _ in items]
    for idx in size_batches(items, cfg.batch_size):
        batch = [items[i] for i in idx]
        prompts, spans = zip(*(build_prompt(it.phrases) for it in batch))
        probs, boxes = forward(batch, list(prompts))
        for b, it in enumerate(batch):
            offsets = tokenizer(prompts[b], return_offsets_mapping=True)["offset_mapping"]
            results[idx[b]] = select_boxes(probs[b], boxes[b], phrase_token_indices(offsets, spans[b]), it.phrases,
                                           cfg.box_threshold, cfg.text_threshold, it.width, it.height,
                                           cfg.max_boxes_per_phrase)
    return results
