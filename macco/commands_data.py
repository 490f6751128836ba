"""``macco`` verbs that make the tables: world, captions, parse, ground, masks, show-masks."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from data_schemas.geometry import DEFAULT_ARCH


# each verb's config fields that are flags (macco.flags: the defaults, types and choices are the dataclass's)
WORLD_FLAGS = ("seed", "images", "size", "eval_fraction")
PARSE_FLAGS = ("parser", "clip_model", "spacy_model", "n_process")
GROUND_FLAGS = ("backend", "checkpoint", "config_file", "bert_dir", "model_dir", "box_threshold", "text_threshold",
                "device", "batch_size", "shard_size")


def add_parsers(sub) -> None:
    from macco.flags import add_flags
    from pipeline.captions_stage import CaptionsConfig
    from pipeline.grounding.base import GroundingConfig
    from pipeline.parse_stage import ParseConfig
    from pipeline.world import WorldConfig

    w = sub.add_parser("world", help="generate the synthetic compositional world (COCO 2014 layout)")
    w.add_argument("--out", type=Path, help="output directory")
    add_flags(w, WorldConfig, WORLD_FLAGS, help={"images": "train images", "size": "render size in pixels",
                                                 "eval_fraction": "val and test images each, as a share of train"})
    w.add_argument("--preview", type=Path, help="write a PNG grid of samples with captions")
    w.add_argument("--root", type=Path, help="existing world to preview (without --out)")
    w.set_defaults(fn=cmd_world)

    ca = sub.add_parser("captions", help="read a source (COCO, CSV/TSV, image folder + JSONL, webdataset) into "
                                         "the captions table (+ errors)",
                        description="read an image-text source into OUT/captions and OUT/errors, image sizes read "
                                    "from the images; webdataset images are extracted into OUT/images")
    ca.add_argument("source_path", type=Path, metavar="SOURCE", help="coco: the COCO-layout root; csv/folder: the "
                    "CSV/TSV or JSONL file; webdataset: a shard path or brace pattern (more with --shards)")
    ca.add_argument("--shards", nargs="+", default=[], help="webdataset: several shard paths/patterns")
    ca.add_argument("--out", type=Path, required=True)
    add_flags(ca, CaptionsConfig, ("source", *_captions_options()))
    ca.set_defaults(fn=cmd_captions)

    pa = sub.add_parser("parse", help="scene-graph parse captions; write scene_graphs + token_masks")
    pa.add_argument("captions", type=Path, help="COCO captions json, JSONL of {id, image_id, caption[, file_name, "
                    "width, height, split]}, or a captions table directory")
    pa.add_argument("--out", type=Path, required=True)
    pa.add_argument("--images", type=Path, metavar="ROOT",
                    help="image root the file's file_name values are relative to: a JSONL's image sizes are read "
                         "from the images (without it they stay unknown, which macco ground refuses), a COCO "
                         "json's captions of missing images become errors")
    pa.add_argument("--split", metavar="SPLIT",
                    help="split of the file's rows (default: from a captions_<split>2014 file name, else train; "
                         "a JSONL line's own split is kept)")
    add_flags(pa, ParseConfig, PARSE_FLAGS, flag={"clip_model": "--model"},
              help={"clip_model": "open_clip architecture whose tokenizer to align to"})
    pa.set_defaults(fn=cmd_parse)

    g = sub.add_parser("ground", help="ground attribute/relation phrases: write regions (+ errors)")
    g.add_argument("tables", type=Path, help="directory holding the captions and scene_graphs tables")
    g.add_argument("--images", type=Path, help="image root (captions.file_name is relative to it)")
    g.add_argument("--instances", type=Path, help="COCO-layout root with annotations/instances_<split>2014.json")
    add_flags(g, GroundingConfig, GROUND_FLAGS, help={
        "checkpoint": "groundingdino: .pth", "config_file": "groundingdino: model config .py",
        "bert_dir": "groundingdino: local BERT directory", "model_dir": "hf: save_pretrained directory"})
    g.add_argument("--out", type=Path, help="default: TABLES (writes TABLES/ground/{regions,errors})")
    g.set_defaults(fn=cmd_ground)

    mk = sub.add_parser("masks", help="boxes -> patch_masks for one or more patch grids")
    mk.add_argument("tables", type=Path, help="directory holding captions and regions tables")
    mk.add_argument("--model", action="append", help="open_clip architecture(s) whose grid to use (repeatable; "
                    f"default: {DEFAULT_ARCH})")
    mk.add_argument("--out", type=Path)
    mk.set_defaults(fn=cmd_masks)

    sm = sub.add_parser("show-masks", help="draw a caption's masked patches, boxes and tokens")
    sm.add_argument("tables", type=Path, help="folder holding the captions, scene_graphs, token_masks (and regions, "
                    "patch_masks) tables")
    sm.add_argument("--images", type=Path, required=True, help="image root (captions.file_name is relative to it)")
    sm.add_argument("--caption-id", type=int, required=True, help="the caption to draw (macco sql \"select "
                    "caption_id, caption from captions limit 5\" lists some)")
    sm.add_argument("--model", help="architecture whose patch grid and tokenizer to draw (default: the one grid the "
                    "patch_masks table holds; needed when it holds several)")
    sm.add_argument("--out", type=Path, required=True, help="the PNG to write")
    sm.add_argument("--run", metavar="FOLDER", help="where TABLES holds tables of several runs (different lineage): "
                    "the run with tables under FOLDER (default: the newest, said in one line)")
    sm.set_defaults(fn=cmd_show_masks)


def cmd_world(args) -> int:
    from macco.flags import config_from_args
    from pipeline.world import WorldConfig, preview

    if args.out is None and args.preview is None:
        print("macco world: give --out DIR (and/or --preview PNG with --root DIR)", file=sys.stderr)
        return 2
    if args.out is not None:
        from flows.catalog import Catalog
        from flows.runner import run_in_folder

        cfg = config_from_args(WorldConfig, args, WORLD_FLAGS, "macco world")
        summary = run_in_folder("world", cfg, Catalog(), args.out, log=_quiet)["summary"]
        for split, s in summary["splits"].items():
            print(f"{split:<5} {s['images']:>6} images {s['captions']:>7} captions {s['boxes']:>6} boxes")
        for name, n in summary.get("benchmarks", {}).items():
            print(f"benchmark {name:<45} {n:>6} cases")
        print(f"wrote {args.out}")
    if args.preview is not None:
        root = args.out or args.root
        if root is None:
            print("macco world --preview needs --out or --root", file=sys.stderr)
            return 2
        print(f"wrote {preview(root, args.preview)}")
    return 0


def _print_manifests(manifests: dict[str, dict]) -> None:
    for name, m in manifests.items():
        print(f"{name:<13} {m['rows']:>9} rows  {m.get('content_hash', '')[:12]}")


def cmd_captions(args) -> int:
    from data_schemas.config import from_dict
    from flows.catalog import Catalog
    from flows.runner import run_in_folder
    from pipeline.captions_stage import SOURCES, CaptionsConfig, captions_image_root

    opts = {f: getattr(args, f) for f in ("source", *_captions_options())}
    where = {SOURCES[args.source].location: str(args.source_path)}
    if args.source == "webdataset":
        where = {"path": [str(p) for p in args.shards] or str(args.source_path)}
    cfg = from_dict(CaptionsConfig, {**opts, **where}, "macco captions")
    out = Path(args.out)
    m = run_in_folder("captions", cfg, Catalog(), out, log=_quiet)["outputs"]
    _print_manifests({k: v for k, v in m.items() if v.get("kind") == "table"})
    # this stage's errors (the errors table also keeps the other stages' rows of an --out used before)
    reasons = _summary(out / "captions").get("error_reasons", {})
    n_errors = sum(reasons.values())
    print(f"errors: {n_errors} " + ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())))
    root = captions_image_root(cfg, out)  # a source of 0 usable pairs was refused by the stage (refuse_empty)
    print(f"image root: {root}   (next: macco parse {out / 'captions'} --out {out})")
    return 0


@contextmanager
def shard_bar(verb: str, unit: str):
    """A progress bar on stderr for a sharded stage's shards (``progress(done, total)``; stdout stays for results)."""
    from tqdm import tqdm

    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=f"macco {verb}", unit=unit.rstrip("s"), file=sys.stderr, leave=False)
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        if bar is not None:
            bar.close()


def _quiet(line: str) -> None:
    """A stage's log line, which a verb prints in its own words (stdout stays for results)."""


def _summary(table: Path) -> dict:
    from data_schemas import read_manifest

    return read_manifest(table).get("summary", {})


def _captions_options() -> tuple[str, ...]:
    """CaptionsConfig's fields other than the source and its location: the flags of ``macco captions``."""
    from dataclasses import fields

    from pipeline.captions_stage import CaptionsConfig

    return tuple(f.name for f in fields(CaptionsConfig) if f.name not in ("source", "root", "path"))


def _read_parse_input(args):
    """The captions ``macco parse`` reads, as a ``CaptionRead``; a file's rows (with sizes from ``--images``) are
    written as OUT/captions, its bad items are kept for the errors table. None (after one line on stderr) for
    options that do not apply."""
    from data_schemas import TABLES, write_table
    from pipeline.captions import CaptionRead, read_caption_file, split_of
    from pipeline.captions_stage import read_caption_input

    src = Path(args.captions)
    if src.is_dir():
        if args.images is not None or args.split is not None:
            print(f"macco parse: {src} is a captions table (sizes and splits already set): --images and --split "
                  "apply to a captions file", file=sys.stderr)
            return None
        return CaptionRead(rows=read_caption_input(src))
    split, how = split_of(src, args.split)
    read = read_caption_file(src, split=split, image_root=args.images)
    write_table(TABLES["captions"], Path(args.out) / "captions", TABLES["captions"].from_rows(read.rows),
                config={"input": str(src), "split": split, "images": str(args.images or "")},
                extra={"summary": read.summary()})
    print(f"split: {split} ({'--split' if how == 'given' else how})")
    unsized = sum(1 for r in read.rows if r["width"] <= 0 or r["height"] <= 0)
    if unsized:
        print(f"image sizes: {unsized} of {len(read.rows)} captions have none (width/height 0; macco ground needs "
              "them): pass --images ROOT, with file_name in the JSONL")
    return read


def _add_input_errors(errors_dir: Path, rows: list[dict]) -> dict:
    """The input file's bad items (stage ``captions``) into the errors table, replacing only that stage's rows."""
    from data_schemas import TABLES, write_table
    from pipeline.shards import only_stage

    spec = TABLES["errors"]
    return write_table(spec, errors_dir, spec.from_rows(rows), config={"input": "macco parse"},
                       replaces=only_stage("captions"))


def cmd_parse(args) -> int:
    from flows.catalog import folder_catalog
    from flows.registry import BY_NAME
    from flows.runner import check_outputs, run_in_folder
    from macco.flags import config_from_args
    from pipeline.parse_stage import ParseConfig
    from pipeline.validate import discover_tables

    out = Path(args.out)
    cfg = config_from_args(ParseConfig, args, PARSE_FLAGS, "macco parse")
    for stage in ("captions", "parse"):  # every table it writes checked before any (a file: OUT/captions first)
        check_outputs(BY_NAME[stage], out)
    read = _read_parse_input(args)
    if read is None:
        return 2
    src = Path(args.captions)
    captions = src if src.is_dir() else out / "captions"
    found = discover_tables(src.parent) if cfg.parser == "official" else {}
    inputs = folder_catalog({"captions": captions, **({"official": found["official"]} if "official" in found else {})})
    with shard_bar("parse", "shards") as bar:
        manifests = run_in_folder("parse", cfg, inputs, out, log=_quiet, progress=bar)["outputs"]
    if not src.is_dir():  # a file's own bad items (none: an earlier file's rows go)
        manifests["errors"] = _add_input_errors(out / "errors", read.errors)
    _print_manifests(manifests)
    from pipeline.inspection import summarize

    errs = summarize({"errors": out / "errors"}).get("errors", [])
    print(f"errors: {sum(e[2] for e in errs)} " + ", ".join(f"{e[1]}={e[2]}" for e in errs))
    return 0


def cmd_ground(args) -> int:
    from flows.catalog import folder_catalog
    from flows.runner import run_in_folder
    from macco.flags import config_from_args
    from pipeline.grounding.base import GroundingConfig

    tables = Path(args.tables)
    cfg = config_from_args(GroundingConfig, args, GROUND_FLAGS, "macco ground")
    found = stage_tables("ground", tables)  # its record's reads (the official table when there is one)
    images = {"kind": "images", "dir": str(args.images) if args.images else None,
              "instances": str(args.instances) if args.instances else None, "content_hash": None}
    out = Path(args.out or tables) / "ground"
    with shard_bar("ground", "shards") as bar:
        m = run_in_folder("ground", cfg, folder_catalog(found, images=images), out, log=_quiet, progress=bar)["outputs"]
    _print_manifests(m)
    print(f"wrote {out}")
    return 0


def stage_tables(stage: str, tables_root: Path) -> dict[str, Path]:
    """The tables ``stage``'s record reads (``Stage.reads``: the verb lists none again), found under
    ``tables_root``: a missing one is one line naming it; an optional one (``name?``) when present."""
    from data_schemas import TABLES, TableError
    from flows.registry import BY_NAME
    from pipeline.validate import discover_tables

    found, out = discover_tables(tables_root), {}
    for read in BY_NAME[stage].reads:
        name = read.rstrip("?")
        if name in found and name in TABLES:
            out[name] = found[name]
        elif name in TABLES and not read.endswith("?"):
            raise TableError(f"{tables_root}: no complete table {name} under it")
    return out


def cmd_masks(args) -> int:
    from data_schemas.config import from_dict
    from flows.catalog import folder_catalog
    from flows.runner import run_in_folder
    from pipeline.masks_stage import MasksConfig

    root = Path(args.tables)
    inputs = folder_catalog(stage_tables("masks", root))
    out = Path(args.out or root / "ground")
    cfg = from_dict(MasksConfig, {"models": args.model} if args.model else {}, "macco masks")
    m = run_in_folder("masks", cfg, inputs, out, log=_quiet)["outputs"]
    _print_manifests(m)
    _print_errors(m["errors"], out / "errors")
    print(f"wrote {out / 'patch_masks'} and {out / 'errors'}")
    return 0


def _print_errors(manifest: dict, errors_dir: Path) -> None:
    """The error rows of a stage's errors table by stage and reason (what ``macco inspect`` also shows)."""
    from pipeline.inspection import summarize

    errs = summarize({"errors": errors_dir}).get("errors", []) if manifest["rows"] else []
    print(f"errors: {sum(e[2] for e in errs)} " + ", ".join(f"{e[0]}/{e[1]}={e[2]}" for e in errs))


def cmd_show_masks(args) -> int:
    from data_schemas import TableError
    from pipeline.patches import geometry_for
    from pipeline.lineage import check_world
    from pipeline.show import show_masks
    from pipeline.validate import discover_tables

    tables = discover_tables(args.tables, args.run)
    check_world(tables, args.images)  # tables made from a world regenerated since: one line, nothing drawn
    missing = [t for t in ("captions", "scene_graphs") if t not in tables]
    if missing:
        raise TableError(f"{args.tables}: no complete {' or '.join(missing)} table under it (run macco captions and "
                         "macco parse into it first)")
    if args.model:
        geo, model = geometry_for(args.model), args.model
    else:
        geo, model = _table_grid(tables), DEFAULT_ARCH
        _check_clip_bpe(tables)
    print(f"wrote {show_masks(tables, args.images, args.caption_id, geo, args.out, model)}")
    return 0


def _check_clip_bpe(tables: dict) -> None:
    """Without --model the tokens are drawn with the CLIP BPE: the token_masks must be in it."""
    from data_schemas import TABLES, InputFileError, read_table

    if "token_masks" in tables:
        names = {r["tokenizer"] for r in read_table(TABLES["token_masks"], tables["token_masks"],
                                                    ["tokenizer"]).to_pylist()}
        if names - {"clip-bpe"}:
            raise InputFileError(f"{tables['token_masks']}: token masks of {sorted(names)}: pass --model (the model "
                                 "folder whose tokenizer they use)")


def _table_grid(tables: dict):
    """The one patch grid the patch_masks table holds (without one: the default architecture's); drawn with the CLIP
    BPE tokenizer, which every CLIP architecture shares (a model folder's own tokenizer: pass --model)."""
    from data_schemas import TABLES, InputFileError, read_table
    from data_schemas.geometry import Geometry
    from pipeline.patches import geometry_for

    if "patch_masks" not in tables:
        return geometry_for(DEFAULT_ARCH)
    grids = sorted({(r["image_size"], r["patch_size"]) for r in read_table(
        TABLES["patch_masks"], tables["patch_masks"], ["image_size", "patch_size"]).to_pylist()})
    if len(grids) != 1:
        raise InputFileError(f"{tables['patch_masks']}: holds the grids {grids} (image size, patch size): name the "
                             "architecture to draw with --model")
    return Geometry(*grids[0])
