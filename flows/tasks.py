"""Prefect tasks: ``stage_task`` runs any registry stage (``flows.runner.complete``), ``shard_task`` one shard of a
sharded one; ``PrefectExecutor`` maps a stage's shards over the flow's task runner (threads, or Dask workers), then
runs its task. Prefect's cache key (``cache_key_fn``) is the stage's content key, so a new process, a new day or a
colleague sharing the artifacts folder skips finished work, and the flow refreshes a task whose outputs are
missing. What Prefect shows beside the work (the check table, the results table, progress) is each stage's own
``watch`` / ``publish`` hook, shown here as Prefect artifacts (``PrefectPublisher``): nothing here names a stage.
"""
from __future__ import annotations

import re

from prefect import get_run_logger, task, unmapped
from prefect.artifacts import (create_markdown_artifact, create_progress_artifact, create_table_artifact,
                               update_progress_artifact)

from flows.registry import BY_NAME
from flows.stage import Call, Stage
from flows.runner import USER_ERRORS, complete


def user_failure(exc: Exception, prefix: str = ""):
    """A task's or the flow's failure on the user's input (a bad table, a failed check, a config error): a Failed
    state whose message is the error's one line after ``prefix`` (the flow raises ``exc`` from a task's, and fails
    with that line), never an engine traceback in the log."""
    from prefect.states import Failed

    line = prefix + " ".join(str(exc).split())
    get_run_logger().error("%s", line)
    return Failed(message=line, data=exc)


def _key_fn(ctx, params) -> str:
    """The Prefect cache key: the task, the output's content key (the artifact directory's name), the shard."""
    shard = f"-{params['shard']}" if "shard" in params else ""
    return f"{ctx.task.name}-{params['key']}{shard}"


def cached_task(**kw):
    return task(cache_key_fn=_key_fn, persist_result=True, result_serializer="json", **kw)


def artifact_key(text: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from a name."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


class PrefectPublisher:
    """A stage's ``publish`` / ``watch`` sink (``flows.stage.Publisher``): Prefect artifacts."""

    def table(self, key: str, rows: list[dict], description: str | None = None) -> None:
        create_table_artifact(key=artifact_key(key), table=rows, description=description)

    def markdown(self, key: str, markdown: str, description: str | None = None) -> None:
        create_markdown_artifact(key=artifact_key(key), markdown=markdown, description=description)

    def progress(self, key: str, description: str):
        artifact = create_progress_artifact(progress=0.0, key=artifact_key(key), description=description)
        return lambda percent: update_progress_artifact(artifact, progress=percent)


def _stage(name: str, run_name: str, call: Call, key: str) -> dict:
    """Stage ``name`` (``flows.registry.BY_NAME``) for ``call``; a finished output is read back, not redone; what
    the stage shows beside its work (its ``watch`` and ``publish`` hooks) as Prefect artifacts."""
    stage, sink = BY_NAME[name], PrefectPublisher()
    call.log = get_run_logger().info
    if stage.watch:
        stage.watch(call, sink)
    try:
        m = complete(stage, call)
    except USER_ERRORS as exc:  # shown too (a failed gate's check table)
        if stage.publish:
            stage.publish(call, exc, sink)
        return user_failure(exc)
    if stage.publish:
        stage.publish(call, m, sink)
    return m


stage_task = cached_task(name="stage", task_run_name="{run_name}")(_stage)
# a stage written every time (not ``Stage.cached``: the report)
fresh_stage_task = task(name="stage-fresh", task_run_name="{run_name}")(_stage)


@cached_task(name="stage-shard", task_run_name="{name}-shard-{shard}")
def shard_task(name: str, call: Call, shard: int, key: str) -> int:
    """One shard of a sharded stage (its Parquet part survives a kill; ``stage_task`` then publishes)."""
    try:
        BY_NAME[name].run_shard(call, shard)
    except USER_ERRORS as exc:
        return user_failure(exc)
    return shard


def run_trigger() -> str:
    """What started this evaluation: the flow run's name and its deployment (a scheduled ``reevaluate`` names it)."""
    from prefect.runtime import deployment, flow_run

    name = f"flow run {flow_run.name}" if flow_run.name else "flow run"
    return f"{name}, deployment {deployment.name}" if deployment.name else name


def _value(out):
    """A task's return value; a Failed state it returned (``user_failure``) raises the user's error it holds."""
    from prefect.states import State

    if isinstance(out, State):
        exc = out.result(raise_on_failure=False)
        raise exc if isinstance(exc, BaseException) else RuntimeError(out.message)
    return out


class PrefectExecutor:
    """Runs a stage as Prefect tasks: its shards mapped over the flow's task runner, then its task."""

    def execute(self, stage: Stage, call: Call, refresh: bool) -> dict:
        if refresh and stage.shards is not None:
            self._shards(stage, call)
            call.mapped = True
        elif stage.shards is not None:
            call.mapped = True  # a Cached stage: its task reads back what its shards made
        # what started the run, for a stage that records it (the history tells a scheduled re-evaluation from a
        # manual run)
        call.extra["trigger"] = run_trigger()
        run_name = f"{stage.name}-{call.label}" if call.label else stage.name
        if not stage.cached:
            return _value(fresh_stage_task(stage.name, run_name, call, call.key))
        t = stage_task.with_options(refresh_cache=True) if refresh else stage_task
        return _value(t(stage.name, run_name, call, call.key))

    def _shards(self, stage: Stage, call: Call) -> None:
        from prefect.futures import as_completed

        log = get_run_logger()
        n = stage.shards(call)
        progress = create_progress_artifact(progress=0.0, key=f"{stage.name}-shards",
                                            description=f"{stage.name}: shards written")
        futures = shard_task.with_options(refresh_cache=True).map(
            name=unmapped(stage.name), call=unmapped(call), shard=list(range(n)), key=unmapped(call.key))
        for done, fut in enumerate(as_completed(futures), 1):
            fut.result()
            update_progress_artifact(progress, progress=100.0 * done / n)
            log.info("%s: shard %d/%d done", stage.name, done, n)
