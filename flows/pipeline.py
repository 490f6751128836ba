"""The MACCO DAG as one Prefect flow: world -> captions -> (tokenizer) -> parse -> ground -> masks -> validate ->
train -> evaluate -> report.

Parameters: ``config`` (YAML path), ``stages`` (which to run; others are read back from the artifacts folder
and must exist) and ``force`` (which to redo). A stage whose content-keyed output directory is complete is
``Cached``; a forced stage re-runs, and downstream stages re-run only if its output content changed (their
keys hash the upstream content, not the run).
"""
from __future__ import annotations

import errno

from prefect import flow, get_run_logger

from data_schemas.config import ConfigError
from flows.config import load_config
from flows.runner import USER_ERRORS, Runner, StageLocked, StageMissing  # noqa: F401 (API: what a run fails with)
from flows.tasks import PrefectExecutor, user_failure

# a read-only or full disk, a quota, a file-size limit (ulimit -f)
USER_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def flow_log(line: str) -> None:
    """A line in the flow's (or the running task's) log."""
    get_run_logger().info("%s", line)


@flow(name="macco", log_prints=True)
def macco_pipeline(config: str = "configs/demo.yaml", stages: list[str] | None = None,
                   force: list[str] | None = None, overrides: dict | None = None) -> dict:
    """The DAG. A config error, a missing upstream stage, failed mask checks or a damaged table fail the run with
    one line (its state's message; calling the flow raises the error itself), not a traceback."""
    try:
        return _pipeline(config, stages, force, overrides)
    except (*USER_ERRORS, OSError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, USER_ERRORS) and exc.errno not in USER_ERRNOS:
            raise
        return user_failure(exc, "config error: " if isinstance(exc, ConfigError) else "")


def _pipeline(config: str, stages: list[str] | None, force: list[str] | None, overrides: dict | None) -> dict:
    cfg = load_config(config, overrides)
    runner = Runner(cfg.artifacts, stages, force, PrefectExecutor(), flow_log)
    return {"config": config, **runner.run_dag(cfg)}  # flows.registry.ORDER, each stage through the runner


def run_flow(config: str, stages: list[str] | None = None, force: list[str] | None = None,
             overrides: dict | None = None) -> dict:
    """Run the flow without a deployment, on a Dask cluster when the config names one."""
    cfg = load_config(config, overrides)
    flow_obj = macco_pipeline
    dask = cfg.dask
    if dask.address or dask.local_workers:
        from prefect_dask import DaskTaskRunner

        runner = DaskTaskRunner(address=dask.address) if dask.address else DaskTaskRunner(
            cluster_kwargs={"n_workers": dask.local_workers, "threads_per_worker": 1, "processes": True,
                            "dashboard_address": None})
        flow_obj = macco_pipeline.with_options(task_runner=runner)
    return flow_obj(config=config, stages=stages, force=force, overrides=overrides)
