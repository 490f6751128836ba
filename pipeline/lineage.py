"""Which tables belong together. Each manifest records what its table was made from (``inputs``: the content hashes
of the tables, world or source its stage read; ``data_schemas.made_from``). A *run* is one set of tables joined by
those records: a last table (one no other table was made from), the tables it was made from back to the captions,
and the tables written beside each of them (``token_masks`` beside ``scene_graphs``, each folder's ``errors``). A
root holding several runs (two parse settings over one captions table, a copied folder) is never read as the newest
table of each name: the verbs use one run, say so in one line, and ``--run FOLDER`` picks another; a run whose
table was made from another version of a table beside it (captions rewritten, parse not rerun) or from a world
regenerated since is refused in one line naming both.

Tables written before manifests recorded ``inputs`` join every run that lacks a table of their name (the newest)."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from data_schemas import TABLES, InputFileError

SHARED = ("errors", "eval_results")  # written by several stages / the history: never an edge of a run's lineage


class LineageError(InputFileError):
    """Tables that do not belong to one run, or a table made from an input that has changed since."""


@dataclass
class Found:
    """A complete table found under a root: its name, folder and manifest (``stamp``: newest last)."""
    name: str
    dir: Path
    manifest: dict
    stamp: str

    @property
    def hash(self) -> str | None:
        return self.manifest.get("content_hash")

    @property
    def inputs(self) -> dict:
        inputs = self.manifest.get("inputs")
        return inputs if isinstance(inputs, dict) else {}

    @property
    def legacy(self) -> bool:
        """Written before manifests recorded their inputs."""
        return "inputs" not in self.manifest


def found_table(mpath: Path, name: str) -> Found:
    manifest = json.loads(mpath.read_text(encoding="utf-8"))
    return Found(name, mpath.parent, manifest, f"{manifest.get('created', '')}|{mpath.stat().st_mtime_ns:020d}")


def _nearest(candidates: list[Found], to: Path) -> Found:
    """Of tables with one content hash (a copied folder holds the same), the one closest to ``to``'s folder."""
    def shared(f: Found) -> int:
        return len([a for a, b in zip(f.dir.parts, to.parts) if a == b])
    return max(candidates, key=lambda f: (shared(f), f.stamp))


def _run_of(leaf: Found, tables: list[Found]) -> dict[str, Found]:
    """The run of ``leaf``: what it was made from (transitively, by content hash) and what was written beside each
    member; one table of each name, the first reached."""
    by_hash: dict[tuple[str, str], list[Found]] = {}
    for f in tables:
        by_hash.setdefault((f.name, f.hash), []).append(f)
    run: dict[str, Found] = {}
    queue = [leaf]
    while queue:
        f = queue.pop(0)
        if f.name in run:
            continue
        run[f.name] = f
        queue += [_nearest(by_hash[(n, h)], f.dir) for n, h in sorted(f.inputs.items()) if (n, h) in by_hash]
        queue += [g for g in tables if g.dir.parent == f.dir.parent and g.name not in run]
    return run


def runs(tables: list[Found]) -> list[dict[str, Found]]:
    """The runs of ``tables`` (not ``errors`` or the history), newest first."""
    tables = [f for f in tables if f.name not in SHARED]
    made_from = {(n, h) for f in tables for n, h in f.inputs.items()}
    leaves = [f for f in tables if (f.name, f.hash) not in made_from]
    found: list[dict[str, Found]] = []
    for leaf in sorted(leaves, key=lambda f: f.stamp, reverse=True):
        run = _run_of(leaf, tables)
        for f in sorted((f for f in tables if f.legacy), key=lambda f: f.stamp, reverse=True):
            run.setdefault(f.name, f)  # a table without a lineage record: the newest of its name
        members = {id(f) for f in run.values()}
        if not any(members <= {id(f) for f in other.values()} for other in found):
            found = [o for o in found if not {id(f) for f in o.values()} <= members] + [run]
    return sorted(found, key=lambda r: max(f.stamp for f in r.values()), reverse=True)


def run_names(found: list[dict[str, Found]], root: Path) -> list[str]:
    """Each run as its user names it (``--run``): the folder holding all its tables, relative to the root, or where
    runs share that folder (a flow's artifacts root), the folder of its last table."""
    def rel(p: Path) -> str:
        try:
            return str(p.relative_to(root)) or "."
        except ValueError:
            return str(p)

    common = [rel(Path(os.path.commonpath([str(f.dir.parent) for f in r.values()]))) for r in found]
    last = [rel(max(r.values(), key=lambda f: f.stamp).dir.parent) for r in found]
    return [c if common.count(c) == 1 and c != "." else t for c, t in zip(common, last)]


def choose(found: list[dict[str, Found]], root: Path, pick: str | Path | None,
           note: Callable[[str], None]) -> dict[str, Found]:
    """One run: the one under ``pick`` (a folder, relative to the root or not), else the newest (said in one line
    when there are several)."""
    if pick is not None:
        folder = Path(pick) if Path(pick).is_absolute() or Path(pick).exists() else root / pick
        folder = folder.resolve()
        under = [r for r in found if any(f.dir.resolve().is_relative_to(folder) for f in r.values())]
        inside = [r for r in under if all(f.dir.resolve().is_relative_to(folder) for f in r.values())]
        under = inside if len(inside) == 1 else under  # the one run wholly under it, before runs reaching into it
        names = ", ".join(run_names(found, root))
        if not under:
            raise LineageError(f"--run {pick}: no run of {root} has a table under {folder} (its runs: {names})")
        if len(under) > 1:
            raise LineageError(f"--run {pick}: {len(under)} runs of {root} have tables under it (its runs: {names}): "
                               "give the folder of a run's last tables")
        return under[0]
    if len(found) > 1:
        names = run_names(found, root)
        note(f"{root} holds {len(found)} runs (tables of different lineage): using the newest, {names[0]}; "
             f"--run FOLDER picks another: {', '.join(names[1:])}")
    return found[0] if found else {}


def check_run(run: dict[str, Found]) -> None:
    """Refuse a run with a table made from another version of a table beside it (one line naming both)."""
    for f in run.values():
        for name, h in sorted(f.inputs.items()):
            other = run.get(name)
            if other is not None and name in TABLES and name not in SHARED and other.hash != h:
                raise LineageError(
                    f"{f.dir} was made from {name} {str(h)[:12]}, but {other.dir} is {str(other.hash)[:12]} (written "
                    f"{other.manifest.get('created', '?')}, after it): the tables belong to different runs; rerun the "
                    f"stages after {name} into this folder, or give the folder of one run")


def check_world(tables: dict, images: str | Path | None) -> None:
    """Refuse tables made from a synthetic world that has been regenerated in ``images`` since (another seed or size
    into the same folder): one line naming the captions table and the world."""
    from data_schemas import read_manifest
    from pipeline.world_scene import world_identity

    captions = tables.get("captions")
    if images is None or captions is None:
        return
    made = (read_manifest(captions).get("inputs") or {}).get("world")
    now = world_identity(images)
    if made and now and made != now:
        seed = json.loads((Path(images) / "world.json").read_text()).get("config", {}).get("seed")
        raise LineageError(f"{captions} was made from the world in {images} as it was (world {made[:12]}), but "
                           f"{images} now holds another world ({now[:12]}, seed {seed}: regenerated since): rerun "
                           f"macco captions, parse, ground and masks from it, or give the world it was made from")


def stderr_note(line: str) -> None:
    print(f"note: {line}", file=sys.stderr)
