"""The preprocessing DAG as data: one ``Stage`` record per step (what it reads, which config section and code
make its key, its work), wired by name in ``PREPROCESSING``; the flow runs them through one generic cached task.

A stage's output lives in ``artifacts/<stage>/<key>/`` with a ``stage.json`` manifest. The key hashes the
content hashes of the manifests it reads, its config section, the source of its code modules and any
``extra_key`` (model weights); so a changed input, setting or code line is never a cache hit. Whether a stage is
done is decided in one place, ``stage_done`` (the manifest exists and every table and file it lists is
complete); the Prefect cache uses the same key, and a shard's fingerprint only lets an unfinished stage resume
its finished shards.
"""
from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from data_schemas import is_complete
from data_schemas.config import from_dict
from flows.catalog import Catalog
from pipeline.stages import tree_hash

STAGE_FILE = "stage.json"
FILE_LIST = "files.json"  # a stage's many files and their sizes (the world), checked by stage_done


@dataclass(frozen=True)
class Stage:
    """One step of the DAG. ``run(cat, cfg, out, key)`` does the work under ``out`` from the tables of its inputs
    (``cat``: a ``flows.catalog.Catalog`` of their manifests) and returns the manifest's fields (``content_hash``
    among them); a mapped stage also has ``shards(cat, cfg)`` (how many) and ``run_shard(cat, cfg, out, key,
    shard)``, each shard a task of its own, before ``run`` publishes."""
    name: str
    inputs: tuple[str, ...]  # the upstream stages it reads, by name ("source": the data's fingerprint)
    section: str  # the flow config section that configures it
    code: Callable[[dict], tuple[str, ...]]  # section -> the modules whose source is its code version
    run: Callable[[Catalog, dict, Path, str], dict]  # (its inputs' catalog, section, output dir, key)
    shards: Callable[[Catalog, dict], int] | None = None
    run_shard: Callable[[Catalog, dict, Path, str, int], None] | None = None
    extra_key: Callable[[dict], list] | None = None  # section -> more key parts (e.g. weights' sha256)
    when: Callable[[dict], bool] | None = None  # section -> whether the stage runs at all (None: always)


# ---- manifests --------------------------------------------------------------------------------------------
def stage_done(d: str | Path) -> bool:
    """The one rule for "already done": ``stage.json`` exists and every table and file it lists is complete (a
    table: its parts as written, ``data_schemas.is_complete``; a file: present with the size it had when the
    stage finished)."""
    p = Path(d) / STAGE_FILE
    if not p.exists():
        return False
    m = json.loads(p.read_text())
    sizes = m.get("file_bytes", {})
    if "file_list" in m:  # a stage of many files (the world's images) lists them beside stage.json
        listed = Path(d) / m["file_list"]
        if not listed.is_file():
            return False
        sizes = {str(Path(d) / f): n for f, n in json.loads(listed.read_text()).items()}
    return all(is_complete(t["dir"]) for t in m.get("tables", {}).values()) and \
        all(_file_as_written(f, sizes.get(f)) for f in [*m.get("files", []), *sizes])


def _file_as_written(path: str, size: int | None) -> bool:
    """The file exists and, where its size was recorded, still has it."""
    try:
        st = Path(path).stat()
    except OSError:  # missing
        return False
    return size is None or st.st_size == size


def write_stage(d: Path, manifest: dict) -> dict:
    """Write ``stage.json`` atomically; the size of every file it lists is recorded (``file_bytes``) for
    ``stage_done``."""
    if manifest.get("files"):
        manifest = {**manifest, "file_bytes": {f: Path(f).stat().st_size for f in manifest["files"]}}
    tmp = d / f".{STAGE_FILE}.{uuid.uuid4().hex}"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    tmp.replace(d / STAGE_FILE)
    return manifest


def read_stage(d: str | Path) -> dict:
    return json.loads((Path(d) / STAGE_FILE).read_text())


def tables_of(manifests: dict[str, dict], base: Path) -> dict:
    """{table: {dir, content_hash, rows}} for the tables a stage wrote under ``base``."""
    return {n: {"dir": str(base / n), "content_hash": m["content_hash"], "rows": m["rows"]}
            for n, m in manifests.items()}


def stage_key(stage: Stage, manifests: dict[str, dict], cfg: dict) -> str:
    """The content key of ``stage``'s output directory (and of its Prefect cache record)."""
    from flows.config import key_of
    from pipeline.stages import code_version

    section = cfg[stage.section]
    extra = stage.extra_key(section) if stage.extra_key else []
    return key_of(stage.name, [manifests[i]["content_hash"] for i in stage.inputs], section,
                  code_version(*stage.code(section)), *extra)


def folder_key(model: str) -> list:
    """A ``local-dir:`` model folder's content (each file's name and sha256: the tokenizer, the config, the
    weights) as key parts; nothing for an architecture name (its code is in the code version)."""
    if not model.startswith("local-dir:"):
        return []
    from model.export import file_sha256

    folder = Path(model.removeprefix("local-dir:"))
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: the local-dir model folder does not exist")
    return [[(f.name, file_sha256(f)) for f in sorted(folder.iterdir()) if f.is_file()]]


def _logger():
    from prefect import get_run_logger

    return get_run_logger()


# ---- world (the embedded default's data) ------------------------------------------------------------------
def _world(cat: Catalog, cfg: dict, out: Path, key: str) -> dict:
    from pipeline.world import WorldConfig, generate_world

    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex}")  # a killed run leaves no half world at out
    summary = generate_world(tmp, from_dict(WorldConfig, cfg, "world"))
    tmp.mkdir(parents=True, exist_ok=True)
    content = tree_hash(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.replace(out)
    _logger().info("world: %s", {s: v["images"] for s, v in summary["splits"].items()})
    # every file the world holds (images, annotations, benchmark sets) with its size, listed beside stage.json:
    # a deleted or resized one makes the world not done (stage_done), so it is regenerated, not served Cached
    listing = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    (out / FILE_LIST).write_text(json.dumps(listing, sort_keys=True))
    return {"content_hash": content, "summary": summary, "file_list": FILE_LIST}


# ---- captions ---------------------------------------------------------------------------------------------
def _captions(cat: Catalog, cfg: dict, out: Path, key: str) -> dict:
    """The captions table of the data section (the world's root when the data is the synthetic world); the
    manifest's ``root`` is the image root every later stage reads."""
    from pipeline.stages import CaptionsConfig, captions_image_root, captions_stage

    data = {**cfg, "root": cfg["root"] or cat.get("source", "dir")} if cfg["source"] == "coco" else cfg
    c = from_dict(CaptionsConfig, data, "data")
    out.mkdir(parents=True, exist_ok=True)
    m = captions_stage(c, out)
    _logger().info("captions (%s): %d rows, %d errors %s", c.source, m["captions"]["rows"], m["errors"]["rows"],
                   m["captions"].get("summary", {}).get("error_reasons", {}))
    content = m["captions"]["content_hash"] + (m["official"]["content_hash"] if "official" in m else "")
    return {"source": c.source, "root": captions_image_root(c, out), "tables": tables_of(m, out),
            "content_hash": content, "summary": m["captions"].get("summary", {})}


# ---- tokenizer (a SigLIP model folder from the training captions; only with tokenizer.arch) ----------------
def _tokenizer(cat: Catalog, cfg: dict, out: Path, key: str) -> dict:
    from model import CONFIG_DIR
    from pipeline.siglip_folder import TokenizerConfig, build_siglip_folder

    t = from_dict(TokenizerConfig, cfg, "tokenizer")
    arch_file = CONFIG_DIR / f"{t.arch}.json"
    if not arch_file.is_file():
        raise ValueError(f"tokenizer.arch {t.arch!r}: not one of the repo's architectures "
                         f"({sorted(p.stem for p in CONFIG_DIR.glob('*.json'))})")
    train = [r["caption"] for r in cat.rows("captions") if r["split"] == "train"]
    folder = build_siglip_folder(train, out / "model", json.loads(arch_file.read_text()), t.context_length,
                                 t.vocab_size, t.clean)
    _logger().info("tokenizer: %s from %d training captions", folder, len(train))
    return {"folder": folder, "captions": len(train), "content_hash": tree_hash(out / "model"),
            "files": [str(out / "model" / "open_clip_config.json")]}


def _arch_json(section: dict) -> list:
    """The architecture's config file content (part of the tokenizer stage's key)."""
    from model import CONFIG_DIR

    path = CONFIG_DIR / f"{section['arch']}.json"
    return [path.read_text() if path.is_file() else None]


# ---- parse (mapped over shards of captions) ---------------------------------------------------------------
def _parse_stage(cat: Catalog, cfg: dict, out: Path, **kw) -> dict:
    from pipeline.stages import ParseConfig, parse_stage

    pcfg = from_dict(ParseConfig, cfg, "parse")
    official = cat.rows("official") if pcfg.parser == "official" else None
    return parse_stage(pcfg, cat.rows("captions"), out, reuse=True, inputs=cat.hash("captions"), official=official,
                       **kw)


def _parse_shard(cat: Catalog, cfg: dict, out: Path, key: str, shard: int) -> None:
    _parse_stage(cat, cfg, out, only=[shard], finalize=False)


def _parse(cat: Catalog, cfg: dict, out: Path, key: str) -> dict:
    m = _parse_stage(cat, cfg, out, only=[])
    _logger().info("parse: %s", {n: v["rows"] for n, v in m.items()})
    return {"tables": tables_of(m, out),
            "content_hash": m["scene_graphs"]["content_hash"] + m["token_masks"]["content_hash"]}


def _parse_shards(cat: Catalog, cfg: dict) -> int:
    from pipeline.stages import n_shards_for

    return n_shards_for(cat.count("captions"), cfg["shard_size"])


# ---- ground (mapped over shards of images) ----------------------------------------------------------------
def _ground_stage(cat: Catalog, cfg: dict, out: Path, key: str, **kw) -> dict:
    from pipeline.grounding.base import GroundingConfig
    from pipeline.stages import ground_stage, read_instances

    caps, sg = cat.rows("captions"), cat.rows("scene_graphs")
    gcfg = from_dict(GroundingConfig, cfg, "ground")
    instances = None
    if gcfg.backend == "annotations":
        source = cat.get("captions", "source", "coco")
        if source != "coco":
            raise ValueError(f"ground.backend 'annotations' reads COCO instances files: it works with data.source "
                             f"coco only (this run: {source!r}); use backend groundingdino or hf")
        instances = read_instances(cat.root, sorted({c["split"] for c in caps}))
    official = cat.rows("official") if gcfg.backend == "official" else None
    # the key covers the captions, the scene graphs, the images and instances (source) and the weights
    return ground_stage(gcfg, caps, sg, cat.root, out, instances=instances, official=official, reuse=True,
                        inputs=key, **kw)


def _ground_shard(cat: Catalog, cfg: dict, out: Path, key: str, shard: int) -> None:
    _ground_stage(cat, cfg, out, key, only=[shard], finalize=False)


def _ground(cat: Catalog, cfg: dict, out: Path, key: str) -> dict:
    m = _ground_stage(cat, cfg, out, key, only=[])
    _logger().info("ground: %d regions, %d errors", m["regions"]["rows"], m["errors"]["rows"])
    return {"tables": tables_of(m, out), "content_hash": m["regions"]["content_hash"]}


def _ground_shards(cat: Catalog, cfg: dict) -> int:
    """Shards of the images with at least one parsed caption (what ground_stage grounds)."""
    from pipeline.stages import n_shards_for

    parsed = {r["caption_id"] for r in cat.rows("scene_graphs", ["caption_id"])}
    images = {r["image_id"] for r in cat.rows("captions", ["caption_id", "image_id"]) if r["caption_id"] in parsed}
    return n_shards_for(len(images), cfg["shard_size"])


def _weights_key(cfg: dict) -> list:
    """The grounding weights' sha256 (a file) or path (a model directory)."""
    from model.export import file_sha256

    weights = [cfg.get(k) for k in ("checkpoint", "model_dir") if cfg.get(k)]
    return [[file_sha256(w) if Path(w).is_file() else w for w in weights]]


# ---- patch masks ------------------------------------------------------------------------------------------
def _masks(cat: Catalog, cfg: dict, out: Path, key: str) -> dict:
    from pipeline.stages import patches_stage

    m = patches_stage(cfg["models"], cat.rows("captions"), cat.rows("regions"), out)
    return {"tables": tables_of(m, out), "content_hash": m["patch_masks"]["content_hash"]}


def _code(*modules: str) -> Callable[[dict], tuple[str, ...]]:
    return lambda section: modules


def _ground_code(section: dict) -> tuple[str, ...]:
    from pipeline.stages import ground_code_modules

    return ground_code_modules(section["backend"])


def _preprocessing() -> tuple[Stage, ...]:
    from pipeline.stages import CAPTIONS_CODE, MASKS_CODE, PARSE_CODE
    from pipeline.world import CODE_MODULES as WORLD_CODE


    return (
        Stage("world", (), "world", _code(*WORLD_CODE), _world),
        Stage("captions", ("source",), "data", _code(*CAPTIONS_CODE), _captions),
        Stage("tokenizer", ("captions",), "tokenizer", _code("pipeline.siglip_folder"), _tokenizer,
              extra_key=_arch_json, when=lambda section: section["arch"] is not None),
        Stage("parse", ("captions",), "parse", _code(*PARSE_CODE), _parse, _parse_shards, _parse_shard,
              extra_key=lambda section: folder_key(section["clip_model"])),  # a local-dir tokenizer's files
        # source: the images and instance annotations the grounders read (the captions hash covers neither)
        Stage("ground", ("captions", "parse", "source"), "ground", _ground_code, _ground, _ground_shards,
              _ground_shard, extra_key=_weights_key),
        Stage("masks", ("ground", "captions"), "masks", _code(*MASKS_CODE), _masks,
              extra_key=lambda section: [k for m in section["models"] for k in folder_key(m)]),
    )


PREPROCESSING: tuple[Stage, ...] = _preprocessing()
BY_NAME: dict[str, Stage] = {s.name: s for s in PREPROCESSING}
