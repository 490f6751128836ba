"""The ground stage's inputs read by shard: per shard, only its images' captions, scene graphs and official rows.

Before, the stage read the captions, scene graphs and official tables whole as Python rows (≈ 1 KB a row: 4.3 GB
at COCO size) and grouped them in dicts. Here (``TableInputs``) a pass over a few number columns, one row group at
a time, keeps per image only its id (a sorted NumPy array: the images with a parsed caption, the shard layout);
a shard then reads its rows row group by row group: the key column first (``image_id`` of the captions,
``caption_id`` of the scene graphs and official rows, numbers), and only the row groups holding one of the shard's
keys are decoded, in batches, each filtered to the shard's rows before it becomes Python rows. Row groups rather
than a pyarrow dataset filter: the order of the rows (a caption's concepts, an image's captions, as the tables
hold them) is what the outputs are made from, and a row group's key column is what decides, cheaply, whether the
rest of it must be decoded at all. The rows a shard builds are the rows ``ground_stage`` held before, for its
images, in the same order: outputs are byte-identical.

Time: each shard reads the key columns whole (numbers, 8 bytes a row) and decodes the row groups holding its keys.
The tables are written in shards of the stages before (a part, a row group, per ``shard_size`` captions), so when
an image's captions sit near each other in the captions table (COCO 2014 and Karpathy are read image by image, a
CSV/webdataset source has one caption an image) a shard decodes a few row groups; when they do not, each shard
decodes every row group of the scene graphs once: memory stays one shard's, time grows with shards x rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BATCH = 16_384  # rows decoded at a time within a row group
# the captions columns the stage reads (not the caption text)
CAPTION_COLUMNS = ["caption_id", "image_id", "file_name", "width", "height", "split"]


def _row_groups(files: list[Path]) -> Iterator[tuple[pq.ParquetFile, int]]:
    for f in files:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            yield pf, g


def column(files: list[Path], name: str) -> Iterator[np.ndarray]:
    """One column, a row group at a time, as NumPy arrays (numbers)."""
    for pf, g in _row_groups(files):
        yield pf.read_row_group(g, columns=[name]).column(0).to_numpy()


def rows_where(files: list[Path], key: str, values: np.ndarray, columns: list[str] | None = None) -> list[dict]:
    """The rows (in table order) whose ``key`` is in ``values`` (sorted), the others never made Python rows."""
    out: list[dict] = []
    for pf, g in _row_groups(files):
        keys = pf.read_row_group(g, columns=[key]).column(0).to_numpy()
        hit = _isin_sorted(keys, values)
        if not hit.any():
            continue
        start = 0
        for batch in pf.iter_batches(batch_size=BATCH, row_groups=[g], columns=columns):
            m = hit[start:start + batch.num_rows]
            start += batch.num_rows
            if m.any():
                out.extend(batch.filter(pa.array(m)).to_pylist())
    return out


def _isin_sorted(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    if not len(values):
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(values, keys), len(values) - 1)
    return values[at] == keys


@dataclass
class Unsized:
    """Captions to ground with no image size: how many, and the first (table order)."""
    count: int
    caption_id: int
    image_id: int


class TableInputs:
    """The captions / scene graphs / official tables (their part files, ``data_schemas.table_files``) read by
    shard. ``image_ids``: the images with at least one parsed caption, sorted (what ``ground_stage`` shards)."""

    def __init__(self, captions: list[Path], scene_graphs: list[Path], official: list[Path] | None = None,
                 hashes: object = None):
        self.captions, self.scene_graphs, self.official = captions, scene_graphs, official
        self.hashes = hashes  # the tables' content hashes (the shard fingerprint's inputs without a stage key)
        parsed, grounded = [], []
        for pf, g in _row_groups(scene_graphs):
            t = pf.read_row_group(g, columns=["caption_id", "kind"])
            parsed.append(np.unique(t.column(0).to_numpy()))
            keep = pc.is_in(t.column(1), pa.array(["attribute", "relation"]))
            grounded.append(np.unique(t.column(0).filter(keep).to_numpy()))
        self.parsed = np.unique(np.concatenate(parsed)) if parsed else np.zeros(0, np.int64)
        self.grounded = np.unique(np.concatenate(grounded)) if grounded else np.zeros(0, np.int64)
        images, splits, self.caption_images = [], set(), []
        self.unsized = Unsized(0, 0, 0)
        for pf, g in _row_groups(captions):
            t = pf.read_row_group(g, columns=["caption_id", "image_id", "width", "height", "split"])
            cid, iid = t.column(0).to_numpy(), t.column(1).to_numpy()
            images.append(np.unique(iid[_isin_sorted(cid, self.parsed)]))
            self.caption_images.append(np.unique(iid))
            splits.update(pc.unique(t.column(4)).to_pylist())
            self._count_unsized(cid, iid, t.column(2).to_numpy(), t.column(3).to_numpy())
        self.image_ids = np.unique(np.concatenate(images)) if images else np.zeros(0, np.int64)
        self.caption_images = (np.unique(np.concatenate(self.caption_images)) if self.caption_images
                               else np.zeros(0, np.int64))
        self.splits = sorted(splits)
        self.has_official = official is not None

    def hash_rows(self) -> list:
        """The tables' content hashes: the shard fingerprint's inputs when the caller has no stage key."""
        return [self.hashes]

    def any_image_in(self, image_ids: np.ndarray) -> bool:
        """Whether any image of the captions table is among ``image_ids`` (sorted)."""
        return bool(_isin_sorted(self.caption_images, image_ids).any())

    def _count_unsized(self, cid, iid, width, height) -> None:
        bad = _isin_sorted(cid, self.grounded) & ((width <= 0) | (height <= 0))
        if bad.any():
            if not self.unsized.count:
                k = int(np.argmax(bad))
                self.unsized = Unsized(0, int(cid[k]), int(iid[k]))
            self.unsized.count += int(bad.sum())

    def shard(self, ids: list[int]) -> tuple[dict[int, dict], dict[int, list[dict]], dict[int, dict]]:
        """(images: {image_id: {row, captions}}, scene-graph rows by caption, official rows by caption) of the
        shard's images: ``ground_stage``'s maps, for these images only."""
        caps = rows_where(self.captions, "image_id", np.sort(np.asarray(ids, dtype=np.int64)), CAPTION_COLUMNS)
        cids = np.unique(np.array([c["caption_id"] for c in caps], dtype=np.int64))
        by_caption: dict[int, list[dict]] = {}
        for r in rows_where(self.scene_graphs, "caption_id", cids):
            by_caption.setdefault(r["caption_id"], []).append(r)
        images: dict[int, dict] = {}
        for c in caps:
            if c["caption_id"] in by_caption:
                images.setdefault(c["image_id"], {"row": c, "captions": []})["captions"].append(c)
        official = {r["caption_id"]: r for r in rows_where(self.official, "caption_id", cids)} if self.official else {}
        return images, by_caption, official


class RowInputs:
    """``TableInputs``' interface over rows a caller holds (tests, callers without tables): grouped once."""

    def __init__(self, captions: list[dict], scene_graphs: list[dict], official: list[dict] | None = None):
        self.by_caption: dict[int, list[dict]] = {}
        for r in scene_graphs:
            self.by_caption.setdefault(r["caption_id"], []).append(r)
        self.images: dict[int, dict] = {}
        for c in captions:
            if c["caption_id"] in self.by_caption:
                self.images.setdefault(c["image_id"], {"row": c, "captions": []})["captions"].append(c)
        self.image_ids = sorted(self.images)
        self.scene_graphs = scene_graphs
        self.official = {r["caption_id"]: r for r in official or []}
        self.has_official = official is not None

    def hash_rows(self) -> list:
        """What the shard fingerprint hashed before the tables were read by shard (the rows themselves)."""
        return [[self.images[i]["captions"] for i in self.image_ids], self.scene_graphs]

    def shard(self, ids: list[int]) -> tuple[dict[int, dict], dict[int, list[dict]], dict[int, dict]]:
        return self.images, self.by_caption, self.official
