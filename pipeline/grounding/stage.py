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


def ground_stage(cfg, captions, scene_graphs: list[dict] | None, image_root: str | Path | None,
                 out: Path, *, grounder=None, instances=None, official: list[dict] | None = None,
                 progress=None, only=None, finalize: bool = True, reuse: bool = False,
                 inputs: str | None = None) -> dict[str, dict]:
    """Ground every attribute/relation phrase: ``out/regions`` + ``out/errors`` (sharded by image).

    ``captions``: the tables read by shard (``pipeline.grounding.inputs.TableInputs``; ``scene_graphs`` and
    ``official`` None: it reads them), or rows (with the scene-graph rows and the official rows, if any).
    ``instances``: the annotations backend's boxes (``read_instances``' columns, or {image_id: rows}).
    ``inputs``: a content hash of the captions, scene graphs, instances and images when the caller has one
    (the flow's stage key), else computed from the rows or the tables' hashes; unfinished shards are reused only
    with the same.
    """
    from pipeline.grounding.inputs import RowInputs

    source = captions if scene_graphs is None else RowInputs(captions, scene_graphs, official)
    if cfg.backend == "official" and not source.has_official:
        raise ConfigError("ground.backend 'official' reads the official table of a macco-tsv source "
                          "(data.source: macco-tsv / macco captions --source macco-tsv)")
    work = _ShardWork(cfg, source, image_root, grounder, instances)
    ver = closure_version(*code_roots(cfg.backend))
    if inputs is None:
        inst = instances.fingerprint() if hasattr(instances, "fingerprint") else sorted((instances or {}).items())
        official_rows = sorted(source.official.items()) if isinstance(source, RowInputs) else []
        inputs = content_hash([*source.hash_rows(), inst, official_rows])
    return run_sharded(list(source.image_ids), cfg.shard_size, {"regions": out / "regions", "errors": out / "errors"},
                       work, config=cfg, version=ver, progress=progress, only=only, finalize=finalize, reuse=reuse,
                       inputs=inputs, replaces={"errors": only_stage("ground")})


class _ShardWork:
    """One shard's regions and errors: its rows read from the source, then the grounder (loaded once per call,
    and only if a shard needs work) or the official file's boxes."""

    def __init__(self, cfg, source, image_root, grounder, instances):
        self.cfg, self.source, self.image_root, self.grounder, self.instances = (cfg, source, image_root, grounder,
                                                                                 instances)

    def __call__(self, ids: list[int]) -> dict[str, list[dict]]:
        images, by_caption, by_official = self.source.shard(ids)
        if self.cfg.backend == "official":  # the file's phrase boxes: no model, no image read
            from pipeline.grounding.official import official_regions

            regions, errors = [], []
            for iid in ids:
                r, e = official_regions(images[iid]["row"], images[iid]["captions"], by_caption, by_official)
                regions, errors = regions + r, errors + e
            return {"regions": regions, "errors": errors}
        return self.model_shard(ids, images, by_caption)

    def model_shard(self, ids: list[int], images: dict, by_caption: dict) -> dict[str, list[dict]]:
        from pipeline.grounding import make_grounder
        from pipeline.grounding.base import GroundItem

        if self.grounder is None:
            self.grounder = make_grounder(self.cfg, self.instances)
        grounder, image_root = self.grounder, self.image_root
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


def read_instances(root: str | Path, splits: Iterable[str]):
    """The splits' ``instances_<split>2014.json`` boxes as columns (``InstanceBoxes``, read as a stream); an image
    id in two files is refused."""
    from pipeline.grounding.instances import read_instance_boxes

    return read_instance_boxes(root, splits)
