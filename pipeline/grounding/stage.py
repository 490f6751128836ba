"""The ground stage: every attribute/relation phrase of the captions' scene graphs grounded to boxes, sharded by
image (``regions`` + ``errors``); the images checked against the captions table's sizes, a failing image an error
row, the model checked on a plain image before a whole shard's failure is blamed on it."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from data_schemas.config import ConfigError
from data_schemas.errors import error_row
from data_schemas.provenance import closure_version
from pipeline.grounding.plan import plan_queries, regions_from_boxes
from pipeline.shards import content_hash, only_stage, run_sharded


def code_roots(backend: str) -> tuple[str, ...]:
    """The ground stage's code roots: this module and the backend's (loaded by name, so not in this module's
    import closure); its code version is their closure's (``data_schemas.provenance.closure_version``)."""
    from pipeline.grounding import backend_module

    return (__name__, backend_module(backend))


def ground_stage(cfg, captions: list[dict], scene_graphs: list[dict], image_root: str | Path | None,
                 out: Path, *, grounder=None, instances: dict | None = None, official: list[dict] | None = None,
                 progress=None, only=None, finalize: bool = True, reuse: bool = False,
                 inputs: str | None = None) -> dict[str, dict]:
    """Ground every attribute/relation phrase: ``out/regions`` + ``out/errors`` (sharded by image).

    ``inputs``: a content hash of the captions, scene graphs, instances and images when the caller has one
    (the flow's stage key), else computed from the rows; unfinished shards are reused only with the same.
    """
    from pipeline.grounding import make_grounder
    from pipeline.grounding.base import GroundItem

    loaded = {"g": grounder}
    by_caption: dict[int, list[dict]] = {}
    for r in scene_graphs:
        by_caption.setdefault(r["caption_id"], []).append(r)
    images: dict[int, dict] = {}
    for c in captions:
        if c["caption_id"] in by_caption:
            images.setdefault(c["image_id"], {"row": c, "captions": []})["captions"].append(c)
    image_ids = sorted(images)

    if cfg.backend == "official" and official is None:
        raise ConfigError("ground.backend 'official' reads the official table of a macco-tsv source "
                          "(data.source: macco-tsv / macco captions --source macco-tsv)")
    by_official = {r["caption_id"]: r for r in official or []}

    def shard(ids: list[int]) -> dict[str, list[dict]]:
        if cfg.backend == "official":  # the file's phrase boxes: no model, no image read
            from pipeline.grounding.official import official_regions

            regions, errors = [], []
            for iid in ids:
                r, e = official_regions(images[iid]["row"], images[iid]["captions"], by_caption, by_official)
                regions, errors = regions + r, errors + e
            return {"regions": regions, "errors": errors}
        if loaded["g"] is None:  # the model loads once per call, and only if a shard needs work
            loaded["g"] = make_grounder(cfg, instances)
        grounder = loaded["g"]
        regions, errors, items, plans = [], [], [], []
        for iid in ids:
            row = images[iid]["row"]
            per_caption, phrases = plan_queries(images[iid]["captions"], by_caption)
            if not phrases:
                continue
            image = None
            if image_root is not None:  # the image as displayed must be the size the annotation says
                image, problem = _open_checked(Path(image_root) / row["file_name"], row, grounder.needs_images)
                if problem is not None:
                    errors.append(error_row("ground", f"image:{iid}", *problem))
                    continue
            elif grounder.needs_images:
                raise ValueError(f"the {grounder.name} grounding backend reads images: pass the image root")
            items.append(GroundItem(iid, row["width"], row["height"], list(phrases), image))
            plans.append((row, per_caption, phrases))
        for (row, per_caption, phrases), boxes in zip(plans, _ground_each(grounder, items, errors)):
            if boxes is not None:  # None: this image failed in the grounder, an error row already says why
                r, e = regions_from_boxes(row, per_caption, phrases, boxes, by_caption, grounder.name)
                regions += r
                errors += e
        return {"regions": regions, "errors": errors}

    ver = closure_version(*code_roots(cfg.backend))
    if inputs is None:
        inputs = content_hash([[images[i]["captions"] for i in image_ids], scene_graphs,
                               sorted((instances or {}).items()), sorted(by_official.items())])
    return run_sharded(image_ids, cfg.shard_size, {"regions": out / "regions", "errors": out / "errors"}, shard,
                       config=cfg, version=ver, progress=progress, only=only, finalize=finalize, reuse=reuse,
                       inputs=inputs, replaces={"errors": only_stage("ground")})


def _open_checked(path: Path, row: dict, load: bool):
    """(the RGB image as displayed if ``load``, None) or (None, (reason, message)) for an unreadable image or
    one whose displayed size is not the annotation's width x height."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    from data_schemas.geometry import displayed_size, to_rgb

    try:
        with Image.open(path) as im:
            size = displayed_size(im)
            if size != (row["width"], row["height"]):
                return None, ("image_size_mismatch", f"{path}: image is {size[0]}x{size[1]} (EXIF orientation "
                                                     f"applied), the captions table says {row['width']}x"
                                                     f"{row['height']}")
            return (to_rgb(ImageOps.exif_transpose(im)) if load else None), None
    except Image.DecompressionBombError as exc:
        from pipeline.images import too_large

        problem = too_large(path, exc)
        return None, (problem.reason, str(problem))
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        return None, ("unreadable_image", f"{path}: {exc}")


def _ground_each(grounder, items: list, errors: list) -> list:
    """The grounder over a shard's items; if the batch fails, item by item, each failure an error row (None in
    its place). When every item fails, the model is tried on a plain 256 x 256 grey image with the same phrases:
    if that works the items are bad (error rows: e.g. a lone 1 x 1 image), if it fails too the model is broken
    and the first failure is raised."""
    if not items:
        return []
    errs = (RuntimeError, ValueError, IndexError, TypeError, OSError)
    try:
        return grounder.ground(items)
    except errs as batch_exc:
        found, failed = [], []
        for it in items:
            try:
                found.append(grounder.ground([it])[0])
            except errs as exc:
                found.append(None)
                failed.append(error_row("ground", f"image:{it.image_id}", "grounding_failed",
                                        f"image {it.image_id} ({it.width}x{it.height}): {type(exc).__name__}: {exc}"))
        if len(failed) == len(items) and not _grounder_works(grounder, items[0]):
            raise batch_exc
        errors.extend(failed)
        return found


def _grounder_works(grounder, like) -> bool:
    """Whether ``grounder`` grounds a plain 256 x 256 grey image with ``like``'s phrases (a model check)."""
    from PIL import Image

    from pipeline.grounding.base import GroundItem

    probe = GroundItem(-1, 256, 256, list(like.phrases),
                       Image.new("RGB", (256, 256), (128, 128, 128)) if like.image is not None else None)
    try:
        grounder.ground([probe])
    except (RuntimeError, ValueError, IndexError, TypeError, OSError):
        return False
    return True


def read_instances(root: str | Path, splits: Iterable[str]) -> dict[int, list[dict]]:
    """{image_id: its boxes} of the splits' ``instances_<split>2014.json``; an image id in two files is refused."""
    from pipeline.captions import check_ids_across_files, read_coco_instances

    out: dict[int, list[dict]] = {}
    owner: dict[int, Path] = {}
    for split in splits:
        path = Path(root) / "annotations" / f"instances_{split}2014.json"
        found = read_coco_instances(path)
        check_ids_across_files(owner, found, path, "image id")
        out.update(found)
    return out

