"""The stage record (``Stage``), one run of it (``Call``) and the one key function (``stage_key``); the records
themselves are declared in ``flows.records_data`` / ``flows.records_model`` and ordered in ``flows.registry``.

A stage's key (``stage_key``, the recipe written once) is its name, the content hashes of what it reads, its typed
section without the fields flagged ``unkeyed`` (``data_schemas.config.keyed``), its code (``code_of``: the import
closure of its code roots and of the schemas of the tables it reads and writes, with the data files those modules
declare; the record's own module; the versions of the packages it declares) and its declared extras (weights'
sha256, model folders' files). So a changed input, setting, code line, data file or package is never a cache hit,
and a changed path, worker count or device is never a recompute.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from data_schemas import TABLE_NAMES
from data_schemas.config import keyed
from data_schemas.provenance import closure_version, files_version, module_path, package_versions
from flows.catalog import Catalog
from flows.config import key_of


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass
class Call:
    """One run of a stage: its typed section, the catalog of what it reads, its output folder, its key (empty for
    a verb writing into a user's folder), how it reports (``log``: a line; ``on_row``: a training log row),
    ``label`` (a run's name: train and evaluate run once per model), ``progress`` (shards done, for a verb's bar)
    and ``mapped`` (its shards ran already)."""
    section: Any
    inputs: Catalog
    out: Path
    key: str = ""
    log: Callable[[str], None] = _print
    on_row: Callable[[dict], None] | None = None
    progress: Callable[[int, int], None] | None = None  # (done, total) of a sharded stage's shards (a verb's bar)
    label: str = ""
    mapped: bool = False
    extra: dict = field(default_factory=dict)  # what a driver hands the work beyond the section (e.g. a run)


@dataclass(frozen=True)
class Stage:
    """One stage. ``run(call)`` does the work under ``call.out`` and returns the manifest's fields: ``outputs``
    (name -> entry; a table: ``flows.catalog.table_entry``) and whatever it reports. A sharded stage also has
    ``shards(call)`` (how many) and ``run_shard(call, i)``, each shard a task of its own, before ``run`` publishes.
    ``drive`` (train, evaluate, report) runs the stage once per model through the runner; the others run once.
    Whatever else is particular to a stage is a hook here (``folder``, ``given``, ``feeds``, ``watch``,
    ``publish``): the runner and the Prefect tasks name no stage."""
    name: str
    section: str  # the FlowConfig attribute holding its typed config (of type ``config``)
    reads: tuple[str, ...]  # what it reads (hashed into its key); "x?": when present
    writes: tuple[str, ...]  # what it writes
    code: Callable[[Any], tuple[str, ...]]  # section -> its code roots (their import closure is its code)
    run: Callable[[Call], dict]
    after: tuple[str, ...] = ()  # what it waits for without reading it (the validation gate)
    shards: Callable[[Call], int] | None = None
    run_shard: Callable[[Call, int], None] | None = None
    extras: Callable[[Any], list] | None = None  # section -> declared key parts (weights' sha256, model folders)
    packages: Callable[[Any], tuple[str, ...]] = lambda section: ()  # section -> the distributions it calls
    when: Callable[[Any], bool] | None = None  # FlowConfig -> whether it runs at all (None: always)
    drive: Callable | None = None  # (stage, plan, runner) -> the flow's result for it; None: run once
    cached: bool = True  # a finished run is served from its key (the report is written every time)
    check: Callable[[Any], None] | None = None  # FlowConfig -> raises on a bad input, before the first stage works
    config: type | None = None  # the type of its section (``flows.config.FlowConfig``'s field, checked there)
    # the hooks the runner and the Prefect tasks call, so neither names a stage:
    folder: Callable[[str, str], str] | None = None  # (key, label) -> its folder under the artifacts root
    given: Callable[[str, Any], dict] | None = None  # (read, FlowConfig) -> the entry of a read no stage wrote
    feeds: Callable[[Any, dict], Any] | None = None  # (FlowConfig, its manifest) -> the config later stages get
    watch: Callable[[Call, "Publisher"], None] | None = None  # before a flow run: what it reports while running
    publish: Callable[[Call, Any, "Publisher"], None] | None = None  # (call, manifest or user error, sink) after


class Publisher(Protocol):
    """Where a stage shows what it made beside the work (the flow: Prefect artifacts, ``flows.tasks``); keys are
    made artifact keys there."""

    def table(self, key: str, rows: list[dict], description: str | None = None) -> None: ...

    def markdown(self, key: str, markdown: str, description: str | None = None) -> None: ...

    def progress(self, key: str, description: str) -> Callable[[float], None]: ...


def roots(*modules: str) -> Callable[[Any], tuple[str, ...]]:
    return lambda section: modules


def packages(*names: str) -> Callable[[Any], tuple[str, ...]]:
    return lambda section: names


def code_roots(stage: Stage, section: Any) -> tuple[str, ...]:
    """The modules whose import closure is the stage's code: its code roots and the schema modules of the tables it
    reads and writes (``data_schemas.<table>``; a schema edit re-keys those stages only)."""
    tables = [t for t in (n.rstrip("?") for n in (*stage.reads, *stage.writes)) if t in TABLE_NAMES]
    return (*stage.code(section), *(f"data_schemas.{t}" for t in tables))


def code_of(stage: Stage, section: Any) -> str:
    """The stage's code version: the sources and declared data files of ``code_roots``' import closure, the
    record's own module (its adapter: not in that closure, which would reach every stage through the flow's
    config) and the installed versions of the packages it declares."""
    own = module_path(stage.run.__module__)
    return key_of(closure_version(*code_roots(stage, section)), files_version([own] if own else []),
                  package_versions(stage.packages(section)))


def stage_key(stage: Stage, read_hashes: list, section: Any, extras: list | tuple = ()) -> str:
    """The one key of every stage (and of its Prefect cache record): name, the content hashes of what it reads,
    its typed section without its ``unkeyed`` fields, its code (``code_of``), its declared extras."""
    declared = stage.extras(section) if stage.extras else []
    return key_of(stage.name, read_hashes, keyed(section), code_of(stage, section), *declared, *extras)


def folder_key(model: str) -> list:
    """A ``local-dir:`` model folder's content (each file's name and sha256: the tokenizer, the config, the
    weights) as key parts; nothing for an architecture name (its code is in the code version)."""
    if not model.startswith("local-dir:"):
        return []
    from data_schemas.provenance import file_sha256

    folder = Path(model.removeprefix("local-dir:"))
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: the local-dir model folder does not exist")
    return [[(f.name, file_sha256(f)) for f in sorted(folder.iterdir()) if f.is_file()]]


def weights_key(path: str | None) -> str | None:
    """A weights file's sha256 (a file replaced at the same path is new weights), else the name (an open_clip
    pretrained tag) or None."""
    from data_schemas.provenance import file_sha256

    return file_sha256(path) if path and Path(path).is_file() else path
