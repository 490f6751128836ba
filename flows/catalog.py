"""The catalog: what the stages before a stage made, by name, handed to the stage (no stage reads another's manifest
itself). Every stage's manifest lists its ``outputs`` (a table: ``{kind: table, dir, content_hash, rows}``; other
outputs: their folder or fields and a content hash); every name is written by one stage, except ``errors`` (one
table per stage that writes one). Built by the flow from the manifests, or by a ``macco`` verb from the tables in
the folders it is given."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from data_schemas import TABLES, read_table


@dataclass
class Catalog:
    entries: dict[str, dict] = field(default_factory=dict)  # output name -> its entry
    errors: dict[str, dict] = field(default_factory=dict)  # stage -> its errors table's entry

    def add(self, stage: str, manifest: dict) -> None:
        """A finished stage's outputs (its manifest's ``outputs``)."""
        for name, entry in manifest.get("outputs", {}).items():
            if name == "errors":
                self.errors[stage] = entry
            else:
                self.entries[name] = entry

    def has(self, name: str) -> bool:
        return name in self.entries or (name == "errors" and bool(self.errors))

    def entry(self, name: str) -> dict:
        if name not in self.entries:
            raise KeyError(f"no stage of this run wrote {name!r} (written: {sorted(self.entries)})")
        return self.entries[name]

    def hash(self, name: str) -> str | list[str] | None:
        """The content hash of ``name``; ``errors``: every stage's errors table's, in stage order; a name ending in
        ``?`` is optional (None when absent)."""
        if name.endswith("?"):
            return self.hash(name[:-1]) if self.has(name[:-1]) else None
        if name == "errors":
            return [e["content_hash"] for _, e in sorted(self.errors.items())]
        return self.entry(name)["content_hash"]

    def hashes(self, names: tuple[str, ...]) -> list:
        return [self.hash(n) for n in names]

    def lineage(self) -> dict[str, str]:
        """{name: content hash} of what the catalog holds (not ``errors``: several stages write it): what the tables a
        stage writes from it record as their ``inputs`` (``data_schemas.made_from``)."""
        return {n: e["content_hash"] for n, e in self.entries.items() if isinstance(e.get("content_hash"), str)}

    def subset(self, names: tuple[str, ...]) -> "Catalog":
        """The entries a stage reads (its ``reads``; optional ones when present)."""
        plain = [n.rstrip("?") for n in names]
        return Catalog({n: e for n, e in self.entries.items() if n in plain},
                       dict(self.errors) if "errors" in plain else {})

    # ---- tables ------------------------------------------------------------------------------------------------
    def dir(self, table: str) -> str:
        return self.entry(table)["dir"]

    def count(self, table: str) -> int:
        return self.entry(table)["rows"]

    def rows(self, table: str, columns: list[str] | None = None) -> list[dict]:
        return read_table(TABLES[table], self.dir(table), columns).to_pylist()

    def iter_rows(self, table: str, columns: list[str] | None = None, batch: int = 65_536) -> Iterator[dict]:
        """The rows of ``table`` one batch at a time: the table held as Arrow columns, a batch as row dicts."""
        for b in read_table(TABLES[table], self.dir(table), columns).to_batches(max_chunksize=batch):
            yield from b.to_pylist()

    def table_names(self) -> tuple[str, ...]:
        """Every table the catalog holds (``errors`` once)."""
        tables = [n for n, e in self.entries.items() if e.get("kind") == "table"]
        return (*tables, *(("errors",) if self.errors else ()))

    def tables(self, names: tuple[str, ...]) -> dict[str, Any]:
        """{table: dir} of ``names``; ``errors``: the list of every stage's errors table (the validate gate's)."""
        out: dict[str, Any] = {n: self.dir(n) for n in names if n != "errors"}
        if "errors" in names:
            out["errors"] = [e["dir"] for _, e in sorted(self.errors.items())]
        return out

    def get(self, name: str, field_: str, default=None):
        """A field of an entry (e.g. ``images``' ``dir``, ``captions``' ``source``)."""
        return self.entries.get(name, {}).get(field_, default)

    @property
    def image_root(self) -> str:
        """The folder the captions table's ``file_name`` values are relative to."""
        return self.entry("images")["dir"]


def table_entry(manifest: dict, path: str | Path) -> dict:
    """A table's catalog entry from its manifest (``write_table``'s return value) and its folder."""
    return {"kind": "table", "dir": str(path), "content_hash": manifest["content_hash"], "rows": manifest["rows"]}


def folder_catalog(tables: dict[str, Path | list[Path]], **entries: dict) -> Catalog:
    """The catalog of tables found in a user's folders (``pipeline.validate.discover_tables``) plus ``entries``
    (e.g. ``images``: the image root a verb is given): what a ``macco`` verb hands the stage it runs; tables made
    from a world that ``images`` no longer holds are refused (``pipeline.lineage.check_world``)."""
    from data_schemas import read_manifest
    from pipeline.lineage import check_world

    check_world(tables, entries.get("images", {}).get("dir"))  # a world regenerated since the tables: refused
    cat = Catalog(dict(entries))
    for name, paths in tables.items():
        if name == "eval_results":  # the history: every table of it found, read as one
            dirs = paths if isinstance(paths, list) else [paths]
            cat.entries[name] = {"kind": "table", "dir": dirs, "content_hash": None, "rows": None}
            continue
        for i, d in enumerate(paths if isinstance(paths, list) else [paths]):
            e = table_entry(read_manifest(d, name), d)
            if name == "errors":
                cat.errors[f"folder{i}"] = e
            else:
                cat.entries[name] = e
    return cat


# ---- a stage record's paths, relative to the artifacts root ------------------------------------------------------
ROOT_MARK = "$ARTIFACTS"  # stands for the artifacts root in a stored stage record (stage.json)


def portable(obj: Any, root: str | Path) -> Any:
    """``obj`` (a stage record) with every path under ``root`` written as ``$ARTIFACTS/<relative path>``: a copied or
    moved artifacts folder names its own tables, never the original's (which it would serve as Cached). Paths
    outside it (a user's COCO root) stay as they are."""
    given = str(root)
    bases = {os.path.abspath(given), os.path.realpath(given)}

    def one(s: str) -> str:
        if not (os.path.isabs(s) or s == given or s.startswith(given.rstrip(os.sep) + os.sep)):
            return s  # not a path (a source name, a hash) or a relative path elsewhere
        for base in bases:
            full = os.path.abspath(s)
            if full == base or full.startswith(base.rstrip(os.sep) + os.sep):
                return ROOT_MARK + full[len(base.rstrip(os.sep)):]
        return s

    return _walk(obj, one)


def located(obj: Any, root: str | Path) -> Any:
    """``portable``'s inverse: ``$ARTIFACTS/...`` as a path under ``root`` (the folder the record is read in)."""
    return _walk(obj, lambda s: str(Path(root) / s[len(ROOT_MARK) + 1:]) if s.startswith(ROOT_MARK + "/")
                 else str(root) if s == ROOT_MARK else s)


def _walk(obj: Any, fn) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {fn(k) if isinstance(k, str) else k: _walk(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_walk(v, fn) for v in obj]
    return obj
