"""Prefect tasks wrapping the pure stage functions. Every task writes under ``artifacts/<stage>/<key>/`` and
returns a small JSON manifest. The key hashes the upstream manifests' content hashes, the stage config and the
stage's code version (and weights' sha256 where used), so Prefect's cache (``cache_key_fn`` = that key) and the
artifact directory agree: a new process, a new day or a colleague sharing the artifacts folder skips finished
work, and the flow refreshes a task whose outputs are missing.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from prefect import get_run_logger, task

from data_schemas import TABLES, is_complete, read_table
from data_schemas.config import from_dict

STAGE_FILE = "stage.json"


def _key_fn(ctx, params) -> str:
    return f"{ctx.task.name}-{params['key']}"


def cached_task(**kw):
    return task(cache_key_fn=_key_fn, persist_result=True, result_serializer="json", **kw)


def stage_done(d: str | Path) -> bool:
    """A stage directory is done when its ``stage.json`` exists and every table it lists is complete."""
    p = Path(d) / STAGE_FILE
    if not p.exists():
        return False
    m = json.loads(p.read_text())
    return all(is_complete(t["dir"]) for t in m.get("tables", {}).values()) and \
        all(Path(f).exists() for f in m.get("files", []))


def write_stage(d: Path, manifest: dict) -> dict:
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


def _files_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


# ---- world ------------------------------------------------------------------------------------------------
@cached_task(name="world", task_run_name="world")
def world_task(cfg: dict, out: str, key: str) -> dict:
    from pipeline.world import WorldConfig, generate_world

    out = Path(out)
    if stage_done(out):
        return read_stage(out)
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex}")
    summary = generate_world(tmp, from_dict(WorldConfig, cfg, "world"))
    tmp.mkdir(parents=True, exist_ok=True)
    write_stage(tmp, {"stage": "world", "key": key, "dir": str(out), "content_hash": _files_hash(tmp),
                      "summary": summary})
    if out.exists():
        shutil.rmtree(out)
    tmp.replace(out)
    m = read_stage(out)
    get_run_logger().info("world: %s", {s: v["images"] for s, v in summary["splits"].items()})
    return m


# ---- captions ---------------------------------------------------------------------------------------------
@cached_task(name="captions", task_run_name="captions")
def captions_task(data: dict, out: str, key: str) -> dict:
    """The captions table of ``data`` (the config's data section); the manifest's ``root`` is the image root."""
    from pipeline.stages import CaptionsConfig, captions_image_root, captions_stage

    out = Path(out)
    if stage_done(out):
        return read_stage(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = from_dict(CaptionsConfig, data, "data")
    m = captions_stage(cfg, out)
    get_run_logger().info("captions (%s): %d rows, %d errors %s", cfg.source, m["captions"]["rows"],
                          m["errors"]["rows"], m["captions"].get("summary", {}).get("error_reasons", {}))
    return write_stage(out, {"stage": "captions", "key": key, "dir": str(out), "source": cfg.source,
                             "root": captions_image_root(cfg, out), "tables": tables_of(m, out),
                             "content_hash": m["captions"]["content_hash"],
                             "summary": m["captions"].get("summary", {})})


# ---- parse (mapped over shards) ---------------------------------------------------------------------------
def _parse_cfg(cfg: dict):
    from pipeline.stages import ParseConfig

    return from_dict(ParseConfig, cfg, "parse")


def _captions(captions: dict) -> list[dict]:
    return read_table(TABLES["captions"], captions["tables"]["captions"]["dir"]).to_pylist()


@cached_task(name="parse-shard", task_run_name="parse-shard-{shard}")
def parse_shard_task(captions: dict, cfg: dict, out: str, shard: int, key: str) -> int:
    from pipeline.stages import parse_stage

    parse_stage(_parse_cfg(cfg), _captions(captions), Path(out), only=[shard], finalize=False, reuse=True,
                inputs=captions["content_hash"])
    return shard


@cached_task(name="parse", task_run_name="parse")
def parse_finalize_task(captions: dict, cfg: dict, out: str, key: str) -> dict:
    from pipeline.stages import parse_stage

    out = Path(out)
    if stage_done(out):
        return read_stage(out)
    m = parse_stage(_parse_cfg(cfg), _captions(captions), out, only=[], reuse=True, inputs=captions["content_hash"])
    get_run_logger().info("parse: %s", {n: v["rows"] for n, v in m.items()})
    return write_stage(out, {"stage": "parse", "key": key, "dir": str(out), "tables": tables_of(m, out),
                             "content_hash": m["scene_graphs"]["content_hash"] + m["token_masks"]["content_hash"]})


# ---- ground (mapped over shards of images) ----------------------------------------------------------------
def _ground_inputs(captions: dict, parse: dict, cfg: dict):
    from pipeline.grounding.base import GroundingConfig
    from pipeline.stages import read_instances

    caps = _captions(captions)
    sg = read_table(TABLES["scene_graphs"], parse["tables"]["scene_graphs"]["dir"]).to_pylist()
    gcfg = from_dict(GroundingConfig, cfg, "ground")
    instances = None
    if gcfg.backend == "annotations":
        if captions.get("source", "coco") != "coco":
            raise ValueError(f"ground.backend 'annotations' reads COCO instances files: it works with data.source "
                             f"coco only (this run: {captions['source']!r}); use backend groundingdino or hf")
        instances = read_instances(captions["root"], sorted({c["split"] for c in caps}))
    return caps, sg, gcfg, instances


@cached_task(name="ground-shard", task_run_name="ground-shard-{shard}")
def ground_shard_task(captions: dict, parse: dict, cfg: dict, inputs: str, out: str, shard: int, key: str) -> int:
    from pipeline.stages import ground_stage

    caps, sg, gcfg, inst = _ground_inputs(captions, parse, cfg)
    ground_stage(gcfg, caps, sg, captions["root"], Path(out), instances=inst,
                 only=[shard], finalize=False, reuse=True, inputs=inputs)
    return shard


@cached_task(name="ground", task_run_name="ground")
def ground_finalize_task(captions: dict, parse: dict, cfg: dict, inputs: str, out: str, key: str) -> dict:
    from pipeline.stages import ground_stage

    out = Path(out)
    if stage_done(out):
        return read_stage(out)
    caps, sg, gcfg, inst = _ground_inputs(captions, parse, cfg)
    m = ground_stage(gcfg, caps, sg, captions["root"], out, instances=inst, only=[],
                     reuse=True, inputs=inputs)
    get_run_logger().info("ground: %d regions, %d errors", m["regions"]["rows"], m["errors"]["rows"])
    return write_stage(out, {"stage": "ground", "key": key, "dir": str(out), "tables": tables_of(m, out),
                             "content_hash": m["regions"]["content_hash"]})


def n_shards(n_items: int, shard_size: int) -> int:
    from pipeline.stages import n_shards_for

    return n_shards_for(n_items, shard_size)


def ground_items(captions: dict, parse: dict) -> int:
    """Number of images the ground stage shards over (images with at least one parsed caption)."""
    caps = read_table(TABLES["captions"], captions["tables"]["captions"]["dir"], ["caption_id", "image_id"])
    sg = read_table(TABLES["scene_graphs"], parse["tables"]["scene_graphs"]["dir"], ["caption_id"])
    parsed = set(sg.column("caption_id").to_pylist())
    return len({i for c, i in zip(caps.column("caption_id").to_pylist(), caps.column("image_id").to_pylist())
                if c in parsed})


# ---- patch masks ------------------------------------------------------------------------------------------
@cached_task(name="masks", task_run_name="masks")
def masks_task(captions: dict, ground: dict, cfg: dict, out: str, key: str) -> dict:
    from pipeline.stages import patches_stage

    out = Path(out)
    if stage_done(out):
        return read_stage(out)
    regions = read_table(TABLES["regions"], ground["tables"]["regions"]["dir"]).to_pylist()
    m = patches_stage(cfg["models"], _captions(captions), regions, out)
    return write_stage(out, {"stage": "masks", "key": key, "dir": str(out), "tables": tables_of(m, out),
                             "content_hash": m["patch_masks"]["content_hash"]})


# ---- validate (the gate; never cached: it publishes its artifact every run) -------------------------------
@task(name="validate", task_run_name="validate")
def validate_task(tables: dict, params: dict, out: str, key: str) -> dict:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from data_schemas.checks import run_checks
    from pipeline.validate import ValidationFailed, format_results

    results = run_checks(tables, params)
    rows = [r.as_dict() | {"examples": "; ".join(r.examples)} for r in results]
    create_table_artifact(key="mask-table-checks", table=rows, description="DuckDB checks over the mask tables")
    failed = [r for r in results if r.status == "fail"]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"stage": "validate", "key": key, "status": "fail" if failed else "pass", "checks": rows,
              "content_hash": key}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    create_markdown_artifact(key="mask-table-summary", markdown=f"```\n{format_results(results)}\n```")
    get_run_logger().info("validate: %d passed, %d failed, %d skipped", sum(r.status == "pass" for r in results),
                          len(failed), sum(r.status == "skip" for r in results))
    if failed:
        raise ValidationFailed(results)
    return report


# ---- train ------------------------------------------------------------------------------------------------
def _train_progress(name: str, logger):
    """The training's log rows as flow log lines and a Prefect progress artifact (steps done)."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    from model.runlog import format_log_row

    artifact = create_progress_artifact(progress=0.0, key=artifact_key(f"train-{name}"),
                                        description=f"train {name}: steps done")

    def on_log(row: dict) -> None:
        logger.info(format_log_row(name, row))
        update_progress_artifact(artifact, progress=100.0 * row["step"] / row["total_steps"])

    return on_log


def artifact_key(text: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from a run name."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


@cached_task(name="train", task_run_name="train-{name}")
def train_task(name: str, settings: dict, out: str, key: str, nproc: int = 1) -> dict:
    """One training run (in-process, or under torchrun with ``nproc`` > 1); returns the export manifest."""
    out = Path(out)
    if stage_done(out):
        return read_stage(out)
    logger = get_run_logger()
    # a killed run continues from its latest checkpoint (the data order is deterministic, so the result is
    # the uninterrupted run's); resume and save_every are not part of the run key
    settings = {"resume": "auto", **settings, "out_dir": str(out / "run"), "progress": False}
    if nproc > 1:
        import yaml

        cfg_file = out / "train.yaml"
        out.mkdir(parents=True, exist_ok=True)
        cfg_file.write_text(yaml.safe_dump({"train": settings}))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "-m", "model.train",
               "--config", str(cfg_file)]
        logger.info("train %s: %s", name, " ".join(cmd))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            logger.info(line.rstrip())
        if proc.wait() != 0:
            raise RuntimeError(f"torchrun for run {name} failed with exit code {proc.returncode}")
        summary = json.loads((out / "run" / "summary.json").read_text())
    else:
        from model.runtime import apply_process_settings
        from model.train import load_config, train

        cfg = load_config(None, [], **settings)
        apply_process_settings(cfg.cpu_keep_freed_memory, cfg.device)  # this process trains: the launcher's call
        summary = train(cfg, on_log=_train_progress(name, logger))
    last = summary["history"][-1] if summary["history"] else {}
    logger.info("train %s: %d steps, last %s", name, summary["steps"],
                {k: v for k, v in last.items() if k.endswith("loss")})
    if summary.get("skipped_images"):
        logger.warning("train %s: %d unreadable training image(s) skipped (within max_skipped_fraction), e.g. %s",
                       name, summary["skipped_images"], summary["skipped_examples"][:3])
    exp = summary["export"]
    return write_stage(out, {"stage": "train", "name": name, "key": key, "dir": str(out), "export_dir": exp["dir"],
                             "skipped_images": summary.get("skipped_images", 0),
                             "skipped_examples": summary.get("skipped_examples", []),
                             "export_pt": exp["pt"], "content_hash": exp["sha256"], "arch": settings["arch"],
                             "checkpoint": summary["checkpoint"],
                             "files": [exp["pt"], str(Path(exp["dir"]) / "open_clip_model.safetensors")],
                             "last": last})


# ---- evaluate ---------------------------------------------------------------------------------------------
@cached_task(name="evaluate", task_run_name="evaluate-{label}")
def evaluate_task(label: str, run: dict | None, eval_cfg: dict, out: str, key: str,
                  probe_cfg: dict | None = None) -> dict:
    """The benchmarks, and on the synthetic world (``probe_cfg``: world root and tables) the probes."""
    from model.benchmarks import EvalConfig, evaluate

    out = Path(out)
    if stage_done(out):
        return read_stage(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = from_dict(EvalConfig, eval_cfg, "evaluate.settings", model=run["arch"], checkpoint=run["export_pt"])
    res = evaluate(cfg, list(cfg.roots), out / "results.json", results_table=out / "eval_results")
    res["label"] = label
    if probe_cfg is not None:
        from model.probes import ProbeConfig, probe

        res["probes"] = probe(run["arch"], run["export_pt"], ProbeConfig(world=probe_cfg["world"]),
                              run.get("checkpoint"), probe_cfg["tables"])
    (out / "results.json").write_text(json.dumps(res, indent=2, default=str))
    get_run_logger().info("evaluate %s: %s", label, {b: {k: round(v, 4) for k, v in r["groups"].items()
                                                       if isinstance(v, float)} for b, r in res["benchmarks"].items()})
    return write_stage(out, {"stage": "evaluate", "label": label, "key": key, "dir": str(out),
                             "results": str(out / "results.json"), "files": [str(out / "results.json")],
                             "content_hash": hashlib.sha256((out / "results.json").read_bytes()).hexdigest()})


@task(name="report", task_run_name="report")
def report_task(evals: dict[str, list[dict]], out: str, title: str, note: str, control: str = "clip-ft") -> dict:
    from prefect.artifacts import create_markdown_artifact

    from pipeline.report import write_report

    results = {label: [json.loads(Path(e["results"]).read_text()) for e in runs] for label, runs in evals.items()}
    rep = write_report(results, out, title, note, control=control)
    create_markdown_artifact(key="evaluation-results", markdown=rep["table"], description=title)
    return rep
