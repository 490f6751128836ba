"""The MACCO DAG as one Prefect flow: world -> captions -> (tokenizer) -> parse -> ground -> masks -> validate ->
train -> evaluate -> report.

Parameters: ``config`` (YAML path), ``stages`` (which to run; others are read back from the artifacts folder
and must exist) and ``force`` (which to redo). A stage whose content-keyed output directory is complete is
``Cached``; a forced stage re-runs, and downstream stages re-run only if its output content changed (their
keys hash the upstream content, not the run).
"""
from __future__ import annotations

import shutil
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from prefect import flow, get_run_logger, unmapped
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.states import Failed

from data_schemas import InputFileError
from data_schemas.config import ConfigError

from flows.config import STAGES, base_sections, key_of, load_config, use_built_folder
from flows.dag import BY_NAME, PREPROCESSING, Stage, folder_key, read_stage, stage_done, stage_key
from flows.tasks import evaluate_task, report_task, shard_task, stage_task, train_task, validate_task


def _version(*modules: str) -> str:
    from pipeline.stages import code_version

    return code_version(*modules)


HISTORY = "eval_results"  # artifacts/eval_results: every evaluation's rows, appended (never replaced)


class StageMissing(InputFileError):
    """A stage not selected whose output is not there (run it first)."""


class StageLocked(InputFileError):
    """Another run writes this stage's output now."""


# what a run fails with as one line (the flow run's message; `macco run` prints it, exit 2): the user's input,
# config or artifacts, not a bug
USER_ERRORS = (InputFileError, ConfigError, FileNotFoundError)


@contextmanager
def stage_lock(artifacts: Path, out: Path):
    """An exclusive lock on one stage output (``artifacts/.locks/<stage>-<key>.lock``, outside the directory a
    forced stage removes) for as long as this run decides about it and writes it: a second run of the same
    stage key fails at once with a message, instead of deleting or overwriting the first one's files."""
    import fcntl
    import os

    locks = artifacts / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    path = locks / f"{out.parent.name}-{out.name}.lock"
    f = open(path, "a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise StageLocked(f"{out}: another macco run is writing this stage ({holder}; lock {path}); wait for "
                              "it to finish, then rerun (finished stages come back Cached)") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        f.flush()
        yield
    finally:
        f.close()  # closing releases the lock


class _Runner:
    def __init__(self, cfg: dict, stages: list[str], force: list[str]):
        unknown = sorted(set(stages) - set(STAGES)) + sorted(set(force) - set(STAGES))
        if unknown:
            raise ConfigError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
        self.cfg, self.stages, self.force = cfg, stages, force
        self.art = Path(cfg["artifacts"])
        self.log = get_run_logger()

    def needed(self, stage: str) -> bool:
        """Whether ``stage`` or anything after it is selected (otherwise the flow ends before it)."""
        return any(STAGES.index(s) >= STAGES.index(stage) for s in self.stages)

    def dir(self, stage: str, key: str) -> Path:
        return self.art / stage / key

    def prepare(self, stage: str, out: Path) -> tuple[bool, bool]:
        """(run it?, refresh the Prefect cache?) for a stage whose output directory is ``out``."""
        if stage not in self.stages:
            if stage_done(out):
                return False, False
            raise StageMissing(f"stage {stage!r} is not selected and has no complete output at {out}: the selected "
                               f"stages {self.stages} need it; run it first (stages=[{stage!r}, ...], or the full "
                               "deployment)")
        if stage in self.force and out.exists():
            shutil.rmtree(out)
        return True, not stage_done(out)

    def call(self, stage: str, task, out: Path, key: str, before=None, **kw) -> dict:
        """``task`` for the output ``out`` unless it is done (read back) or not selected; ``before`` runs first
        when the output is to be (re)made (a mapped stage's shards)."""
        with stage_lock(self.art, out):
            run, refresh = self.prepare(stage, out)
            if not run:
                return read_stage(out)
            if refresh and before is not None:
                before()
            t = task.with_options(refresh_cache=True) if refresh else task
            return t(**kw, out=str(out), key=key)

    def stage(self, stage: Stage, manifests: dict[str, dict]) -> dict:
        """A preprocessing stage through the generic tasks: its shards mapped over the flow's task runner
        (threads, or Dask workers) when it has them, then the task that publishes its manifest."""
        key = stage_key(stage, manifests, self.cfg)
        out, section = self.dir(stage.name, key), self.cfg[stage.section]
        inputs = {i: manifests[i] for i in stage.inputs}
        shards = (lambda: self._shards(stage, inputs, section, out, key)) if stage.shards is not None else None
        return self.call(stage.name, stage_task, out, key, before=shards, name=stage.name, inputs=inputs,
                         cfg=section)

    def _shards(self, stage: Stage, inputs: dict, section: dict, out: Path, key: str) -> None:
        from prefect.futures import as_completed

        n = stage.shards(inputs, section)
        progress = create_progress_artifact(progress=0.0, key=f"{stage.name}-shards",
                                            description=f"{stage.name}: shards written")
        futures = shard_task.with_options(refresh_cache=True).map(
            name=unmapped(stage.name), inputs=unmapped(inputs), cfg=unmapped(section), out=unmapped(str(out)),
            shard=list(range(n)), key=unmapped(key))
        for done, fut in enumerate(as_completed(futures), 1):
            fut.result()
            update_progress_artifact(progress, progress=100.0 * done / n)
            self.log.info("%s: shard %d/%d done", stage.name, done, n)


@flow(name="macco", log_prints=True)
def macco_pipeline(config: str = "configs/demo.yaml", stages: list[str] | None = None,
                   force: list[str] | None = None, overrides: dict | None = None) -> dict:
    """The DAG. A config error, a missing upstream stage, failed mask checks or a damaged table fail the run with
    one line (its state's message; calling the flow raises the error itself), not a traceback."""
    try:
        return _pipeline(config, stages, force, overrides)
    except USER_ERRORS as exc:
        line = " ".join(str(exc).split())
        line = f"config error: {line}" if isinstance(exc, ConfigError) else line
        get_run_logger().error("%s", line)
        return Failed(message=line, data=exc)


def _pipeline(config: str, stages: list[str] | None, force: list[str] | None, overrides: dict | None) -> dict:
    cfg = load_config(config, overrides)
    r = _Runner(cfg, list(stages or STAGES), list(force or []))
    out: dict = {"config": config}

    # the source: the world (the embedded default), a COCO-layout root, or CSV/TSV, image folder, webdataset;
    # then the preprocessing stages (flows.dag.PREPROCESSING), each keyed by what it reads
    data = cfg["data"]
    world_run = data["source"] == "coco" and data["root"] is None
    m: dict[str, dict] = {}
    if world_run:
        m["source"] = out["world"] = r.stage(BY_NAME["world"], m)
    else:
        m["source"] = {"content_hash": source_fingerprint(data)}
    for stage in PREPROCESSING[1:]:  # after the world
        if not r.needed(stage.name):
            return out
        if stage.when is not None and not stage.when(cfg[stage.section]):
            continue
        m[stage.name] = out[stage.name] = r.stage(stage, m)
        if stage.name == "tokenizer":  # the later stages read the model folder it built
            r.cfg = cfg = use_built_folder(cfg, m["tokenizer"]["folder"])
    captions, parse, ground, masks = (m[s] for s in ("captions", "parse", "ground", "masks"))
    root, root_hash = captions["root"], m["source"]["content_hash"]  # the image root every later stage reads

    if not r.needed("validate"):
        return out
    tables = {"captions": captions["tables"]["captions"]["dir"],
              "scene_graphs": parse["tables"]["scene_graphs"]["dir"],
              "token_masks": parse["tables"]["token_masks"]["dir"], "regions": ground["tables"]["regions"]["dir"],
              "patch_masks": masks["tables"]["patch_masks"]["dir"],
              "errors": [m[s]["tables"]["errors"]["dir"] for s in ("captions", "parse", "ground", "masks")]}
    key = key_of("validate", captions["content_hash"], parse["content_hash"], ground["content_hash"],
                 masks["content_hash"], cfg["validate"], _version("data_schemas.checks", *(
                     f"data_schemas.{t}" for t in ("captions", "scene_graphs", "token_masks", "regions",
                                                   "patch_masks", "errors"))))
    vdir = r.dir("validate", key)
    if "validate" in r.stages:
        out["validate"] = validate_task(tables, cfg["validate"]["params"], str(vdir), key)
    else:
        import json

        rep = vdir / "report.json"
        if not rep.exists() or json.loads(rep.read_text())["status"] != "pass":
            raise StageMissing(f"the mask tables have no passing validation at {rep}; run stages=['validate']")
        out["validate"] = json.loads(rep.read_text())

    if not r.needed("train"):
        return out
    # training: an optional base run, then each fine-tune x seed from the base's export
    from model.export import file_sha256

    tcfg = cfg["train"]  # every section checked against TrainConfig by load_config
    bases = base_sections(tcfg["base"])
    train_tables = {k: tables[k] for k in ("captions", "token_masks", "scene_graphs", "regions")}
    model_code = _version("model", "model.task", "model.masked", "model.siglip", "model.predictors", "model.slots",
                          "model.losses", "model.data", "model.scene", "model.train", "model.train_config",
                          "model.optim", "model.runlog", "model.export")
    table_hashes = [parse["content_hash"], ground["content_hash"], captions["content_hash"]]

    def settings_for(over: dict, seed: int, init: dict | None) -> tuple[dict, str]:
        arch = over.get("arch", tcfg["common"].get("arch", tcfg["arch"]))  # as flows.config.run_archs
        s = {**tcfg["common"], **over, "arch": arch, "seed": seed, "tables": train_tables, "image_root": root}
        if init is not None:
            s["pretrained"] = init["export_pt"]
        elif tcfg["pretrained"]:
            s["pretrained"] = tcfg["pretrained"]
        # root_hash: the data root's content (the world's scene truth, which mode scene reads, and its images)
        # not in the key: paths, and how a run is checkpointed and resumed (the same run either way)
        k = key_of("train", {a: b for a, b in s.items()
                             if a not in ("tables", "image_root", "pretrained", "resume", "save_every")},
                   table_hashes, init["content_hash"] if init else weights_key(s.get("pretrained")), model_code,
                   root_hash, file_sha256(s["scenes"]) if s.get("scenes") else None, *folder_key(s["arch"]))
        return s, k

    runs: dict[str, list[dict]] = {}
    base = None
    for i, section in enumerate(bases):  # a chain: each base stage starts from the previous one's export
        name = "base" if i == len(bases) - 1 else f"base{i + 1}-{section.get('mode', 'macco')}"
        s, k = settings_for(section, int(section.get("seed", 0)), base)
        base = r.call("train", train_task, r.art / "runs" / f"{name}-{k}", k, name=name, settings=s,
                      nproc=tcfg["torchrun_nproc"])
    if base is not None:
        runs["base"] = [base]
    for name, over in tcfg["runs"].items():
        seeds = over.get("seeds", tcfg["seeds"])  # a run may have its own seeds
        over = {a: b for a, b in over.items() if a != "seeds"}
        for seed in seeds:
            s, k = settings_for(over, seed, base)
            runs.setdefault(name, []).append(
                r.call("train", train_task, r.art / "runs" / f"{name}-s{seed}-{k}", k, name=f"{name}-s{seed}",
                       settings=s, nproc=tcfg["torchrun_nproc"]))
    out["train"] = runs

    if not r.needed("evaluate"):
        return out
    # evaluation of every model on every benchmark set
    ecfg = cfg["evaluate"]
    if ecfg["roots"]:
        roots = dict(ecfg["roots"])
        roots_hash = key_of(sorted(roots.items()))
    elif world_run:
        from pipeline.world_benchmarks import benchmark_roots

        roots, roots_hash = benchmark_roots(root), root_hash
    else:
        raise ValueError("config evaluate.roots: name the benchmark roots to evaluate on (only the synthetic "
                         "world brings its own), or leave 'evaluate' out of the stages")
    if ecfg["benchmarks"] != "all":
        roots = {b: roots[b] for b in ecfg["benchmarks"]}
    eval_cfg = {**ecfg["settings"], "roots": roots}
    if not ecfg["roots"]:  # the synthetic world's sets hold a few files of each benchmark: partial groups by design
        eval_cfg.setdefault("allow_partial", True)
    # the probes need the world's scene truth: on the synthetic world only
    probe_cfg = {"world": root, "tables": train_tables} \
        if world_run and ecfg["probes"] else None
    models = list(runs) if ecfg["models"] == "all" else list(ecfg["models"])
    evals: dict[str, list[dict]] = {}
    from model.benchmarks.registry import code_modules

    eval_code = _version(*code_modules())  # the harness and every registered benchmark's rule
    # the probes read the world and the tables, and rebuild a run's training task from its checkpoint
    probe_key = (sorted(probe_cfg["tables"]), table_hashes, root_hash, _version("model.probes"), model_code) \
        if probe_cfg else None
    for label in models:
        for run in runs[label]:
            k = key_of("evaluate", run["content_hash"], {**ecfg["settings"], "roots": sorted(roots)}, roots_hash,
                       eval_code, probe_key)
            evals.setdefault(label, []).append(
                r.call("evaluate", evaluate_task, r.dir("evaluate", k), k, label=run["name"], run=run,
                       eval_cfg=eval_cfg, history=str(r.art / HISTORY), probe_cfg=probe_cfg))
    out["evaluate"] = evals

    if "report" in r.stages:
        counts = sorted({len(v) for k, v in runs.items() if k != "base"})
        n_seeds = "/".join(map(str, counts))
        note = (f"Synthetic world, {n_seeds} seed{'s' if counts != [1] else ''} per fine-tune "
                f"({'mean ± sd over seeds' if counts != [1] else 'a single seed: no spread estimate'}).")
        report_dir = r.art / "runs" / cfg["name"]
        out["report"] = report_task(evals, str(report_dir), f"{cfg['name']}: base vs fine-tunes", note,
                                    ecfg["control"])
        print(open(out["report"]["markdown"]).read())
    return out


def weights_key(pretrained: str | None) -> str | None:
    """A weights file's sha256 (a file replaced at the same path is new weights), else the name (an open_clip
    pretrained tag) or None."""
    from model.export import file_sha256

    return file_sha256(pretrained) if pretrained and Path(pretrained).is_file() else pretrained


def source_fingerprint(data: dict) -> str:
    """What a user's source holds (the captions and ground keys cover it). COCO: the annotation files' and
    the split folders' images' (path, size, mtime); CSV and image folders: the file's content and every image's
    (path, size, mtime); webdataset: the shards' content."""
    from model.export import file_sha256
    from pipeline.sources import expand_shards

    def listing(root: Path) -> list:
        return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                      for p in root.rglob("*") if p.is_file())

    if data["source"] == "coco":  # the annotation files and the split folders' images
        root = Path(data["root"]).resolve()
        anns = sorted((root / "annotations").glob("*.json"))
        images = [listing(root / f"{split}2014") for split in data["splits"] if (root / f"{split}2014").is_dir()]
        return key_of([(str(a), a.stat().st_size, a.stat().st_mtime_ns) for a in anns], images)
    if data["source"] == "webdataset":
        return key_of([(s, file_sha256(s)) for s in expand_shards(data["path"])])
    path = Path(data["path"])
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found (data.path of source {data['source']!r})")
    return key_of(str(path.resolve()), file_sha256(path), listing(Path(data["image_root"] or path.parent)))


def run_flow(config: str, stages: list[str] | None = None, force: list[str] | None = None,
             overrides: dict | None = None) -> dict:
    """Run the flow without a deployment, on a Dask cluster when the config names one."""
    cfg = load_config(config, overrides)
    flow_obj = macco_pipeline
    dask = cfg["dask"]
    if dask["address"] or dask["local_workers"]:
        from prefect_dask import DaskTaskRunner

        runner = DaskTaskRunner(address=dask["address"]) if dask["address"] else DaskTaskRunner(
            cluster_kwargs={"n_workers": dask["local_workers"], "threads_per_worker": 1, "processes": True,
                            "dashboard_address": None})
        flow_obj = macco_pipeline.with_options(task_runner=runner)
    return flow_obj(config=config, stages=stages, force=force, overrides=overrides)
