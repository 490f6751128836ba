"""The model stages' records: validate (the gate), train (the base chain, then every run x seed), evaluate (every
model on every benchmark set; the probes on the synthetic world) and report. Train and evaluate run once per model:
their ``drive`` asks the runner for each (its own settings, reads and key); every run goes through the same
``Stage.run``. No Prefect."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from data_schemas import replace_file
from data_schemas.config import ConfigError, safe_name
from flows.config import EvaluatePlan, TrainPlan, ValidateConfig, plain
from flows.stage import Call, Stage, folder_key, packages, roots, weights_key
from model.train_config import GIVEN_TABLES, given_tables

MASK_TABLES = ("captions", "scene_graphs", "token_masks", "regions", "patch_masks")
TRAINING_TABLES = ("captions", "token_masks", "scene_graphs", "regions")
GIVEN = tuple(f"{t}?" for t in GIVEN_TABLES)  # a source's own negatives and neighbours (negclip-tsv), when it has them
MODEL_PACKAGES = ("torch", "torchvision", "open_clip_torch", "timm", "transformers", "Pillow", "numpy")
HISTORY = "eval_results"  # artifacts/eval_results: every evaluation's rows, appended (never replaced)


# ---- validate: the gate -------------------------------------------------------------------------------------------
def _validate(call: Call) -> dict:
    """Every part re-hashed (``deep``), then the DuckDB checks; ``report.json`` either way; a failed check raises
    ``ValidationFailed`` (the gate: only a passing validation is done)."""
    from data_schemas import TableError
    from data_schemas.checks import run_checks, verify_deep
    from pipeline.validate import ValidationFailed

    tables = call.inputs.tables(call.inputs.table_names())  # the flow: its reads; a verb: every table it found
    if not tables:
        raise TableError("no complete tables found to validate")
    if call.section.deep:
        verify_deep(tables)  # a part edited in place (same size and time) is named, not trusted
    results = run_checks(tables, call.section.params)
    rows = [r.as_dict() | {"examples": "; ".join(r.examples)} for r in results]
    failed = [r for r in results if r.status == "fail"]
    report = {"status": "fail" if failed else "pass", "checks": rows}
    if call.key:  # the flow's record of the gate (a verb prints it)
        call.out.mkdir(parents=True, exist_ok=True)
        replace_file(call.out / "report.json", lambda tmp: tmp.write_text(json.dumps(report, indent=2)))
    call.log(f"validate: {sum(r.status == 'pass' for r in results)} passed, {len(failed)} failed, "
             f"{sum(r.status == 'skip' for r in results)} skipped")
    if failed:
        raise ValidationFailed(results)
    return {**report, "outputs": {"validation": {"kind": "validation", "content_hash": call.key}}}


def _publish_checks(call: Call, result, sink) -> None:
    """The check table and its summary beside the flow's work, for a passing gate and a failed one alike."""
    from data_schemas.checks import CheckResult
    from pipeline.validate import ValidationFailed, format_results

    if isinstance(result, ValidationFailed):
        results = result.results
    elif isinstance(result, dict) and "checks" in result:
        results = [CheckResult(**{**r, "examples": r["examples"].split("; ") if r["examples"] else []})
                   for r in result["checks"]]
    else:  # another user error: there is no check table to show
        return
    rows = [r.as_dict() | {"examples": "; ".join(r.examples)} for r in results]
    sink.table("mask-table-checks", rows, "DuckDB checks over the mask tables")
    sink.markdown("mask-table-summary", f"```\n{format_results(results)}\n```")


# ---- train: the base chain, then every run x seed from the base's export --------------------------------------
def _train_extras(section) -> list:
    """The weights a run starts from (sha256 of a file), the scene truth of mode scene, a model folder's files."""
    from data_schemas.provenance import file_sha256

    return [weights_key(section.pretrained), file_sha256(section.scenes) if section.scenes else None,
            *folder_key(section.arch), *([weights_key(section.init_task)] if section.init_task else [])]


def _train(call: Call) -> dict:
    """One training run into ``call.out/run`` (in-process, or under torchrun with ``extra['nproc']`` > 1); a killed
    run continues from its latest checkpoint (the data order is deterministic: the result is the uninterrupted
    run's)."""
    from model.runtime import apply_process_settings
    from model.train import train

    out, cfg = call.out, call.section
    if call.key:  # the flow: the run's folder under its key, continued from its latest checkpoint after a kill
        cfg = dataclasses.replace(cfg, resume="auto", out_dir=str(out / "run"), progress=False)
    nproc = call.extra.get("nproc", 1)
    if nproc > 1:
        import yaml

        out.mkdir(parents=True, exist_ok=True)
        cfg_file = out / "train.yaml"
        cfg_file.write_text(yaml.safe_dump({"train": plain(dataclasses.asdict(cfg))}))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "-m", "model.train",
               "--config", str(cfg_file)]
        call.log(f"train {call.label}: {' '.join(cmd)}")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            call.log(line.rstrip())
        if proc.wait() != 0:
            raise RuntimeError(f"torchrun for run {call.label} failed with exit code {proc.returncode}")
        summary = json.loads((out / "run" / "summary.json").read_text())
    else:
        apply_process_settings(cfg.cpu_keep_freed_memory, cfg.device)  # this process trains: the launcher's call
        summary = train(cfg, on_log=call.on_row, on_note=call.log)
    last = summary["history"][-1] if summary["history"] else {}
    call.log(f"train {call.label}: {summary['steps']} steps, last "
             f"{ {k: v for k, v in last.items() if k.endswith('loss')} }")
    if summary.get("skipped_images"):
        call.log(f"train {call.label}: {summary['skipped_images']} unreadable or resized training image(s) skipped "
                 f"(within max_skipped_fraction), e.g. {summary['skipped_examples'][:3]}")
    exp = summary["export"]
    run = {"kind": "run", "name": call.label, "export_dir": exp["dir"], "export_pt": exp["pt"],
           "content_hash": exp["sha256"], "arch": cfg.arch, "checkpoint": summary["checkpoint"]}
    return {"name": call.label, "steps": summary["steps"], "export": exp,
            "skipped_images": summary.get("skipped_images", 0),
            "skipped_examples": summary.get("skipped_examples", []), "last": last,
            "files": [exp["pt"], str(Path(exp["dir"]) / "open_clip_model.safetensors")], **run, "outputs": {}}


def _watch_train(call: Call, sink) -> None:
    """The run's log rows as log lines and a progress artifact (steps done)."""
    from model.runlog import format_log_row

    update = sink.progress(f"train-{call.label}", f"train {call.label}: steps done")

    def on_row(row: dict) -> None:
        call.log(format_log_row(call.label, row))
        update(100.0 * row["step"] / row["total_steps"])

    call.on_row = on_row


def _run_folder(key: str, label: str) -> str:
    """A training run's folder: ``runs/<name>-<key>`` (the report's folder ``runs/<config name>`` beside them)."""
    return f"runs/{safe_name(label, 'run name')}-{key}"


def _drive_train(stage: Stage, plan, runner) -> dict[str, list[dict]]:
    """The base chain (each stage from the previous one's export), then every run x seed from the base's export
    (or ``train.pretrained``); each with its own settings, key and folder ``runs/<name>-<key>``."""
    train, cat = plan.cfg.train, plan.catalog
    inputs = cat.subset(stage.reads)
    def common(s) -> dict:  # the image root; the training tables, and those the source gives that the run uses
        return {"image_root": cat.image_root, "tables": cat.tables((*TRAINING_TABLES, *filter(cat.has, given_tables(s))))}
    reads = inputs.hashes(stage.reads)
    runs: dict[str, list[dict]] = {}
    base = None
    for i, section in enumerate(train.base):
        name = "base" if i == len(train.base) - 1 else f"base{i + 1}-{section.mode}"
        s = dataclasses.replace(section, **common(section), pretrained=base["export_pt"] if base else section.pretrained)
        base = runner.run(stage, s, inputs, read_hashes=reads, label=name, extra={"nproc": train.torchrun_nproc})
    if base is not None:
        runs["base"] = [base]
    for name, run in train.runs.items():
        for seed in run.seeds:
            s = dataclasses.replace(run.config, **common(run.config), seed=seed,
                                    pretrained=base["export_pt"] if base else train.pretrained)
            runs.setdefault(name, []).append(runner.run(stage, s, inputs, read_hashes=reads, label=f"{name}-s{seed}",
                                                        extra={"nproc": train.torchrun_nproc}))
    plan.catalog.entries["runs"] = {"kind": "runs", "runs": runs, "content_hash": _hash_of(runs)}
    return runs


def _hash_of(runs: dict[str, list[dict]]) -> str:
    from flows.config import key_of

    return key_of({k: [r["content_hash"] for r in v] for k, v in sorted(runs.items())})


# ---- evaluate: every model on every benchmark set (and on the world the probes) -----------------------------
def _evaluate_code(section) -> tuple[str, ...]:
    from model.benchmarks.registry import code_roots

    return (*code_roots(section.benchmarks), *(("model.probes",) if section.probes else ()))


def benchmark_roots(plan) -> tuple[dict, str]:
    """(benchmark -> root, their content hash): ``evaluate.roots`` (what each root holds, ``folder_fingerprint``:
    a corrected file is a new evaluation), or the synthetic world's own sets (the world's content hash)."""
    ecfg = plan.cfg.evaluate
    if ecfg.roots:
        roots_, content = dict(ecfg.roots), None
    elif plan.cfg.world_run:
        from pipeline.world_benchmarks import benchmark_roots as world_roots

        roots_, content = world_roots(plan.catalog.entry("source")["dir"]), plan.catalog.hash("source")
    else:
        raise ConfigError("config evaluate.roots: name the benchmark roots to evaluate on (only the synthetic "
                          "world brings its own), or leave 'evaluate' out of the stages")
    if ecfg.benchmarks is not None:
        roots_ = {b: roots_[b] for b in ecfg.benchmarks}
    if content is None:
        from data_schemas.provenance import folder_fingerprint
        from flows.config import key_of

        held = {r: folder_fingerprint(r) for r in set(roots_.values())}
        content = key_of(sorted((b, held[r]) for b, r in roots_.items()))
    return roots_, content


def _check_evaluate(cfg) -> None:
    """The evaluation's own inputs, before the first stage of the flow works (not after training): the benchmark
    roots the config names (each benchmark's input check under each protocol, ``model.benchmarks.check_inputs``)
    and the Winoground clean-ids file (read on the world too, whose sets the world stage makes)."""
    from model.benchmarks import check_inputs
    from model.benchmarks.winoground import load_clean_ids

    ecfg = cfg.evaluate
    if ecfg.settings.winoground_clean_ids:
        load_clean_ids(ecfg.settings.winoground_clean_ids)
    if ecfg.roots:
        roots_ = dict(ecfg.roots) if ecfg.benchmarks is None else {b: ecfg.roots[b] for b in ecfg.benchmarks}
        for protocol in ecfg.protocol_list():
            check_inputs(ecfg.eval_config(roots_, cfg.world_run, protocol), list(roots_))


def _evaluate(call: Call) -> dict:
    """The benchmarks, and on the synthetic world the probes; the rows are appended to the ``eval_results``
    history (once the evaluation is complete: a failed one adds nothing). An evaluation stopped after its
    results.json but before its stage record is read back and appended once (by its eval_id). ``macco eval`` runs
    it too (no key): ``extra`` names its benchmarks (``names``), its results file (``results_file``: its
    ``--out``'s name, or None) and its history (``history``: ``--results-table``, or None)."""
    from model.benchmarks import append_results, evaluate

    run, out, flow = call.extra["run"], call.out, bool(call.key)
    cfg = dataclasses.replace(call.extra["eval_config"], model=run["arch"], checkpoint=run["export_pt"])
    name = call.extra.get("results_file", "results.json")
    results = out / name if name else None
    if flow and results.is_file():
        res = json.loads(results.read_text())
    else:
        bar = {"progress": True} if call.extra.get("progress") else {}  # a verb's bar on a terminal
        res = evaluate(cfg, call.extra.get("names") or list(cfg.roots), run=call.label or None, **bar)
        if flow:
            res["label"] = call.label
        probe = call.extra.get("probe")
        if probe is not None:
            from model.probes import ProbeConfig, probe as run_probes

            res["probes"] = run_probes(run["arch"], run["export_pt"], ProbeConfig(world=probe["world"]),
                                       run.get("checkpoint"), probe["tables"])
        if results is not None:
            out.mkdir(parents=True, exist_ok=True)
            replace_file(results, lambda tmp: tmp.write_text(json.dumps(res, indent=2, default=str)))
    history = call.extra.get("history")
    if history is not None:
        append_results(history, res, cfg, call.extra.get("trigger", "macco run (in-process)"))
    groups = {b: {k: round(v, 4) for k, v in r["groups"].items() if isinstance(v, float)}
              for b, r in res["benchmarks"].items()}
    call.log(f"evaluate {call.label}: {groups} (eval_id {res['eval_id']}, appended to {history})")
    files = [str(results)] if results is not None else []
    return {"label": call.label, "results": files[0] if files else None, "files": files, "eval_id": res["eval_id"],
            "history": history, "content_hash": hashlib.sha256(results.read_bytes()).hexdigest() if files else None,
            "outputs": {}, **({} if flow else {"evaluation": res})}  # the verb prints it


def evaluation_reads(run: dict, roots_hash: str | None, table_hashes: list[str], probes: bool) -> list:
    """What an evaluation of ``run`` reads, for its key: the exported weights, the benchmark sets and, with the
    probes, the tables and the run's training checkpoint (the reconstruction probe and the gradient norms rebuild
    its predictors from it: two runs with equal exports, e.g. towers frozen, are two evaluations)."""
    from data_schemas.provenance import file_sha256

    checkpoint = run.get("checkpoint") if probes else None
    return [run["content_hash"], roots_hash, *table_hashes, *([file_sha256(checkpoint)] if checkpoint else [])]


def weights_runs(plan) -> dict[str, list[dict]]:
    """``evaluate.weights`` as runs: each weights file an evaluated model that was not trained (the pretrained CLIP
    column), built as ``train.arch``, keyed by the file's sha256."""
    from data_schemas.provenance import file_sha256

    out = {}
    for label, path in plan.cfg.evaluate.weights.items():
        if not Path(path).is_file():
            raise ConfigError(f"config evaluate.weights.{label}: {path}: no such weights file")
        out[label] = [{"kind": "run", "name": label, "export_pt": str(path), "content_hash": file_sha256(path),
                       "arch": plan.cfg.train.arch, "checkpoint": None, "trained": False}]
    return out


def _drive_evaluate(stage: Stage, plan, runner) -> dict[str, list[dict]]:
    ecfg, cat = plan.cfg.evaluate, plan.catalog
    runs = cat.entry("runs")["runs"]
    untrained = weights_runs(plan)
    clash = sorted(set(untrained) & set(runs))
    if clash:
        raise ConfigError(f"config evaluate.weights: {clash} name training runs too: one label, one model")
    runs = {**untrained, **runs}
    roots_, roots_hash = benchmark_roots(plan)
    section = dataclasses.replace(ecfg, roots=roots_)
    # the probes need the world's scene truth (on the synthetic world only); they read the tables and rebuild a
    # run's training task from its checkpoint
    probes = plan.cfg.world_run and ecfg.probes
    if not probes:
        section = dataclasses.replace(section, probes=False)
    probe = {"world": cat.entry("source")["dir"], "tables": cat.tables(TRAINING_TABLES)} if probes else None
    table_hashes = cat.hashes((*TRAINING_TABLES, "images")) if probes else []
    inputs = cat.subset(stage.reads)
    labels = list(runs) if ecfg.models is None else list(dict.fromkeys([*untrained, *ecfg.models]))
    evals: dict[str, list[dict]] = {}
    for protocol in ecfg.protocol_list():
        eval_cfg = ecfg.eval_config(roots_, plan.cfg.world_run, protocol)
        # one evaluation's settings in the key (the plan's list of protocols is not)
        keyed = dataclasses.replace(section, settings=eval_cfg)
        for label in labels:
            if label not in runs:
                raise ConfigError(f"config evaluate.models: {label!r} is not a run of this config ({sorted(runs)})")
            for run in runs[label]:
                ev = runner.run(stage, keyed, inputs,
                                read_hashes=evaluation_reads(run, roots_hash, table_hashes, probes),
                                label=f"{plan.cfg.name}/{run['name']}",  # unique per config in a shared history
                                extra={"run": run, "eval_config": eval_cfg, "probe": probe,
                                       "history": str(runner.art / HISTORY)})
                evals.setdefault(label, []).append({**ev, "protocol": eval_cfg.protocol})
    plan.catalog.entries["evaluations"] = {"kind": "evaluations", "evaluations": evals,
                                           "content_hash": _hash_of(evals)}
    return evals


# ---- report ---------------------------------------------------------------------------------------------------------
def _report(call: Call) -> dict:
    """``results.md`` / ``results.json`` / ``results.png`` of every evaluation; with several protocols one report
    each under ``<protocol>/``, and with ``evaluate.paper`` the paper's tables beside ours and the registered bar
    (``pipeline.paper``) in the top ``results.md``. ``macco report`` runs it too (no key), handing the results it
    read (``extra``: ``results``, ``title``, ``note``, ``control``)."""
    from model.benchmarks.registry import REPORT_ROWS
    from model.losses import REPORT_TERMS
    from pipeline.report import write_report

    outputs = {"report": {"kind": "report", "dir": str(call.out), "content_hash": None}}
    if "results" in call.extra:
        x = call.extra
        return {**write_report(x["results"], call.out, x["title"], x["note"], control=x["control"],
                               rows=REPORT_ROWS, terms=REPORT_TERMS), "outputs": outputs}
    evals, plan = call.extra["evaluations"], call.section
    by_protocol: dict[str | None, dict[str, list[dict]]] = {}
    for label, runs in evals.items():
        for e in runs:
            p = e.get("protocol") if plan.protocols or plan.paper else None  # the paper section reads it
            by_protocol.setdefault(p, {}).setdefault(label, []).append(json.loads(Path(e["results"]).read_text()))
    untrained = ("base", *plan.weights)
    counts = sorted({len(v) // max(1, len(by_protocol)) for k, v in evals.items() if k not in untrained})
    n_seeds = "/".join(map(str, counts))
    data = "Synthetic world" if call.extra.get("world", True) else "The config's data"
    note = (f"{data}, {n_seeds} seed{'s' if counts != [1] else ''} per fine-tune "
            f"({'mean ± sd over seeds' if counts != [1] else 'a single seed: no spread estimate'}).")
    title = f"{call.label}: base vs fine-tunes"
    if not plan.protocols and not plan.paper:
        rep = write_report(by_protocol.get(None, {}), call.out, title, note, control=plan.control,
                           untested=untrained, rows=REPORT_ROWS, terms=REPORT_TERMS)
    else:
        from pipeline.paper import paper_report

        rep = paper_report(by_protocol, call.out, title, note, control=plan.control, untested=untrained,
                           paper=plan.paper, rows=REPORT_ROWS, terms=REPORT_TERMS)
    return {**rep, "outputs": outputs}


def _publish_report(call: Call, result, sink) -> None:
    """The report's table as the markdown artifact ``evaluation-results-<config name>``."""
    if isinstance(result, dict):
        sink.markdown(f"evaluation-results-{call.label}", result["table"], f"{call.label}: evaluation results")


def _drive_report(stage: Stage, plan, runner) -> dict:
    rep = runner.run(stage, plan.cfg.evaluate, plan.catalog.subset(stage.reads), label=plan.cfg.name,
                     out=runner.art / "runs" / plan.cfg.name,
                     extra={"evaluations": plan.catalog.entry("evaluations")["evaluations"],
                            "world": bool(plan.cfg.world_run)})
    print(Path(rep["markdown"]).read_text())
    return rep


STAGES = (
    Stage("validate", "validate", (*MASK_TABLES, *GIVEN, "errors"), ("validation",), roots("pipeline.validate"),
          _validate, packages=packages("duckdb", "pyarrow"), publish=_publish_checks, config=ValidateConfig),
    Stage("train", "train", (*TRAINING_TABLES, *GIVEN, "images"), ("runs",), roots("model.train"), _train,
          after=("validation",), extras=_train_extras, drive=_drive_train, packages=packages(*MODEL_PACKAGES),
          folder=_run_folder, watch=_watch_train, config=TrainPlan),
    Stage("evaluate", "evaluate", ("runs", "source?", *TRAINING_TABLES, "images"), ("evaluations",), _evaluate_code,
          _evaluate, drive=_drive_evaluate, packages=lambda section: (
              *MODEL_PACKAGES, "scikit-learn", "scipy", "spacy", section.settings.spacy_model), check=_check_evaluate,
          config=EvaluatePlan),
    Stage("report", "evaluate", ("evaluations",), ("report",), roots("pipeline.report", "pipeline.paper"), _report,
          drive=_drive_report, cached=False, packages=packages("matplotlib", "scipy"), publish=_publish_report,
          config=EvaluatePlan),
)
