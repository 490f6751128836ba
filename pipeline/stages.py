"""Stage entry points: explicit arguments in, tables written atomically, a manifest dict out (captions, parse,
masks here; the ground stage in ``pipeline.grounding.stage``; the shard machinery in ``pipeline.shards``).

Per-item stages run in shards (``shard_size`` items each); every shard is one Parquet part that survives a
kill, so a resumed stage redoes only the unfinished shards. ``flows/`` wraps these functions as Prefect tasks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from data_schemas import TABLES, read_table, write_table
from data_schemas.config import ConfigError, check_choices, check_ranges
from data_schemas.errors import error_row
from data_schemas.geometry import DEFAULT_ARCH
from data_schemas.provenance import code_version  # noqa: F401 (the stages' code version; flows use it)
from data_schemas.scene_graphs import SPACY_MODEL
from pipeline.grounding.stage import ground_code_modules, ground_stage, read_instances  # noqa: F401 (API)
from pipeline.shards import (content_hash, n_shards_for, only_stage, run_sharded,  # noqa: F401 (API)
                             tree_hash)
from pipeline.sources import Source

# the modules whose code each stage's output depends on: its manifest's code version and the flow's key
CAPTIONS_CODE = ("pipeline.captions", "pipeline.sources", "pipeline.images", "pipeline.macco_tsv", "pipeline.stages")
PARSE_CODE = ("pipeline.scene_graph", "pipeline.concepts", "pipeline.sng", "pipeline.tokens", "pipeline.macco_tsv",
              "pipeline.shards", "pipeline.stages")
MASKS_CODE = ("pipeline.patches", "data_schemas.geometry", "pipeline.stages")


def _load_rows(path: Path, table: str, columns: list[str] | None = None) -> list[dict]:
    return read_table(TABLES[table], path, columns).to_pylist()


# ---- captions --------------------------------------------------------------------------------------------
@dataclass
class CaptionsConfig:
    source: Source = "coco"  # pipeline.sources
    root: str | None = None  # coco: COCO-layout root (annotations/captions_<split>2014.json + <split>2014/)
    splits: tuple[str, ...] = ("train", "val", "test")  # coco: which captions files
    karpathy: str | None = None  # coco: optional dataset_coco.json; then caption ids/splits come from it
    karpathy_splits: tuple[str, ...] = ("train", "restval", "val", "test")
    path: str | list[str] | None = None  # csv / folder: the file; webdataset: shard paths or brace patterns
    image_root: str | None = None  # csv / folder: the images' folder (default: the file's folder)
    split: str = "train"  # csv / folder / webdataset: the split of every row (csv: unless csv_split_key)
    csv_img_key: str = "filepath"  # open_clip's --csv-img-key
    csv_caption_key: str = "title"  # open_clip's --csv-caption-key
    csv_separator: str = "\t"  # open_clip's --csv-separator
    csv_split_key: str | None = None  # a column holding each row's split

    def __post_init__(self):
        check_choices(self, "data")
        needs = "root" if self.source == "coco" else "path"
        if getattr(self, needs) is None:
            raise ConfigError(f"data.source {self.source!r} needs data.{needs}")
        self.splits, self.karpathy_splits = tuple(self.splits), tuple(self.karpathy_splits)
        if self.csv_separator in ("\\t", "tab"):  # as typed in a shell or an unquoted YAML value
            self.csv_separator = "\t"


def captions_image_root(cfg: CaptionsConfig, out: Path) -> str:
    """The folder the captions table's ``file_name`` values are relative to (what ground and train read)."""
    if cfg.source == "coco":
        return str(Path(cfg.root).resolve())
    if cfg.source == "webdataset":
        return str((Path(out) / "images").resolve())
    return str(Path(cfg.image_root or Path(cfg.path).parent).resolve())


def read_source(cfg: CaptionsConfig, out: Path):
    """The configured source as a ``CaptionRead`` (webdataset images extracted under ``out/images``; MACCO's
    file: with its ``official`` rows as ``.official``)."""
    from pipeline import sources
    from pipeline.captions import read_coco_root, read_karpathy

    if cfg.source == "macco-tsv":
        from pipeline.macco_tsv import read_macco_tsv

        read, official = read_macco_tsv(cfg.path, cfg.image_root, cfg.split)
        read.official = official
        return read
    if cfg.source == "csv":
        return sources.read_csv_source(cfg.path, img_key=cfg.csv_img_key, caption_key=cfg.csv_caption_key,
                                       separator=cfg.csv_separator, image_root=cfg.image_root, split=cfg.split,
                                       split_key=cfg.csv_split_key)
    if cfg.source == "folder":
        return sources.read_folder_source(cfg.path, image_root=cfg.image_root, split=cfg.split)
    if cfg.source == "webdataset":
        return sources.read_webdataset_source(cfg.path, Path(out) / "images", split=cfg.split)
    if cfg.karpathy:
        base = read_coco_root(cfg.root, cfg.splits)
        sizes = {r["image_id"]: (r["width"], r["height"]) for r in base.rows}
        return read_karpathy(Path(cfg.karpathy), splits=cfg.karpathy_splits, sizes=sizes, image_root=cfg.root)
    return read_coco_root(cfg.root, cfg.splits)


def captions_stage(cfg: CaptionsConfig, out: Path) -> dict[str, dict]:
    """Read the source (COCO, the world, CSV/TSV, image folder, webdataset) into ``out/captions`` +
    ``out/errors``."""
    read = read_source(cfg, out)
    conf, ver = asdict(cfg), code_version(*CAPTIONS_CODE)
    written = {
        "captions": write_table(TABLES["captions"], out / "captions", TABLES["captions"].from_rows(read.rows),
                                config=conf, code_version=ver, extra={"summary": read.summary()}),
        "errors": write_table(TABLES["errors"], out / "errors", TABLES["errors"].from_rows(read.errors),
                              config=conf, code_version=ver, replaces=only_stage("captions")),
    }
    if cfg.source == "macco-tsv":
        written["official"] = write_table(TABLES["official"], out / "official",
                                          TABLES["official"].from_rows(read.official), config=conf, code_version=ver)
    return written


# ---- parse -----------------------------------------------------------------------------------------------
@dataclass
class ParseConfig:
    # sng: SceneGraphParser (the sng extra); official: the word lists of MACCO's file (data.source macco-tsv)
    parser: Literal["rules", "sng", "official"] = "rules"
    spacy_model: str = SPACY_MODEL
    clip_model: str = DEFAULT_ARCH  # whose tokenizer the token masks use
    context_length: int | None = None  # None: the tokenizer's own (CLIP BPE: 77; SigLIP B/16: 64)
    batch_size: int = 256
    n_process: int = 1
    shard_size: int = 2000

    def __post_init__(self):
        check_choices(self, "parse")
        check_ranges(self, "parse", positive=("context_length", "batch_size", "n_process", "shard_size"))


def read_caption_input(path: str | Path, *, split: str | None = None,
                       image_root: str | Path | None = None) -> list[dict]:
    """Caption rows from a captions table dir, a COCO captions json, or a JSONL of {id, image_id, caption}.

    A file's rows get ``split`` (default: from a ``captions_<split>2014`` name, else ``train``) and, with
    ``image_root``, sizes read from the images (``pipeline.captions.read_caption_file``). Bad items of a file
    are left out here; ``read_caption_file`` returns them as error rows (what ``macco parse`` writes).
    """
    from pipeline.captions import read_caption_file, split_of

    path = Path(path)
    if path.is_dir():
        return _load_rows(path, "captions")
    return read_caption_file(path, split=split_of(path, split)[0], image_root=image_root).rows


def _parse_rows(cfg: ParseConfig, rows: list[dict], loaded: dict) -> dict[str, list[dict]]:
    """Scene graphs, token masks and errors of ``rows`` in this process; models load into ``loaded`` once (the
    official parser reads ``loaded["official"]``: {caption_id: official row})."""
    from pipeline.scene_graph import load_nlp, parse_captions
    from pipeline.sng import make_sng
    from pipeline.tokens import token_mask_rows

    if cfg.parser == "official":
        from pipeline.macco_tsv import official_graphs

        sg, errors, graphs = official_graphs(rows, loaded["official"])
        tm, tm_err = token_mask_rows(rows, graphs, cfg.clip_model, cfg.context_length)
        return {"scene_graphs": sg, "token_masks": tm, "errors": errors + tm_err}
    if not loaded:
        loaded["nlp"] = load_nlp(cfg.spacy_model)
        loaded["sng"] = make_sng(cfg.spacy_model) if cfg.parser == "sng" else None
    res = parse_captions(rows, loaded["nlp"], parser=cfg.parser, batch_size=cfg.batch_size, sng=loaded["sng"])
    tm, tm_err = token_mask_rows(rows, res.graphs, cfg.clip_model, cfg.context_length)
    return {"scene_graphs": res.rows, "token_masks": tm, "errors": res.errors + tm_err}


_WORKER_MODELS: dict = {}  # per worker process: the models _parse_rows loaded there


def _parse_chunk(job: tuple[ParseConfig, list[dict]]) -> dict[str, list[dict]]:
    cfg, rows = job
    return _parse_rows(cfg, rows, _WORKER_MODELS)


def parse_stage(cfg: ParseConfig, captions: list[dict], out: Path, progress=None, only=None,
                finalize: bool = True, reuse: bool = False, inputs: str | None = None,
                official: list[dict] | None = None) -> dict[str, dict]:
    """Scene graphs + CLIP token masks for ``captions``: ``out/{scene_graphs,token_masks,errors}``.

    ``inputs``: a content hash of ``captions`` when the caller has one (the flow: the captions table's), else
    computed; unfinished shards of a killed run are reused only with the same inputs.

    With ``n_process > 1`` each shard is split into chunks that worker processes parse end to end (spaCy,
    rules, token alignment) and return as rows, in order: only plain rows cross processes, never spaCy Docs
    (whose serialisation is what ``nlp.pipe(n_process=...)`` pays for). Workers start like spaCy's own, with
    multiprocessing's default start method, once per call and only if a shard needs work. ``parser: official``
    takes the concepts from ``official`` (the ``official`` table's rows: MACCO's file), in this process.
    """
    import multiprocessing

    loaded: dict = {}
    if cfg.parser == "official":
        if official is None:
            raise ConfigError("parse.parser 'official' reads the official table of a macco-tsv source "
                              "(data.source: macco-tsv / macco captions --source macco-tsv)")
        loaded["official"] = {r["caption_id"]: r for r in official}

    def shard(rows: list[dict]) -> dict[str, list[dict]]:
        if cfg.n_process <= 1 or cfg.parser == "official":
            return _parse_rows(cfg, rows, loaded)
        if "pool" not in loaded:
            loaded["pool"] = multiprocessing.Pool(cfg.n_process)
        step = max(1, min(cfg.batch_size, -(-len(rows) // cfg.n_process)))
        merged: dict[str, list[dict]] = {"scene_graphs": [], "token_masks": [], "errors": []}
        jobs = [(cfg, rows[i:i + step]) for i in range(0, len(rows), step)]
        for part in loaded["pool"].imap(_parse_chunk, jobs):
            for name, part_rows in part.items():
                merged[name].extend(part_rows)
        return merged

    ver = code_version(*PARSE_CODE)
    try:
        return run_sharded(captions, cfg.shard_size,
                           {n: out / n for n in ("scene_graphs", "token_masks", "errors")}, shard,
                           config=asdict(cfg), version=ver, progress=progress, only=only, finalize=finalize,
                           reuse=reuse, inputs=inputs, replaces={"errors": only_stage("parse")})
    finally:
        if "pool" in loaded:
            loaded["pool"].terminate()
            loaded["pool"].join()


# ---- ground ----------------------------------------------------------------------------------------------


def patches_stage(models: list[str], captions: list[dict], regions: list[dict], out: Path) -> dict[str, dict]:
    """``out/patch_masks``: per phrase and per model grid, the patches of its boxes (evaluation preprocessing);
    ``out/errors`` (stage ``masks``): a box that is not finite, not inside its image with positive area, or of a
    caption the captions table lacks is an error row, never a crash or a silently empty mask."""
    from pipeline.grounding.plan import box_problem
    from pipeline.patches import PREPROCESS, eval_patches, geometry_for

    geos = sorted({geometry_for(m) for m in models}, key=lambda g: (g.image_size, g.patch_size))
    size = {c["caption_id"]: c for c in captions}
    boxes: dict[tuple[int, int], list] = {}
    errors = []
    for r in regions:
        item = f"{r['caption_id']}:{r['concept_id']}:{r['box_id']}"
        cap = size.get(r["caption_id"])
        problem = ("unknown_caption", f"region {item}: caption {r['caption_id']} is not in the captions table") \
            if cap is None else box_problem(r["box_xyxy"], cap)
        if problem is not None:
            errors.append(error_row("masks", item, problem[0], f"region {item} (caption {r['caption_id']}, "
                                                               f"concept {r['concept_id']}): {problem[1]}"))
            continue
        boxes.setdefault((r["caption_id"], r["concept_id"]), []).append(r["box_xyxy"])
    rows = []
    for (cid, kid), bs in sorted(boxes.items()):
        c = size[cid]
        for g in geos:
            rows.append({"caption_id": cid, "concept_id": kid, "grid": g.grid, "image_id": c["image_id"],
                         "patch_idx": eval_patches(bs, c["width"], c["height"], g), "image_size": g.image_size,
                         "patch_size": g.patch_size, "preprocess": PREPROCESS})
    conf = {"models": sorted(models), "geometries": [asdict(g) for g in geos]}
    ver = code_version(*MASKS_CODE)
    return {"patch_masks": write_table(TABLES["patch_masks"], out / "patch_masks",
                                       TABLES["patch_masks"].from_rows(rows), config=conf, code_version=ver),
            "errors": write_table(TABLES["errors"], out / "errors", TABLES["errors"].from_rows(errors), config=conf,
                                  code_version=ver, replaces=only_stage("masks"))}
