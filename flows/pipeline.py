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

from flows.catalog import Catalog
from flows.config import STAGES, load_config
from flows.dag import Stage, read_stage, stage_done, stage_key
from flows.nodes import DAG, Plan
from flows.tasks import shard_task, stage_task


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

    def stage(self, stage: Stage, catalog: Catalog) -> dict:
        """A preprocessing stage through the generic tasks: its shards mapped over the flow's task runner
        (threads, or Dask workers) when it has them, then the task that publishes its manifest."""
        key = stage_key(stage, catalog.manifests, self.cfg)
        out, section = self.dir(stage.name, key), self.cfg[stage.section]
        inputs = catalog.subset(stage.inputs)
        shards = (lambda: self._shards(stage, inputs, section, out, key)) if stage.shards is not None else None
        return self.call(stage.name, stage_task, out, key, before=shards, name=stage.name, inputs=inputs,
                         cfg=section)

    def _shards(self, stage: Stage, inputs: dict, section: dict, out: Path, key: str) -> None:
        from prefect.futures import as_completed

        n = stage.shards(Catalog(inputs), section)
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
    plan = Plan(cfg, _Runner(cfg, list(stages or STAGES), list(force or [])))
    plan.out["config"] = config
    for node in DAG:  # flows.nodes: the source, preprocessing, validate, train, evaluate, report
        if not plan.runner.needed(node.name):
            break
        if node.when is not None and not node.when(plan):
            continue
        result = node.run(plan)
        if result is not None:
            plan.out[node.name] = result
    return plan.out


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
