"""The data stages' records: world, captions, tokenizer, parse, ground, masks — each the adapter between a ``Call``
(typed section, the catalog of what it reads, an output folder) and its pure stage function in ``pipeline/``, with
the stage's input checks, so the flow and the ``macco`` verb of a stage check and do the same. No Prefect."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from data_schemas import InputFileError, temp_name
from flows.catalog import table_entry
from pipeline.captions_stage import CaptionsConfig
from pipeline.grounding.base import GroundingConfig
from pipeline.masks_stage import MasksConfig
from pipeline.parse_stage import ParseConfig
from pipeline.siglip_folder import TokenizerConfig
from pipeline.world import WorldConfig
from flows.stage import Call, Stage, folder_key, packages, roots, weights_key

FILE_LIST = "files.json"  # a stage's many files and their sizes (the world), checked by the done rule


def _tables(manifests: dict[str, dict], out: Path) -> dict:
    return {name: table_entry(m, out / name) for name, m in manifests.items()}


# ---- world (the embedded default's data) ---------------------------------------------------------------------
def _world_sets(section) -> dict[str, str] | None:
    """The benchmark registry's sets in the world (benchmark -> set), when it writes them: handed to the world's
    generator, and in its key (a set declared for one more benchmark is a new world)."""
    from model.benchmarks.registry import world_sets

    return world_sets() if section.benchmarks else None


def _world(call: Call) -> dict:
    """The synthetic world into ``call.out`` (generated beside it, then swapped in: a killed run leaves no half
    world); an existing folder is replaced only if it is a world (or empty), never a user's other files."""
    from pipeline.shards import tree_hash
    from pipeline.world import generate_world

    out = call.out
    if out.exists() and (not out.is_dir() or any(out.iterdir()) and not (out / "world.json").is_file()):
        raise InputFileError(f"{out}: exists and is not a synthetic world (no world.json); refusing to replace it: "
                             "give a new or empty folder")
    tmp = temp_name(out)
    summary = generate_world(tmp, call.section, _world_sets(call.section))
    # every file the world holds (images, annotations, benchmark sets) with its size, listed beside its manifest:
    # a deleted or resized one makes the world not done, so it is regenerated, not served Cached
    content = tree_hash(tmp)
    listing = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / FILE_LIST).write_text(json.dumps(listing, sort_keys=True))
    if out.exists():
        trash = temp_name(out)
        out.replace(trash)
        tmp.replace(out)
        shutil.rmtree(trash)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(out)
    call.log(f"world: { {s: v['images'] for s, v in summary['splits'].items()} } images in {out}")
    return {"summary": summary, "file_list": FILE_LIST,
            "outputs": {"source": {"kind": "folder", "dir": str(out), "content_hash": content}}}


# ---- captions --------------------------------------------------------------------------------------------------
def _captions(call: Call) -> dict:
    """The captions table of the data section (the world's folder when the data is the synthetic world); its
    ``images`` output is the image root every later stage reads."""
    from pipeline.captions_stage import captions_image_root, captions_stage

    cfg = call.section
    if cfg.source == "coco" and cfg.root is None:  # the synthetic world: the world stage's folder
        cfg = dataclasses.replace(cfg, root=call.inputs.entry("source")["dir"])
    call.out.mkdir(parents=True, exist_ok=True)
    m = captions_stage(cfg, call.out)
    reasons = m["captions"].get("summary", {}).get("error_reasons", {})
    call.log(f"captions ({cfg.source}): {m['captions']['rows']} rows, {sum(reasons.values())} errors "
             f"{reasons or ''}".rstrip())
    outputs = _tables(m, call.out)
    outputs["captions"]["source"] = cfg.source
    outputs["images"] = {"kind": "images", "dir": captions_image_root(cfg, call.out),
                         "instances": str(Path(cfg.root).resolve()) if cfg.source == "coco" else None,
                         "content_hash": call.inputs.hash("source?")}
    return {"outputs": outputs, "summary": m["captions"].get("summary", {})}


def _source_entry(name: str, cfg) -> dict:
    """A user's data as the ``source`` the captions stage reads when no world stage made one: what it holds
    (``source_fingerprint``)."""
    from flows.config import key_of
    from pipeline.captions_stage import source_fingerprint

    return {"kind": "data", "dir": None, "content_hash": key_of(source_fingerprint(cfg.data))}


# ---- tokenizer (a SigLIP model folder from the training captions; only with tokenizer.arch) ---------------------
def _tokenizer(call: Call) -> dict:
    from model.factory import CONFIG_DIR
    from pipeline.shards import tree_hash
    from pipeline.siglip_folder import build_siglip_folder

    t = call.section
    arch_file = CONFIG_DIR / f"{t.arch}.json"
    if not arch_file.is_file():
        raise InputFileError(f"tokenizer.arch {t.arch!r}: not one of the repo's architectures "
                             f"({sorted(p.stem for p in CONFIG_DIR.glob('*.json'))})")
    train = [r["caption"] for r in call.inputs.rows("captions") if r["split"] == "train"]
    folder = build_siglip_folder(train, call.out / "model", json.loads(arch_file.read_text()), t.context_length,
                                 t.vocab_size, t.clean)
    call.log(f"tokenizer: {folder} from {len(train)} training captions")
    return {"captions": len(train), "files": [str(call.out / "model" / "open_clip_config.json")],
            "outputs": {"tokenizer": {"kind": "folder", "dir": str(call.out / "model"), "folder": folder,
                                      "content_hash": tree_hash(call.out / "model")}}}


def _use_folder(cfg, manifest: dict):
    """The later stages read the model folder the tokenizer stage built (``built:tokenizer`` replaced by it)."""
    from flows.config import use_built_folder

    return use_built_folder(cfg, manifest["outputs"]["tokenizer"]["folder"])


def _arch_json(section) -> list:
    """The architecture's config file content (part of the tokenizer stage's key)."""
    from model.factory import CONFIG_DIR

    path = CONFIG_DIR / f"{section.arch}.json"
    return [path.read_text() if path.is_file() else None]


# ---- parse (mapped over shards of captions) --------------------------------------------------------------------
def _parse_tables(call: Call, **kw) -> dict:
    from pipeline.parse_stage import parse_stage

    cfg = call.section
    official = None
    if cfg.parser == "official":
        if not call.inputs.has("official"):
            raise InputFileError("parse.parser 'official' reads the official table of a macco-tsv source (data.source: "
                                 "macco-tsv / macco captions FILE --source macco-tsv --out FOLDER)")
        official = call.inputs.rows("official")
    # content-keyed output (the flow): a complete output is kept; a verb's folder is rewritten
    return parse_stage(cfg, call.inputs.rows("captions"), call.out, reuse=bool(call.key),
                       inputs=call.inputs.hash("captions") if call.key else None, official=official,
                       progress=call.progress, **kw)


def _parse(call: Call) -> dict:
    m = _parse_tables(call, **({"only": []} if call.mapped else {}))
    call.log(f"parse: { {n: v['rows'] for n, v in m.items()} }")
    return {"outputs": _tables(m, call.out)}


def _parse_shards(call: Call) -> int:
    from pipeline.shards import n_shards_for

    return n_shards_for(call.inputs.count("captions"), call.section.shard_size)


# ---- ground (mapped over shards of images) ---------------------------------------------------------------------
def _table_inputs(call: Call):
    """The captions, scene graphs (and, for the official backend, official) tables as the ground stage reads them:
    by shard."""
    from data_schemas import TABLES, table_files
    from pipeline.grounding.inputs import TableInputs

    cat = call.inputs
    official = call.section.backend == "official" and cat.has("official")
    return TableInputs(*(table_files(TABLES[n], cat.dir(n)) for n in ("captions", "scene_graphs")),
                       table_files(TABLES["official"], cat.dir("official")) if official else None,
                       hashes=cat.hashes(("captions", "scene_graphs", "official?")))


def ground_inputs(call: Call):
    """(the tables read by shard, instances) the ground stage reads, after its input checks: every caption to
    ground has an image size; the annotations backend has COCO instance files holding these images."""
    from pipeline.grounding.stage import read_instances

    cfg, cat = call.section, call.inputs
    source = _table_inputs(call)
    if source.unsized.count:
        u = source.unsized
        raise InputFileError(f"{u.count} captions to ground have no image size (width/height 0 in "
                             f"{cat.dir('captions')}; e.g. caption {u.caption_id}, image {u.image_id}): read "
                             "them with their images (macco parse --images ROOT, with file_name in the JSONL)")
    instances = None
    if cfg.backend == "annotations":
        root = cat.get("images", "instances")
        if root is None:
            raise InputFileError("the annotations backend reads COCO instance boxes (annotations/instances_<split>"
                                 "2014.json): data.source coco, or macco ground --instances ROOT; for other data use "
                                 "backend groundingdino or hf")
        instances = read_instances(root, source.splits)
        n = len(source.caption_images)
        if n and not source.any_image_in(instances.images):
            raise InputFileError(f"none of the {n} images of {cat.dir('captions')} "
                                 f"is in the instances files under {root}: the annotations backend reads COCO instance "
                                 "boxes for COCO captions; for other data use backend groundingdino or hf")
    if cfg.backend == "official" and not source.has_official:
        raise InputFileError("ground.backend 'official' reads the official table of a macco-tsv source (data.source"
                             ": macco-tsv / macco captions FILE --source macco-tsv --out FOLDER)")
    return source, instances


def _ground_tables(call: Call, **kw) -> dict:
    from pipeline.grounding.stage import ground_stage

    source, instances = ground_inputs(call)
    # the flow's key covers the captions, the scene graphs, the images and instances and the weights
    return ground_stage(call.section, source, None, call.inputs.image_root, call.out, instances=instances,
                        reuse=bool(call.key), inputs=call.key or None, progress=call.progress, **kw)


def _ground(call: Call) -> dict:
    m = _ground_tables(call, **({"only": []} if call.mapped else {}))
    call.log(f"ground: {m['regions']['rows']} regions, {m['errors']['rows']} errors")
    return {"outputs": _tables(m, call.out)}


def _ground_shards(call: Call) -> int:
    """Shards of the images with at least one parsed caption (what ground_stage grounds)."""
    from pipeline.shards import n_shards_for

    return n_shards_for(len(_table_inputs(call).image_ids), call.section.shard_size)


def _ground_code(section) -> tuple[str, ...]:
    from pipeline.grounding.stage import code_roots

    return code_roots(section.backend)


def _ground_packages(section) -> tuple[str, ...]:
    """The distributions a backend calls (the file-reading backends none but the image reader and the tables'
    readers)."""
    model = {"groundingdino": ("torch", "transformers", "groundingdino-py"), "hf": ("torch", "transformers")}
    return ("Pillow", "numpy", "pyarrow", *model.get(section.backend, ()))


def _grounding_weights(section) -> list:
    """The grounding weights' sha256 (a file) or path (a model directory)."""
    return [[weights_key(w) for w in (section.checkpoint, section.model_dir) if w]]


# ---- patch masks -------------------------------------------------------------------------------------------------
def _masks(call: Call) -> dict:
    from pipeline.masks_stage import masks_stage

    m = masks_stage(call.section, call.inputs.iter_rows("captions", ["caption_id", "image_id", "width", "height"]),
                    call.inputs.iter_rows("regions", ["caption_id", "concept_id", "box_id", "box_xyxy"]), call.out)
    return {"outputs": _tables(m, call.out)}


STAGES = (
    Stage("world", "world", (), ("source",), roots("pipeline.world"), _world, when=lambda cfg: cfg.world_run,
          extras=lambda section: [_world_sets(section)], packages=packages("Pillow"), config=WorldConfig),
    Stage("captions", "data", ("source",), ("captions", "official", "negative_captions", "image_neighbours", "images",
                                            "errors"),
          roots("pipeline.captions_stage"), _captions, given=_source_entry, config=CaptionsConfig,
          packages=packages("Pillow", "webdataset")),
    Stage("tokenizer", "tokenizer", ("captions",), ("tokenizer",), roots("pipeline.siglip_folder"), _tokenizer,
          extras=_arch_json, when=lambda cfg: cfg.tokenizer.arch is not None, feeds=_use_folder,
          config=TokenizerConfig, packages=packages("tokenizers", "transformers")),
    # a local-dir tokenizer's files (the tokenizer stage's folder, or the user's) are in its extras
    Stage("parse", "parse", ("captions", "official?", "tokenizer?"), ("scene_graphs", "token_masks", "errors"),
          roots("pipeline.parse_stage"), _parse, shards=_parse_shards,
          run_shard=lambda call, i: _parse_tables(call, only=[i], finalize=False),
          extras=lambda section: folder_key(section.clip_model), config=ParseConfig, packages=lambda section: (
              "spacy", section.spacy_model, "open_clip_torch", "transformers",
              *(("SceneGraphParser",) if section.parser == "sng" else ()))),
    Stage("ground", "ground", ("captions", "scene_graphs", "images", "official?"), ("regions", "errors"), _ground_code,
          _ground, shards=_ground_shards, run_shard=lambda call, i: _ground_tables(call, only=[i], finalize=False),
          extras=_grounding_weights, packages=_ground_packages, config=GroundingConfig),
    Stage("masks", "masks", ("captions", "regions"), ("patch_masks", "errors"), roots("pipeline.masks_stage"), _masks,
          extras=lambda section: [k for m in section.models for k in folder_key(m)], packages=packages("numpy"),
          config=MasksConfig),
)
