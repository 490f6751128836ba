"""``macco`` verbs that train and evaluate models: train, eval, probe, run (the Prefect flow)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .config_help import train_keys_help


# the EvalConfig fields that are ``macco eval`` flags (defaults, types and choices: the dataclass's)
EVAL_FLAGS = ("device", "batch_size", "autocast", "allow_missing", "activation", "protocol", "aro_exclusion",
              "vga_min_count", "vlc_mode", "allow_partial", "seed", "zeroshot_dataset")


def add_parsers(sub) -> None:
    import argparse

    tr = sub.add_parser("train", help="train MACCO / CLIP-FT on the tables; extra key=value override the config",
                        description="train MACCO / CLIP-FT; settings from --config plus key=value overrides "
                                    "(e.g. mode=clip-ft max_steps=100); configs/train-example.yaml is one config",
                        epilog=train_keys_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_argument("--config", help="YAML with the train settings (model/train.py TrainConfig)")
    tr.set_defaults(fn=cmd_train, takes_extra=True)

    from macco.flags import add_flags
    from model.benchmarks import EvalConfig
    from model.benchmarks.registry import BENCHMARKS, cli_help  # no torch: the names and their roots

    ev = sub.add_parser("eval", help="evaluate a model on the compositionality benchmarks (original files)")
    ev.add_argument("--model", required=True, help="open_clip architecture or local-dir:PATH")
    ev.add_argument("--checkpoint", help="weights file for --model (e.g. a run's export.pt, or an open_clip pretrained "
                    "tag); required unless --model is a local-dir: folder with its weights, or --random-init")
    ev.add_argument("--random-init", action="store_true", help="evaluate a randomly initialised --model on purpose "
                    "(a baseline); without it a missing --checkpoint is an error, never a silent random model")
    ev.add_argument("--benchmark", nargs="+", required=True, choices=(*BENCHMARKS, "all"), metavar="NAME",
                    help=cli_help())
    ev.add_argument("--root", type=Path, help="the benchmark's root directory (one benchmark)")
    ev.add_argument("--world", type=Path, help="a synthetic world: its benchmarks/ sets")
    ev.add_argument("--out", type=Path, help="JSON results file")
    ev.add_argument("--results-table", type=Path, help="append this evaluation's rows to the eval_results history in "
                    "this table directory (created if absent; earlier rows are never replaced)")
    ev.add_argument("--run", metavar="LABEL", help="the run label of the rows (default: the weights file's name, "
                    "else the model's)")
    add_flags(ev, EvalConfig, EVAL_FLAGS, unset=("vga_min_count", "allow_partial"), help={
        "autocast": "autocast (default fp32)",
        "allow_missing": "score a benchmark whose images are partly missing (default: an error naming the count and "
                         "examples, as the authors' harnesses crash); recorded in results.json, marked in the report",
        "activation": "MLP activation of the evaluated towers (default: the protocol's: authors auto, macco gelu): "
                      "auto = what resolve_arch decides, the training activation (QuickGELU for OpenAI ViT-B/L "
                      "weights files); gelu = what every official MACCO evaluation script uses (reloads as ViT-B-32, "
                      "nn.GELU), to match its published numbers; quickgelu forces QuickGELU. Recorded in results.json "
                      "settings",
        "protocol": "authors: each benchmark's own harness; macco: MACCO's eval scripts. Sets the defaults of "
                    "--vlc-mode, --aro-exclusion and the Order image roots (explicit flags win)",
        "aro_exclusion": "VG-Relation exclusion list (None: aro_notebook; macco under --protocol macco)",
        "vlc_mode": "VL-CheckList: authors (missing images dropped, then 1,000 records per file, POS[0] vs "
                    "NEG[0]), all (every record and POS x NEG pair), macco (every record; each leaf the mean "
                    "over its files). None: the protocol's",
        "vga_min_count": "VG-Attribution: the cases a group needs to count in the macro average (default: 25, the "
                         "ARO authors'; with --world the world's 5, model/benchmarks/protocols.py WORLD_SETTINGS)",
        "allow_partial": "report a group average over an incomplete set of its files, marked \"partial\": true "
                         "with the missing files (default: refused; on with --world)",
        "seed": "Order perturbation seed (ARO authors: 1)",
        "zeroshot_dataset": "zero-shot: the dataset whose clip_benchmark template set is used (cifar10, imagenet1k, "
                            "food101, ...; default: the --root folder's name; a name without a set: imagenet1k's)"})
    ev.add_argument("--image-root", action="append", default=[], metavar="NAME=DIR",
                    help="image directory: NAME coco-order / flickr-order, or a VALSE dataset field value "
                         "(coco2017 = coco_2017, visual7w, swig, ...); repeatable")
    ev.add_argument("--winoground-clean-ids", type=Path, metavar="FILE",
                    help="ids of Winoground's clean subset: Diwan et al.'s new_tag_assignments.json (clean = no "
                         "tag) or a list of ids (JSON list or one per line)")
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
    ru.add_argument("--stages", nargs="+", metavar="STAGE", help="stages to run (default: all, in the order of "
                    "flows/registry.py; an unknown name is refused with the list)")
    ru.add_argument("--force", nargs="+", default=[], metavar="STAGE", help="stages to redo even if cached")
    ru.set_defaults(fn=cmd_run)


def cmd_train(args, extra=()) -> int:
    from flows.catalog import Catalog
    from flows.runner import run_in_folder
    from model.train import load_config, note_printer, progress_printer

    cfg = load_config(args.config, list(extra))
    # the train stage's record: its out_dir locked (a second macco train into it fails at once), checked first
    m = run_in_folder("train", cfg, Catalog(), cfg.out_dir, log=note_printer, on_row=progress_printer(cfg),
                      label=Path(cfg.out_dir).name)
    print(json.dumps({"steps": m["steps"], "last": m["last"], "export": m["export"]}, indent=2))
    return 0


def cmd_eval(args) -> int:
    from model.benchmarks import EvalConfig, evaluate

    if not args.checkpoint and not args.random_init and not args.model.startswith("local-dir:"):
        print(f"macco eval: no --checkpoint for {args.model}: that would evaluate a randomly initialised model; pass "
              "--checkpoint FILE (e.g. a run's export.pt) or --random-init to score one on purpose", file=sys.stderr)
        return 2

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
    from data_schemas import refuse_unreadable
    from data_schemas.config import from_dict
    from flows.runner import check_writable
    from model.benchmarks.protocols import parse_image_roots

    # where the results go, checked before the evaluation runs (it may take hours; a read-only history lost it)
    for target in (args.out, args.results_table):
        if target is not None:
            check_writable(Path(target))
    if args.results_table is not None:
        refuse_unreadable(args.results_table)

    order_roots, valse_roots = parse_image_roots(args.image_root)
    from model.benchmarks.protocols import WORLD_SETTINGS

    # the flags left unset take the world's settings with --world (a few files per benchmark, small VG-A groups),
    # else EvalConfig's defaults
    flags = {n: getattr(args, n) for n in EVAL_FLAGS if getattr(args, n) is not None}
    if args.world:
        flags = {**{k: v for k, v in WORLD_SETTINGS.items() if k in EVAL_FLAGS}, **flags}
    cfg = from_dict(EvalConfig, flags, "macco eval", model=args.model,
                    checkpoint=args.checkpoint, roots=roots, order_image_roots=order_roots,
                    valse_image_roots=valse_roots,
                    winoground_clean_ids=str(args.winoground_clean_ids) if args.winoground_clean_ids else None)
    out = evaluate(cfg, names, args.out, args.results_table, run=args.run, progress=sys.stderr.isatty())
    if args.results_table is not None:  # a macco.duckdb beside the history shows the new rows
        from pipeline.inspection import refresh_duckdb

        refresh_duckdb(Path(args.results_table).parent)
    return out


def cmd_run(args) -> int:
    import os
    import time

    from data_schemas.config import ConfigError
    from flows.config import load_config
    from flows.registry import STAGES

    unknown = sorted(set(args.stages or []) - set(STAGES)) + sorted(set(args.force) - set(STAGES))
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
    cfg = load_config(args.config)
    os.environ.setdefault("PREFECT_RESULTS_LOCAL_STORAGE_PATH", str(Path(cfg.artifacts).resolve() / ".prefect-results"))
    os.environ.setdefault("PREFECT_HOME", str(Path(".prefect").resolve()))
    from flows.pipeline import run_flow
    from macco.stop import stop_on_signals

    t0 = time.perf_counter()
    with stop_on_signals("macco run"):  # Ctrl-C / SIGTERM: the run and its child processes end at once, one line
        out = run_flow(args.config, stages=args.stages, force=args.force)
    print(f"macco run: finished in {time.perf_counter() - t0:.0f} s")
    if "report" in out:
        print(f"results: {out['report']['markdown']}  {out['report']['png']}")
    return 0


def cmd_probe(args) -> int:
    from model.losses import REPORT_TERMS
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
    print(format_probes({"model": res}, REPORT_TERMS))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {args.out}")
    return 0
