"""Sharded stages and content hashes: per-item stages run in shards (``shard_size`` items each), every shard one
Parquet part that survives a kill, so a resumed stage redoes only the unfinished shards (``run_sharded``)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable

from data_schemas import TABLES, ShardedTableWriter, is_complete, read_manifest
from data_schemas.config import keyed


def tree_hash(root: str | Path) -> str:
    """sha256 over every file under ``root``: its relative path and its bytes, each length-prefixed (no two trees
    hash alike by moving bytes between a name and a content), in path order."""
    root = Path(root)
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            for part in (str(p.relative_to(root)).encode(), p.read_bytes()):
                h.update(len(part).to_bytes(8, "little"))
                h.update(part)
    return h.hexdigest()


def content_hash(obj) -> str:
    """sha256 of a JSON-serialisable value (rows, ids), key order independent."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def only_stage(stage: str) -> dict[str, list[str]]:
    """``write_table``'s ``replaces`` for an ``errors`` table: a stage's write replaces its own rows only, so
    stages writing into one folder (``macco captions --out T`` then ``macco parse T/captions --out T``) keep
    each other's rows."""
    return {"stage": [stage]}


def n_shards_for(n_items: int, shard_size: int) -> int:
    return max(1, -(-n_items // shard_size))


def run_sharded(items: list, shard_size: int, out_dirs: dict[str, Path],
                fn: Callable[[list], dict[str, list[dict]]], *, config: Any, version: str,
                progress: Callable[[int, int], None] | None = None, only: Iterable[int] | None = None,
                finalize: bool = True, reuse: bool = False, inputs: str | None = None,
                replaces: dict[str, dict] | None = None) -> dict[str, dict]:
    """Run ``fn`` over shards of ``items``; each call returns {table: rows}; finished shards are skipped.

    ``only`` restricts the call to some shards (an orchestrator maps shards over workers); ``finalize=False``
    leaves the table unpublished (a later call with ``only=[]`` publishes it once every shard exists).
    With ``reuse`` (content-keyed output directories) complete outputs are returned as they are. Unfinished
    shards of a killed run are kept only if they were written with the same config, code and inputs:
    ``inputs`` is a content hash of what ``fn`` reads (default: of ``items`` themselves), so an edited caption
    with the same count is not an old shard's. ``replaces``: {table: {column: values}} for a table shared with
    other writers (``errors``: only this stage's rows are replaced, ``write_table``). ``config``: the stage's typed
    config; its fields flagged ``unkeyed`` (device, batch size, shard size) are in neither the fingerprint nor the
    manifest, as in the stage key (``data_schemas.config.keyed``); the shard layout is (``shard_size``, the count).
    """
    config = keyed(config)
    if reuse and all(is_complete(d) for d in out_dirs.values()):
        return {name: read_manifest(d) for name, d in out_dirs.items()}
    n_shards = n_shards_for(len(items), shard_size)
    if inputs is None:
        inputs = content_hash(items)
    fingerprint = hashlib.sha256(json.dumps([config, version, shard_size, len(items), inputs], sort_keys=True,
                                            default=str).encode()).hexdigest()
    writers = {name: ShardedTableWriter(TABLES[name], d, n_shards, fingerprint) for name, d in out_dirs.items()}
    todo = set(range(n_shards)) if only is None else set(only)
    for i in range(n_shards):
        if i not in todo or all(w.has_shard(i) for w in writers.values()):
            if progress:
                progress(i + 1, n_shards)
            continue
        out = fn(items[i * shard_size:(i + 1) * shard_size])
        for name, w in writers.items():
            w.write_shard(i, TABLES[name].from_rows(out.get(name, [])))
        del out  # not held while the next shard works: a stage holds one shard's rows at a time
        if progress:
            progress(i + 1, n_shards)
    if not finalize:
        return {}
    extra = {"shards": n_shards, "shard_size": shard_size}
    return {name: w.finalize(config=config, code_version=version, extra=extra, replaces=(replaces or {}).get(name))
            for name, w in writers.items()}
