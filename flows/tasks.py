"""Prefect tasks: ``stage_task`` / ``shard_task`` run any preprocessing stage of ``flows.dag`` (one shard at a time
for the mapped ones); validate, train, evaluate and report have their own. Every task writes under
``artifacts/<stage>/<key>/`` and returns a small JSON manifest; Prefect's cache key (``cache_key_fn``) is the
same content key, so a new process, a new day or a colleague sharing the artifacts folder skips finished work,
and the flow refreshes a task whose outputs are missing.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from prefect import get_run_logger, task

from data_schemas.config import from_dict
from flows.dag import read_stage, stage_done, write_stage  # noqa: F401 (API)


def read_back(out: Path) -> dict:
    """A finished output found by a task whose Prefect cache record is missing (e.g. a new PREFECT_HOME): read
    back, not recomputed, and said so in the log (the UI shows the task Completed)."""
    get_run_logger().info("already done at %s: read back, not recomputed", out)
    return read_stage(out)


def _key_fn(ctx, params) -> str:
    """The Prefect cache key: the task, the output's content key (the artifact directory's name), the shard."""
    shard = f"-{params['shard']}" if "shard" in params else ""
    return f"{ctx.task.name}-{params['key']}{shard}"


def cached_task(**kw):
    return task(cache_key_fn=_key_fn, persist_result=True, result_serializer="json", **kw)


# ---- the preprocessing stages (flows.dag): one task runs any of them, one runs any stage's shard ---------
@cached_task(name="stage", task_run_name="{name}")
def stage_task(name: str, inputs: dict, cfg: dict, out: str, key: str) -> dict:
    """Stage ``name`` (``flows.dag.BY_NAME``) into ``out``; a finished output is read back, not redone."""
    from flows.dag import BY_NAME

    from flows.catalog import Catalog

    out = Path(out)
    if stage_done(out):
        return read_back(out)
    body = BY_NAME[name].run(Catalog(inputs), cfg, out, key)
    return write_stage(out, {"stage": name, "key": key, "dir": str(out), **body})


@cached_task(name="stage-shard", task_run_name="{name}-shard-{shard}")
def shard_task(name: str, inputs: dict, cfg: dict, out: str, shard: int, key: str) -> int:
    """One shard of a mapped stage (its Parquet part survives a kill; ``stage_task`` then publishes)."""
    from flows.catalog import Catalog
    from flows.dag import BY_NAME

    BY_NAME[name].run_shard(Catalog(inputs), cfg, Path(out), key, shard)
    return shard


# ---- validate (the gate; never cached: it publishes its artifact every run; it re-hashes every part) -------
@task(name="validate", task_run_name="validate")
def validate_task(tables: dict, params: dict, out: str, key: str) -> dict:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from data_schemas.checks import run_checks, verify_deep
    from pipeline.validate import ValidationFailed, format_results

    verify_deep(tables)  # every part re-hashed: a part edited in place (same size and time) is named, not trusted
    results = run_checks(tables, params)
    rows = [r.as_dict() | {"examples": "; ".join(r.examples)} for r in results]
    create_table_artifact(key="mask-table-checks", table=rows, description="DuckDB checks over the mask tables")
    failed = [r for r in results if r.status == "fail"]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"stage": "validate", "key": key, "status": "fail" if failed else "pass", "checks": rows,
              "content_hash": key}
    (out / "report.json").write_text(json.dumps(report, indent=2))  # for a person: passed or not
    create_markdown_artifact(key="mask-table-summary", markdown=f"```\n{format_results(results)}\n```")
    get_run_logger().info("validate: %d passed, %d failed, %d skipped", sum(r.status == "pass" for r in results),
                          len(failed), sum(r.status == "skip" for r in results))
    if failed:
        raise ValidationFailed(results)
    return write_stage(out, report)  # only a passing validation is done (stage_done: the gate)


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
        return read_back(out)
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
        summary = train(cfg, on_log=_train_progress(name, logger), on_note=logger.info)
    last = summary["history"][-1] if summary["history"] else {}
    logger.info("train %s: %d steps, last %s", name, summary["steps"],
                {k: v for k, v in last.items() if k.endswith("loss")})
    if summary.get("skipped_images"):
        logger.warning("train %s: %d unreadable or resized training image(s) skipped (within "
                       "max_skipped_fraction), e.g. %s", name, summary["skipped_images"],
                       summary["skipped_examples"][:3])
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
def evaluate_task(label: str, run: dict | None, eval_cfg: dict, out: str, key: str, history: str,
                  probe_cfg: dict | None = None) -> dict:
    """The benchmarks, and on the synthetic world (``probe_cfg``: world root and tables) the probes; the rows are
    appended to the ``eval_results`` history in ``history`` (once the evaluation is complete: a failed one adds
    nothing). A Cached evaluation adds no rows; a forced one adds a new set with its own eval_id and time."""
    from model.benchmarks import EvalConfig, append_results, evaluate

    out = Path(out)
    if stage_done(out):
        return read_back(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = from_dict(EvalConfig, eval_cfg, "evaluate.settings", model=run["arch"], checkpoint=run["export_pt"])
    results = out / "results.json"
    if results.is_file():
        # an attempt stopped after its evaluation (written whole, below) but before its stage record: the same
        # key, so the same evaluation; appended once (by its eval_id), not evaluated and appended again
        res = json.loads(results.read_text())
    else:
        res = evaluate(cfg, list(cfg.roots), run=label)
        res["label"] = label
        if probe_cfg is not None:
            from model.probes import ProbeConfig, probe

            res["probes"] = probe(run["arch"], run["export_pt"], ProbeConfig(world=probe_cfg["world"]),
                                  run.get("checkpoint"), probe_cfg["tables"])
        tmp = out / ".results.json.tmp"
        tmp.write_text(json.dumps(res, indent=2, default=str))
        os.replace(tmp, results)
    append_results(history, res, cfg)
    get_run_logger().info("evaluate %s: %s (eval_id %s, appended to %s)", label,
                          {b: {k: round(v, 4) for k, v in r["groups"].items() if isinstance(v, float)}
                           for b, r in res["benchmarks"].items()}, res["eval_id"], history)
    return write_stage(out, {"stage": "evaluate", "label": label, "key": key, "dir": str(out),
                             "results": str(out / "results.json"), "files": [str(out / "results.json")],
                             "eval_id": res["eval_id"], "history": history,
                             "content_hash": hashlib.sha256((out / "results.json").read_bytes()).hexdigest()})


@task(name="report", task_run_name="report")
def report_task(evals: dict[str, list[dict]], out: str, title: str, note: str, control: str = "clip-ft") -> dict:
    from prefect.artifacts import create_markdown_artifact

    from pipeline.report import write_report

    results = {label: [json.loads(Path(e["results"]).read_text()) for e in runs] for label, runs in evals.items()}
    rep = write_report(results, out, title, note, control=control)
    create_markdown_artifact(key="evaluation-results", markdown=rep["table"], description=title)
    return rep
