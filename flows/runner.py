"""The runner: runs the registry's stages and owns their guarantees, once for the flow and for every ``macco`` verb.

- **Keys and paths.** A stage's output is ``artifacts/<stage>/<key>/`` (a training run ``artifacts/runs/<name>-<key>``);
  every name joined to a folder is one path component (``safe_name``); a verb writes only into its ``--out`` folder.
- **Locks.** One exclusive lock per output while the stage decides about it and writes it: a second writer fails at
  once with one line naming the holder. A lock file that is a link, and a symbolic link on the way to a stage folder,
  are refused in one line. The shared ``errors`` table is written under its own lock (``data_schemas.write_table``).
- **The done rule** (``stage_done``): ``stage.json`` exists and every table and file it lists is as written; a
  damaged ``stage.json`` or a table that differs is named and the stage redone, never a traceback.
- **Never replacing what is not ours.** A file where a table or folder is to be written, or a non-empty folder that
  is not a table, is refused in one line before any work.

The work runs through an executor: in-process (``LocalExecutor``, the verbs) or as Prefect tasks
(``flows.tasks.PrefectExecutor``, the flow). Nothing here imports Prefect.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from data_schemas import (TABLES, InputFileError, TableError, lock_file, made_from, refuse_unreadable,
                          replace_file, verify_table)
from data_schemas.checks import STAGE_RECORD, recorded_difference
from data_schemas.config import ConfigError
from data_schemas.locks import StageLocked, output_lock  # noqa: F401 (API: the runner's lock, also model.train's)
from flows.catalog import Catalog, located, portable
from flows.registry import BY_NAME, ORDER, STAGES
from flows.stage import Call, Stage, _print, stage_key

STAGE_FILE = STAGE_RECORD  # the stage's record, which validate also compares the stage's tables with
# what a run fails with as one line (exit 2): the user's input, config or artifacts, not a bug
USER_ERRORS = (InputFileError, ConfigError, FileNotFoundError)


class StageMissing(InputFileError):
    """A stage not selected whose output is not there (run it first)."""


# ---- the stage record: stage.json and the done rule --------------------------------------------------------------
def read_stage(d: str | Path) -> dict:
    """A stage's ``stage.json``; a damaged one is a ``TableError`` naming the file."""
    path = Path(d) / STAGE_FILE
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TableError(f"{path}: the stage record is damaged ({type(exc).__name__}: {exc}); rerun the stage "
                         "(the runner redoes it)") from exc
    if not isinstance(m, dict):
        raise TableError(f"{path}: the stage record is damaged (a JSON object expected); rerun the stage")
    return located(m, _root_of(d))


def _root_of(d: str | Path) -> Path:
    """The artifacts root of a stage folder (``<root>/<stage>/<key>``, ``<root>/runs/<name>-<key>``): the record's
    paths are stored relative to it (``flows.catalog.portable``), so a copied ``artifacts/`` names its own files."""
    return Path(d).parent.parent


def stage_done(d: str | Path, log: Callable[[str], None] | None = None) -> bool:
    """The one rule for "already done": ``stage.json`` exists and every table and file it lists is complete (a
    table: its parts as written, ``data_schemas.verify_table``, and its manifest the one the stage recorded:
    ``recorded_difference``; a file: present with the size it had when the stage finished). A damaged
    ``stage.json`` or a table that differs is not done (``log`` names it and what differs)."""
    if not (Path(d) / STAGE_FILE).exists():
        return False
    try:
        m = read_stage(d)
        sizes = m.get("file_bytes", {})
        if "file_list" in m:  # a stage of many files (the world's images) lists them beside stage.json
            listed = Path(d) / m["file_list"]
            if not listed.is_file():
                return False
            sizes = {str(Path(d) / f): n for f, n in json.loads(listed.read_text()).items()}
        tables = [e for e in m.get("outputs", {}).values() if e.get("kind") == "table"]
        files = [*m.get("files", []), *sizes]
        for e in tables:
            verify_table(e["dir"])
            problem = recorded_difference(e["dir"], e)
            if problem is not None:
                raise TableError(problem)
    except (TableError, json.JSONDecodeError, AttributeError, KeyError, TypeError) as exc:
        (log or _print)(f"{d}: {exc}: not done, redone")
        return False
    return all(_file_as_written(f, sizes.get(f)) for f in files)


def _file_as_written(path: str, size: int | None) -> bool:
    try:
        st = Path(path).stat()
    except OSError:  # missing
        return False
    return size is None or st.st_size == size


def write_stage(d: Path, manifest: dict) -> dict:
    """Write ``stage.json`` atomically, its paths relative to the artifacts root; the size of every file it lists is
    recorded (``file_bytes``)."""
    if manifest.get("files"):
        manifest = {**manifest, "file_bytes": {f: Path(f).stat().st_size for f in manifest["files"]}}
    d.mkdir(parents=True, exist_ok=True)
    stored = portable(json.loads(json.dumps(manifest, default=str)), _root_of(d))
    replace_file(d / STAGE_FILE, lambda tmp: tmp.write_text(json.dumps(stored, indent=2, sort_keys=True)))
    return manifest


# ---- locks, paths ---------------------------------------------------------------------------------------------------
def refuse_links(path: Path, root: Path) -> None:
    """One line when ``path``, or a folder between ``root`` (which may be a link) and it, is a symbolic link: the
    runner writes and removes (``--force``) only what it made, never outside ``root``."""
    try:
        rel = path.relative_to(root)
    except ValueError:  # not under root: the path itself
        root, rel = path.parent, Path(path.name)
    for i in range(len(rel.parts)):
        p = root.joinpath(*rel.parts[:i + 1])
        if p.is_symlink():
            raise InputFileError(f"{p}: is a symbolic link (to {os.readlink(p)}); the runner never writes into or "
                                 f"removes a folder through a link it did not make: remove the link (rm {p}), or "
                                 f"move the folder it points to there, and rerun")


def check_writable(path: Path) -> None:
    """One line, before any work, when ``path`` (or the folder it would be created in) cannot be written."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe != path and not probe.is_dir():
        raise InputFileError(f"{probe}: is a file, not a folder: {path} cannot be written under it")
    if not os.access(probe, os.W_OK if probe.is_file() else os.W_OK | os.X_OK):
        raise InputFileError(f"{path}: cannot write here ({probe} is read-only for this user); give a writable "
                             "output folder")


def check_outputs(stage: Stage, out: Path, files: tuple[str, ...] = ()) -> list[Path]:
    """What a verb's run of ``stage`` writes under ``out`` (``files``: the files the verb names, e.g. ``macco
    eval --out FILE``'s; else its tables; none: ``out`` itself), each checked before any work: writable, a file
    that is a folder, a table path that is a file or another folder, refused in one line."""
    check_writable(out)
    if out.exists() and not out.is_dir():
        raise InputFileError(f"{out}: is a file, not a folder; give a folder for the stage's output")
    for f in (out / n for n in files):
        if f.is_dir():
            raise InputFileError(f"{f}: is a folder, not a file; give a file path for the output")
    if files:
        return [out / n for n in files]
    tables = [out / w for w in stage.writes if w in TABLES]
    for t in tables:
        refuse_links(t, out)  # ``out`` itself may be a link: the folder the user gave
        refuse_unreadable(t)
    return [t for t in tables if t.name != "errors"] or [out]


# ---- executors ------------------------------------------------------------------------------------------------------
def complete(stage: Stage, call: Call) -> dict:
    """A stage's work and its record: a finished output is read back; else ``stage.run``, then ``stage.json``."""
    if stage.cached and stage_done(call.out, call.log):
        call.log(f"already done at {call.out}: read back, not recomputed")
        return read_stage(call.out)
    with made_from(call.inputs.lineage()):  # each table it writes records what it was made from
        body = stage.run(call)
    return write_stage(call.out, {"stage": stage.name, "key": call.key, "dir": str(call.out), **body})


class LocalExecutor:
    """Runs a stage in this process (its shards one after the other)."""

    def execute(self, stage: Stage, call: Call, refresh: bool) -> dict:
        return complete(stage, call)


# ---- the runner -----------------------------------------------------------------------------------------------------
@dataclass
class Plan:
    """One run of the DAG: its config (``FlowConfig``), the catalog of what the stages before made, and each
    stage's result (``out``)."""
    cfg: Any
    catalog: Catalog = field(default_factory=Catalog)
    out: dict = field(default_factory=dict)


class Runner:
    """Runs registry stages into an artifacts root (the flow): selection, force, keys, locks, the done rule."""

    def __init__(self, artifacts: str | Path, stages: list[str] | None = None, force: list[str] | None = None,
                 executor=None, log: Callable[[str], None] = _print):
        stages, force = list(stages or STAGES), list(force or [])
        unknown = sorted(set(stages) - set(STAGES)) + sorted(set(force) - set(STAGES))
        if unknown:
            raise ConfigError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
        self.art, self.stages, self.force = Path(artifacts), stages, force
        self.executor, self.log = executor or LocalExecutor(), log
        self.cfg = None  # the flow config of run_dag (which stages run at all)
        self.spent: dict[str, float] = {}  # seconds each stage ran in this run (not read back)

    def needed(self, stage: str) -> bool:
        """Whether ``stage`` or anything after it is selected (otherwise the flow ends before it)."""
        return any(STAGES.index(s) >= STAGES.index(stage) for s in self.stages)

    def stage_dir(self, stage: Stage, key: str, label: str = "") -> Path:
        """``<artifacts>/<stage>/<key>``, or where the stage's ``folder`` hook puts it."""
        return self.art / stage.folder(key, label) if stage.folder else self.art / stage.name / key

    def prepare(self, stage: str, out: Path) -> tuple[bool, bool]:
        """(run it?, refresh the Prefect cache?) for a stage whose output folder is ``out``."""
        if stage not in self.stages:
            if stage_done(out, self.log):
                return False, False
            first = min(STAGES.index(s) for s in self.stages)
            also = [s for s in STAGES[STAGES.index(stage) + 1:first]  # not selected, and they need this one
                    if self.cfg is None or BY_NAME[s].when is None or BY_NAME[s].when(self.cfg)]
            more = f" (and the stages after it that are not selected: {', '.join(also)})" if also else ""
            raise StageMissing(f"stage {stage!r} is not selected and has no complete output at {out}: the selected "
                               f"stages {self.stages} need it{more}; run them first (stages=[{stage!r}, ...], or "
                               "the full deployment)")
        if stage in self.force and out.exists():
            shutil.rmtree(out)
        elif (out / STAGE_FILE).exists() and not stage_done(out, self.log):
            (out / STAGE_FILE).unlink()  # a damaged or stale record: the stage is redone (its finished shards kept)
        return True, not stage_done(out)

    def run(self, stage: Stage, section: Any, inputs: Catalog, *, read_hashes: list | None = None,
            extras: list | tuple = (), label: str = "", out: Path | None = None, extra: dict | None = None) -> dict:
        """One run of ``stage``: its key, its folder, under its lock; done (read back), or run by the executor."""
        if read_hashes is None:
            read_hashes = inputs.hashes(stage.reads)
        key = stage_key(stage, read_hashes, section, extras)
        out = Path(out) if out is not None else self.stage_dir(stage, key, label)
        call = Call(section, inputs, out, key, log=self.log, label=label, extra=extra or {})
        refuse_links(out, self.art)  # a stage folder (or one above it) that is a link: one line, nothing followed
        check_writable(out)  # before any work (a read-only artifacts folder: one line, nothing computed)
        with output_lock(lock_file(out, "output"), out):
            if not stage.cached:  # written every time (the report)
                return self._execute(stage, call, True)
            run, refresh = self.prepare(stage.name, out)
            if not run:
                return read_stage(out)
            return self._execute(stage, call, refresh)

    def check_before_work(self, selected: list[str], cfg) -> None:
        """Every folder the selected stages write under and every input they check (``Stage.check``), before the
        first stage works: a file where ``artifacts/ground`` goes was found after world, captions and parse ran."""
        for name in selected:
            root = self.stage_dir(BY_NAME[name], "key", "run").parent
            refuse_links(root, self.art)
            if root.exists() and not root.is_dir():
                raise InputFileError(f"{root}: is a file, not a folder (stage {name}'s outputs go under it): move it "
                                     "aside and rerun")
            check_writable(root)
        for name in selected:
            if BY_NAME[name].check is not None:
                BY_NAME[name].check(cfg)

    def _execute(self, stage: Stage, call: Call, refresh: bool) -> dict:
        """The executor's run of ``call``, its seconds added to the stage's when it ran (a read-back is no timing)."""
        t0 = time.perf_counter()
        m = self.executor.execute(stage, call, refresh)
        if refresh:
            self.spent[stage.name] = self.spent.get(stage.name, 0.0) + time.perf_counter() - t0
        return m

    def run_dag(self, cfg) -> dict:
        """Every stage in order (``flows.registry.ORDER``) up to the last selected one."""
        plan, self.cfg = Plan(cfg), cfg
        todo = [s.name for s in ORDER if self.needed(s.name) and (s.when is None or s.when(cfg))]
        self.check_before_work([s for s in todo if s in self.stages], cfg)
        for stage in ORDER:
            if not self.needed(stage.name):
                break
            if stage.when is not None and not stage.when(plan.cfg):
                continue
            self.log(self._eta(todo, stage.name))
            result = (stage.drive or _drive_once)(stage, plan, self)
            plan.out[stage.name] = result
        self._save_times()
        from pipeline.inspection import refresh_duckdb

        refresh_duckdb(self.art)  # macco inspect's macco.duckdb shows the tables and history as they are now
        return plan.out

    def _eta(self, todo: list[str], stage: str) -> str:
        """``pipeline: stage k/N (name)``, with the time the stages left took the last time they ran (where known)."""
        left = todo[todo.index(stage):]
        last = _times(self.art)
        known, unknown = sum(last.get(s, 0.0) for s in left), [s for s in left if s not in last]
        eta = f"; the stages left took {known / 60:.1f} min the last time they ran" if known else ""
        note = f" (never timed here: {', '.join(unknown)})" if unknown and known else ""
        return (f"pipeline: stage {todo.index(stage) + 1}/{len(todo)} ({stage}){eta}{note}; "
                "finished ones come back Cached")

    def _save_times(self) -> None:
        if self.spent:
            self.art.mkdir(parents=True, exist_ok=True)
            times = {**_times(self.art), **{k: round(v, 1) for k, v in self.spent.items()}}
            replace_file(self.art / TIMES_FILE, lambda tmp: tmp.write_text(json.dumps(times, indent=1, sort_keys=True)))


TIMES_FILE = ".stage_times.json"  # under the artifacts root: each stage's seconds the last time it ran


def _times(art: Path) -> dict[str, float]:
    try:
        data = json.loads((art / TIMES_FILE).read_text())
        return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
    except (OSError, ValueError, AttributeError):  # none, damaged, or not a mapping: never timed
        return {}


def _drive_once(stage: Stage, plan: Plan, runner: Runner) -> dict:
    """A stage that runs once: its typed section, its reads from the catalog; its outputs join the catalog."""
    for name in stage.reads if stage.given else ():  # a read no stage of this run wrote: the config's (user data)
        if not name.endswith("?") and not plan.catalog.has(name):
            plan.catalog.entries[name] = stage.given(name, plan.cfg)
    m = runner.run(stage, getattr(plan.cfg, stage.section), plan.catalog.subset(stage.reads))
    plan.catalog.add(stage.name, m)
    if stage.feeds:  # what it made changes the later stages' config (e.g. the model folder it built)
        plan.cfg = stage.feeds(plan.cfg, m)
    return m


# ---- a verb: one stage into the user's folder ----------------------------------------------------------------------
def run_in_folder(stage: str, section: Any, inputs: Catalog, out: str | Path | None, *,
                  log: Callable[[str], None] = _print, label: str = "", extra: dict | None = None,
                  on_row: Callable[[dict], None] | None = None,
                  progress: Callable[[int, int], None] | None = None, files: tuple[str, ...] = ()) -> dict:
    """A ``macco`` verb's run of ``stage`` into ``out`` (the folder it was given): the same record's work and input
    checks as the flow, its outputs checked and locked first (a second writer of one of its tables, or of one of
    the ``files`` the verb names in ``out``, fails at once; the shared errors table is written under its own lock),
    no key, no cache. Returns the record's manifest fields."""
    record = BY_NAME[stage]
    if out is None:  # a stage that writes nothing for a verb (validate prints its checks)
        return record.run(Call(section, inputs, Path(), "", log=log, on_row=on_row, progress=progress, label=label,
                               extra=extra or {}))
    out = Path(out) if Path(out).name else Path(out).absolute()  # "." has no name to put a lock file beside
    targets = check_outputs(record, out, files)
    made = [d for d in dict.fromkeys(lock_file(t, "output").parent for t in targets) if not d.exists()]
    try:
        with ExitStack() as stack:  # each lock file beside what it locks: the folder, or each table in it
            for t in targets:
                stack.enter_context(output_lock(lock_file(t, "output"), t))
            with made_from(inputs.lineage()):
                return record.run(Call(section, inputs, out, "", log=log, on_row=on_row, progress=progress,
                                       label=label, extra=extra or {}))
    except BaseException:
        _drop_lock_only(made)
        raise


def _drop_lock_only(folders: list[Path]) -> None:
    """A refused or failed verb leaves no folder behind that it made only to hold its lock files."""
    for d in reversed(folders):
        if d.is_dir() and all(f.name.endswith(".output.lock") and f.is_file() for f in d.iterdir()):
            shutil.rmtree(d)
