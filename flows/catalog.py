"""The table catalog: what the stages before a node made, by table name, handed to the node (no node reads a
manifest itself). Built from the manifests the flow collected (``stage name -> manifest``); every table name is
written by one stage, except ``errors`` (one per stage)."""
from __future__ import annotations

from dataclasses import dataclass, field

from data_schemas import TABLES, read_table

# the mask tables the validate gate checks, and the ones training reads
MASK_TABLES = ("captions", "scene_graphs", "token_masks", "regions", "patch_masks")
TRAINING_TABLES = ("captions", "token_masks", "scene_graphs", "regions")
ERROR_STAGES = ("captions", "parse", "ground", "masks")


@dataclass
class Catalog:
    manifests: dict[str, dict] = field(default_factory=dict)  # stage name (or "source") -> its manifest

    def _stage_of(self, table: str) -> dict:
        for name, m in self.manifests.items():
            if table in m.get("tables", {}):
                return m
        raise KeyError(f"no stage of this run wrote the table {table!r} (stages: {sorted(self.manifests)})")

    def dir(self, table: str) -> str:
        """The directory of ``table``."""
        return self._stage_of(table)["tables"][table]["dir"]

    def count(self, table: str) -> int:
        return self._stage_of(table)["tables"][table]["rows"]

    def rows(self, table: str, columns: list[str] | None = None) -> list[dict]:
        return read_table(TABLES[table], self.dir(table), columns).to_pylist()

    def has(self, table: str) -> bool:
        return any(table in m.get("tables", {}) for m in self.manifests.values())

    def hash(self, stage: str) -> str:
        """A stage's content hash (``source``: the data's)."""
        return self.manifests[stage]["content_hash"]

    def get(self, stage: str, field_: str, default=None):
        """A field of a stage's manifest (e.g. the captions stage's ``root`` and ``source``)."""
        return self.manifests[stage].get(field_, default)

    # ---- what the later nodes read ---------------------------------------------------------------------
    @property
    def root(self) -> str:
        """The image root every stage after captions reads."""
        return self.manifests["captions"]["root"]

    def mask_tables(self) -> dict:
        """{table: dir} of the mask tables, and every stage's errors table (the validate gate's input)."""
        return {**{t: self.dir(t) for t in MASK_TABLES},
                "errors": [self.manifests[s]["tables"]["errors"]["dir"] for s in ERROR_STAGES]}

    def error_hashes(self) -> list[str]:
        """The content hashes of every stage's errors table (not part of the stages' own content hashes)."""
        return [self.manifests[s]["tables"]["errors"]["content_hash"] for s in ERROR_STAGES]

    def training_tables(self) -> dict:
        return {t: self.dir(t) for t in TRAINING_TABLES}

    def table_hashes(self) -> list[str]:
        """The content hashes of the stages whose tables training reads."""
        return [self.hash(s) for s in ("parse", "ground", "captions")]

    def subset(self, stages: tuple[str, ...]) -> dict[str, dict]:
        """The manifests of ``stages`` (what a preprocessing stage's task receives: plain JSON)."""
        return {s: self.manifests[s] for s in stages}
