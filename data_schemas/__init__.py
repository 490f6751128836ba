"""Table schemas, their DuckDB checks, and the shared Parquet read/write (no torch/spacy/prefect here)."""
from . import captions, errors, eval_results, patch_masks, regions, scene_graphs, token_masks
from ._io import (Check, ShardedTableWriter, TableError, TableSpec, is_complete, read_manifest, read_table,
                  table_files, write_table)

TABLES: dict[str, TableSpec] = {m.SPEC.name: m.SPEC for m in (
    captions, scene_graphs, token_masks, regions, patch_masks, errors, eval_results)}

__all__ = ["TABLES", "Check", "TableSpec", "TableError", "ShardedTableWriter", "write_table", "read_table",
           "read_manifest", "is_complete", "table_files"]
